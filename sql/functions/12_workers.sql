-- 12_workers.sql: the registry runners heartbeat into, and the maintain() steps that
-- keep it true: flagging workers that went silent holding jobs, forgetting old ones.

-- worker_heartbeat records that worker id is alive (inserting it on first call) with
-- what it serves, which models it holds warm and how often it heartbeats (cadence: a
-- worker silent for three cadences while holding jobs is flagged dead by maintain()).
-- kinds lists the job kinds it has handlers for (NULL: any), for queue_stats.unhandled.
-- A heartbeat clears the dead flag. Returns the time recorded.
--
-- The first heartbeat registers the id and binds it to the session's login role
-- (login_role, session_user): from then on only that role may act under the id
-- (check_worker_login), heartbeats included, until the row is forgotten
-- (forget_workers). cadence is above 0 and at most max_cadence() (an hour).
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
  perform pgrun.check_worker_id(id); -- the format, required of every session
  perform pgrun.check_worker_login(id, registering => true);
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
  perform pgrun.check_interval('cadence', cadence, pgrun.max_cadence());
  -- check_worker_login let an existing row through only for its own login (or the
  -- engine's session); the row keeps the login that registered it.
  insert into pgrun.workers as w (id, host, pid, queues, models, version, state, started_at, last_seen, cadence,
                                  servable, kinds, login_role)
  values (worker_heartbeat.id, worker_heartbeat.host, worker_heartbeat.pid,
          coalesce(worker_heartbeat.queues, '{}'), coalesce(worker_heartbeat.models, '{}'),
          worker_heartbeat.version, worker_heartbeat.state, v_now, v_now,
          coalesce(worker_heartbeat.cadence, interval '10 seconds'), coalesce(worker_heartbeat.servable, '{}'),
          worker_heartbeat.kinds, session_user)
  on conflict (id) do update
    set host = excluded.host, pid = excluded.pid, queues = excluded.queues,
        models = excluded.models, version = excluded.version, state = excluded.state,
        last_seen = excluded.last_seen, cadence = excluded.cadence, flagged_dead_at = null,
        servable = excluded.servable, kinds = excluded.kinds,
        login_role = coalesce(w.login_role, excluded.login_role)
    -- Two logins registering one new id at once: the first insert wins it.
    where w.login_role is null or w.login_role = session_user or pgrun.session_is_engine();
  if not found then
    perform pgrun.check_worker_login(id);
  end if;
  return v_now;
end;
$$;

-- queue_peers counts, for each of queues, the other live workers (state running,
-- worker_alive) that serve it. A runner that shares a queue keeps one claim of it in
-- flight instead of two (runner/fetcher.go): every claim and completion in flight is
-- a statement on the server's cores, and the peers' claims step over each other's
-- rows. It tells a worker counts only, nothing else of pgrun.workers. At most 1000
-- queues, as worker_heartbeat.
create or replace function pgrun.queue_peers(worker text, queues text[])
returns table (queue text, peers integer)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
begin
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  if queues is null or cardinality(queues) > 1000 then
    raise exception 'queue_peers takes 0 to 1000 queues, got %', coalesce(cardinality(queues)::text, 'NULL')
      using errcode = '22023', hint = 'Pass the queues this worker serves, as worker_heartbeat does.';
  end if;
  return query
  select q, (select count(*)::integer from pgrun.workers w
             where w.id <> queue_peers.worker and q = any (w.queues) and w.state = 'running'
               and pgrun.worker_alive(w, v_now))
  from unnest(queues) q;
end;
$$;

-- flag_dead_workers flags workers that went silent for worker_silence (three heartbeat
-- cadences) while holding running jobs (flagged_dead_at, and a worker.dead event on
-- each of their jobs); the lease reaper brings the jobs back. A heartbeat clears the
-- flag. Within worker_silence after a server start or a promotion (server_epochs) it
-- is not flagged: its silence was the outage's, and it has not had the time to come
-- back yet. Returns how many were flagged.
create or replace function pgrun.flag_dead_workers()
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now     timestamptz := pgrun.clock();
  v_since   timestamptz := pgrun.epoch_since();
  v_silent  text[];
  n         integer;
begin
  -- The silent workers first, from the small workers table: usually there are none,
  -- and the running jobs are not read at all.
  v_silent := array(select w.id from pgrun.workers w
                    where w.flagged_dead_at is null and w.state <> 'stopped'
                      and not pgrun.worker_alive(w, v_now)
                      and not pgrun.in_epoch_grace(v_since, pgrun.worker_silence(w.cadence), v_now));
  if cardinality(v_silent) = 0 then
    return 0;
  end if;
  with dead as (
    update pgrun.workers w set flagged_dead_at = v_now
    where w.id = any (v_silent) and w.flagged_dead_at is null
      and exists (select 1 from pgrun.jobs j where j.status = 'running' and j.claimed_by = w.id)
    returning w.id, w.host, w.last_seen
  ),
  logged as (
    insert into pgrun.job_events (job_id, at, event, level, message, fields)
    select j.id, v_now, 'worker.dead', 'error',
           format('worker %s on %s last heartbeat at %s: flagged dead', d.id, d.host, d.last_seen),
           jsonb_build_object('worker', d.id, 'host', d.host, 'last_seen', d.last_seen)
    from dead d join pgrun.jobs j on j.claimed_by = d.id and j.status = 'running'
  )
  select count(*) into n from dead;
  return n;
end;
$$;

-- forget_workers deletes workers not seen for after (default a day) that hold no
-- running job (the id, and the login it is bound to, stay while a claim under it may
-- still report). Returns how many.
create or replace function pgrun.forget_workers(after interval default interval '1 day')
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  n integer;
begin
  perform pgrun.check_interval('after', after, pgrun.max_retention());
  delete from pgrun.workers w where w.last_seen < pgrun.clock() - coalesce(after, interval '1 day')
    and not exists (select 1 from pgrun.jobs j where j.status = 'running' and j.claimed_by = w.id);
  get diagnostics n = row_count;
  return n;
end;
$$;
