-- 12_workers.sql: the registry runners heartbeat into.

-- worker_heartbeat records that worker id is alive (inserting it on first call) with
-- what it serves, which models it holds warm and how often it heartbeats (cadence: a
-- worker silent for three cadences while holding jobs is flagged dead by maintain()).
-- kinds lists the job kinds it has handlers for (NULL: any), for queue_stats.unhandled.
-- A heartbeat clears the dead flag. Returns the time recorded.
create or replace function pgrun.worker_heartbeat(
  id       text,
  host     text,
  pid      integer,
  queues   text[] default '{}',
  models   text[] default '{}',
  version  text default null,
  state    text default 'running',
  cadence  interval default interval '10 seconds',
  servable text[] default '{}',
  kinds    text[] default null
)
returns timestamptz
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
begin
  perform pgrun.check_worker_id(id);
  if host is null or host = '' or length(host) > 255 then
    raise exception 'host % is not valid', coalesce(quote_literal(left(host, 40)), 'NULL')
      using errcode = '22023', hint = 'Pass the host name, 1 to 255 characters.';
  end if;
  if cardinality(queues) > 1000 or cardinality(models) > 1000 or cardinality(servable) > 1000 or cardinality(kinds) > 10000 then
    raise exception 'worker % lists too many queues, models or kinds', id
      using errcode = '22023', hint = 'At most 1000 queues, 1000 models, 1000 servable models and 10000 kinds per worker.';
  end if;
  if state is null or state not in ('running', 'draining', 'stopped') then
    raise exception 'worker state % is not valid', coalesce(quote_literal(state), 'NULL')
      using errcode = '22023', hint = 'Use running, draining or stopped.';
  end if;
  perform pgrun.check_positive_interval('cadence', cadence);
  insert into pgrun.workers as w (id, host, pid, queues, models, version, state, started_at, last_seen, cadence, servable, kinds)
  values (worker_heartbeat.id, worker_heartbeat.host, worker_heartbeat.pid,
          coalesce(worker_heartbeat.queues, '{}'), coalesce(worker_heartbeat.models, '{}'),
          worker_heartbeat.version, worker_heartbeat.state, v_now, v_now,
          coalesce(worker_heartbeat.cadence, interval '10 seconds'), coalesce(worker_heartbeat.servable, '{}'),
          worker_heartbeat.kinds)
  on conflict (id) do update
    set host = excluded.host, pid = excluded.pid, queues = excluded.queues,
        models = excluded.models, version = excluded.version, state = excluded.state,
        last_seen = excluded.last_seen, cadence = excluded.cadence, flagged_dead_at = null,
        servable = excluded.servable, kinds = excluded.kinds;
  return v_now;
end;
$$;
