-- 62_maintain.sql: maintain(), the periodic work that keeps jobs from being lost or
-- stuck, as an orchestrator over named steps. Each step is a function of its own,
-- callable alone (from psql or pg_cron), and safe to run concurrently with itself:
-- it claims its rows with FOR UPDATE SKIP LOCKED and re-checks them in a guarded
-- UPDATE. The steps live with what they act on (note_server_epoch in 11_failover.sql,
-- the worker steps in 12_workers.sql, drain_outbox in 34_dispatch.sql, fire_schedules
-- in 51_schedule.sql, the lease steps in 60_leases.sql, prune_history in
-- 61_history.sql); this file holds the maintenance leader, each step's cadence and the
-- orchestrator, which runs every step in a subtransaction, so one failing step (or
-- row) is reported by name and the other steps still run that round.

-- take_maintenance makes leader the maintenance leader for lease, or renews its
-- lease, and returns true; it returns false while another holder's lease is current.
-- A leader that freezes or is cut off stops renewing, and its lease lapses: any
-- caller takes over after at most one lease length; one whose session is seen gone
-- (worker_session_gone, 12_workers.sql) loses it at once. The row is read with SKIP
-- LOCKED, so a candidate never waits on the leader's round.
create or replace function pgrun.take_maintenance(leader text, lease interval)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now  timestamptz := pgrun.clock();
  r      pgrun.maintenance_leader;
begin
  perform pgrun.check_worker_id(leader);
  if lease is null or lease <= interval '0' or lease > interval '1 hour' then
    raise exception 'leader lease % is not valid', coalesce(lease::text, 'NULL')
      using errcode = '22023', hint = 'Pass a lease of three maintenance rounds, such as ''3 seconds'' (at most an hour).';
  end if;
  select * into r from pgrun.maintenance_leader m where m.name = 'maintain' for update skip locked;
  if not found then
    -- The leader is in the middle of its round right now (a plain read does not
    -- wait for its lock), or there is no row yet.
    perform 1 from pgrun.maintenance_leader m where m.name = 'maintain';
    if found then
      return false;
    end if;
    insert into pgrun.maintenance_leader (name, holder, expires_at, since)
    values ('maintain', leader, v_now + lease, v_now)
    on conflict (name) do nothing;
    return found;
  end if;
  -- A holder whose database session is seen gone (worker_session_gone: its process
  -- died) loses the lease at once rather than after it, so that the jobs it held come
  -- back within a round.
  if r.holder <> leader and r.expires_at >= v_now and not pgrun.worker_session_gone(r.holder) then
    return false;
  end if;
  update pgrun.maintenance_leader m
  set holder = leader, expires_at = v_now + lease,
      since = case when r.holder = leader then r.since else v_now end
  where m.name = 'maintain';
  return true;
end;
$$;

-- fail_broken_job ends job id failed (class maintenance_error, naming step and the
-- error) when a maintenance step cannot process its row, so that one row never stops
-- maintenance. If the row cannot even be failed as it is (a key too long for its
-- index, from before keys were bounded), it is failed without its keys, whose
-- digests are kept in the error.
create or replace function pgrun.fail_broken_job(id bigint, step text, message text)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now  timestamptz := pgrun.clock();
  v_err  jsonb := jsonb_build_object('class', 'maintenance_error', 'step', step,
                    'message', format('maintenance step %s failed on this job: %s', step, left(message, 2000)),
                    'at', v_now);
begin
  begin
    update pgrun.jobs j
    set status = 'failed', finished_at = v_now, lease_expires_at = null, error = v_err
    where j.id = fail_broken_job.id and pgrun.is_active(j.status);
  exception when others then
    update pgrun.jobs j
    set status = 'failed', finished_at = v_now, lease_expires_at = null,
        error = v_err || jsonb_build_object('unique_key_md5', md5(j.unique_key),
                                            'concurrency_key_md5', md5(j.concurrency_key)),
        unique_key = null, concurrency_key = null
    where j.id = fail_broken_job.id and pgrun.is_active(j.status);
  end;
  if found then
    perform pgrun.add_event(id, 'job.failed', 'error', v_err ->> 'message',
      jsonb_build_object('class', 'maintenance_error', 'step', step, 'final', true));
  end if;
end;
$$;

-- maintain_rows runs step (reap_expired_leases or fail_overdue) on each of ids in a
-- subtransaction of its own; a row the step fails on is failed by fail_broken_job.
-- It is maintain()'s fallback after a step failed on a whole batch. Returns
-- {"done": n, "broken": [ids]}.
create or replace function pgrun.maintain_rows(
  step          text,
  ids           bigint[],
  lease_budget  integer,
  stall_window  interval
)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  x       bigint;
  done    integer := 0;
  broken  bigint[] := '{}';
begin
  foreach x in array coalesce(ids, '{}') loop
    begin
      case step
        when 'reap_expired_leases' then perform pgrun.reap_expired_leases(lease_budget, 1, array[x]);
        when 'fail_overdue' then perform pgrun.fail_overdue(stall_window, 1, array[x]);
      end case;
      done := done + 1;
    exception when others then
      broken := broken || x;
      begin
        perform pgrun.fail_broken_job(x, step, sqlerrm);
      exception when others then
        null; -- reported in broken; the next round tries again
      end;
    end;
  end loop;
  return jsonb_build_object('done', done, 'broken', to_jsonb(broken));
end;
$$;

-- refresh_job_stats analyzes pgrun.jobs when the planner reckons it at a tenth or less
-- of the live rows the table's counters report (and they are over 10,000), and returns
-- whether it did. The planner scales the last ANALYZE's rows per page to the table's
-- present size, which holds while the table grows or shrinks; it fails when the last
-- ANALYZE (or VACUUM) saw the table nearly empty yet keeping its pages: a purge, an
-- ephemeral queue that deleted its jobs, a vacuum held back by a long transaction.
-- Refilled before autovacuum's next ANALYZE, the table then looks like a few rows
-- however many jobs it holds, and plans made meanwhile read all of it: each claim
-- sorted the whole backlog (a bitmap scan and an external sort, 560 ms a claim with
-- 900,000 queued, 30 times below the normal rate) and kept doing so, since a runner's
-- session keeps its plans until the table's statistics change. An ANALYZE is such a
-- change: it invalidates those plans. It never waits: if a vacuum or another ANALYZE
-- holds the table, it leaves the work to it. It runs as the engine (maintain's owner),
-- which may analyze the table.
create or replace function pgrun.refresh_job_stats()
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_tuples   real;
  v_pages    integer;
  v_live     bigint := pg_stat_get_live_tuples('pgrun.jobs'::regclass);
  v_estimate double precision;
begin
  select c.reltuples, c.relpages into v_tuples, v_pages from pg_class c where c.oid = 'pgrun.jobs'::regclass;
  -- Never analyzed or vacuumed (reltuples -1), or empty then (no pages): the planner
  -- estimates from the row width and the present size, which holds up.
  if v_tuples < 0 or v_pages = 0 or v_live <= 10000 then
    return false;
  end if;
  v_estimate := v_tuples / v_pages
                * (pg_relation_size('pgrun.jobs'::regclass) / current_setting('block_size')::integer);
  if v_live <= 10 * greatest(v_estimate, 1000) then
    return false;
  end if;
  begin
    lock table pgrun.jobs in share update exclusive mode nowait;
  exception when lock_not_available then
    return false;
  end;
  analyze pgrun.jobs;
  return true;
end;
$$;

-- set_maintenance_step sets how often maintain() runs step: '0' every round, else at
-- most once per every (up to a day), counted from the step's last run. It changes
-- nothing else: a step called alone ignores its cadence. An unknown step or a bad
-- interval raises 22023. Returns the step's row.
create or replace function pgrun.set_maintenance_step(step text, every interval)
returns pgrun.maintenance_steps
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  r pgrun.maintenance_steps;
begin
  if not exists (select 1 from pgrun.maintenance_steps s where s.step = set_maintenance_step.step) then
    raise exception 'maintenance step % is not known', coalesce(quote_literal(step), 'NULL')
      using errcode = '22023',
            hint = format('Use one of %s.', (select string_agg(s.step, ', ' order by s.step) from pgrun.maintenance_steps s));
  end if;
  if every is null or every < interval '0' or every > interval '1 day' then
    raise exception 'maintenance cadence % of step % is not valid', coalesce(every::text, 'NULL'), step
      using errcode = '22023',
            hint = 'Pass ''0'' to run the step every round, or an interval up to a day such as ''1 minute''.';
  end if;
  update pgrun.maintenance_steps s set every = set_maintenance_step.every
  where s.step = set_maintenance_step.step
  returning * into r;
  return r;
end;
$$;

-- step_ms is one entry of maintain()'s "steps": {"<step>": {"ms": wall-clock
-- milliseconds since began, to the microsecond, and the step's own counts}}: a step
-- that reports what it did (rows, promoted, workers) passes them as counts.
create or replace function pgrun.step_ms(step text, began timestamptz, counts jsonb default '{}')
returns jsonb
language sql
volatile
set search_path = pgrun, pg_catalog
as $$
  select jsonb_build_object(step, jsonb_build_object('ms',
           round(extract(epoch from clock_timestamp() - began) * 1000, 3)) || coalesce(counts, '{}'))
$$;

-- maintain does one round of periodic work and returns what it did as JSON. Steps,
-- in order (each is a function of its own, callable alone):
--   note_server_epoch    record a server start or promotion (11_failover.sql): leases and
--                        workers get a grace of their own length after it
--   reap_lost_sessions   flag dead the workers whose database session ended and hand their
--                        jobs back at once (12_workers.sql); its entry under "steps"
--                        carries "workers" (flagged dead), "rows" (their jobs handed
--                        back) and "failed" (of those, failed past lease_budget)
--   reap_expired_leases  requeue (or, past lease_budget, fail) jobs whose lease ran out
--   fail_overdue         the timeout rule, with the stall_window sign-of-life grace
--   flag_dead_workers    flag workers silent for three cadences while holding jobs
--   forget_workers       delete workers not seen for a day
--   drain_outbox         retry failed dispatches (fan-in, DAG expansion)
--   fire_schedules       enqueue due cron schedules, once per slot
--   prune_history        delete or archive finished jobs past their retention
--   wake_waits           queue again the durable awaits whose time ran out (35_durable.sql)
--   recheck_sequences    settle the sequences a REPEATABLE READ or SERIALIZABLE transaction
--                        moved (36_sequences.sql); its entry under "steps" carries
--                        "promoted", the jobs it queued
--   rollup_minutes       count the closed minutes' endings into the rollups the dashboard's
--                        charts and errors page read (74_rollups.sql); its entry under
--                        "steps" carries "rows", the minutes it rolled up
-- Each step handles at most batch rows and runs in a subtransaction: a step that
-- fails is rolled back alone and named under "errors" with its message, and the
-- other steps still run. If reap_expired_leases or fail_overdue fails on a batch,
-- its rows are retried one by one and a row that still fails ends failed (class
-- maintenance_error, naming the step).
--
-- Cadence: every step but note_server_epoch has a row in pgrun.maintenance_steps
-- (set_maintenance_step). A step with a cadence runs when it has passed since the
-- step's last run (or the clock is now before that run: it was moved back), and the
-- round records the run; the others sit the round out, listed under "not_due". The
-- rows of due steps are taken with SKIP LOCKED, so a step that another round is
-- running right now is left to it (and listed as not due) instead of waited for. By
-- default forget_workers and prune_history run once a minute, the rest every round.
-- "steps" gives each step that ran its wall-clock time: {"prune_history": {"ms": 0.4}}.
--
-- Leadership: with leader (a worker id), maintain works only while leader holds the
-- maintenance lease (take_maintenance with leader_lease), and otherwise returns
-- {"skipped": true, "leader": holder}. Runners pass their id and three rounds'
-- length, so a frozen leader loses maintenance within three rounds. Without leader
-- (psql, pg_cron) it always works: every step is safe to run concurrently.
create or replace function pgrun.maintain(
  lease_budget       integer default 3,
  stall_window       interval default interval '1 minute',
  batch              integer default 1000,
  default_retention  interval default interval '7 days',
  leader             text default null,
  leader_lease       interval default interval '3 seconds'
)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now      timestamptz := pgrun.clock();
  v_leases   jsonb := '{}';
  v_rows     jsonb;
  v_timed    integer := 0;
  v_dead     integer := 0;
  v_workers  integer := 0;
  v_outbox   jsonb := '{}';
  v_fired    integer := 0;
  v_pruned   integer := 0;
  v_analyzed integer := 0;
  v_woken    integer := 0;
  v_promoted integer := 0;
  v_rolled   integer := 0;
  v_sessions jsonb := '{}';
  v_errors   jsonb := '{}';
  v_broken   jsonb := '[]';
  v_holder   text;
  v_steps    jsonb := '{}';
  v_not_due  text[];
  v_began    timestamptz;
begin
  if lease_budget is null or lease_budget < 0 then
    raise exception 'lease_budget % is not valid', coalesce(lease_budget::text, 'NULL')
      using errcode = '22023', hint = 'Use 0 or more: how many expired leases a job survives.';
  end if;
  if stall_window is null or stall_window < interval '0' then
    raise exception 'stall_window % is not valid', coalesce(stall_window::text, 'NULL')
      using errcode = '22023', hint = 'Pass zero or more, such as ''1 minute''.';
  end if;
  perform pgrun.check_positive_interval('default_retention', default_retention);
  if default_retention is null then
    raise exception 'default_retention must not be NULL'
      using errcode = '22023', hint = 'Pass a positive interval such as ''7 days''.';
  end if;
  if batch is null or batch < 1 or batch > 100000 then
    raise exception 'batch % is not valid', coalesce(batch::text, 'NULL')
      using errcode = '22023', hint = 'Use 1 to 100000 rows per step.';
  end if;
  if leader is not null and not pgrun.take_maintenance(leader, leader_lease) then
    select m.holder into v_holder from pgrun.maintenance_leader m where m.name = 'maintain';
    return jsonb_build_object('skipped', true, 'leader', v_holder);
  end if;

  -- The steps with a cadence that are due: taken for this round, the run recorded.
  -- (The outer select reads the rows as they were before the update; it needs only
  -- their names and cadences.)
  with due as (
    select s.step from pgrun.maintenance_steps s
    where s.every > interval '0'
      and (s.last_run_at is null or s.last_run_at > v_now or s.last_run_at + s.every <= v_now)
    for update skip locked
  ),
  taken as (
    update pgrun.maintenance_steps s set last_run_at = v_now
    from due where s.step = due.step
    returning s.step
  )
  select array(select s.step from pgrun.maintenance_steps s
               where s.every > interval '0' and s.step not in (select t.step from taken t)
               order by s.step)
  into v_not_due;

  v_began := clock_timestamp();
  begin
    perform pgrun.note_server_epoch();
  exception when others then
    v_errors := v_errors || jsonb_build_object('note_server_epoch', sqlerrm);
  end;
  v_steps := v_steps || pgrun.step_ms('note_server_epoch', v_began);
  if not 'reap_lost_sessions' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_sessions := pgrun.reap_lost_sessions(lease_budget);
    exception when others then
      v_errors := v_errors || jsonb_build_object('reap_lost_sessions', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('reap_lost_sessions', v_began,
                 jsonb_build_object('workers', coalesce((v_sessions ->> 'workers')::integer, 0),
                                       'rows', coalesce((v_sessions ->> 'requeued')::integer, 0)
                                               + coalesce((v_sessions ->> 'failed')::integer, 0),
                                       'failed', coalesce((v_sessions ->> 'failed')::integer, 0)));
  end if;
  if not 'reap_expired_leases' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_leases := pgrun.reap_expired_leases(lease_budget, batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('reap_expired_leases', sqlerrm);
      v_rows := pgrun.maintain_rows('reap_expired_leases', pgrun.expired_leases(batch), lease_budget, stall_window);
      v_broken := v_broken || (v_rows -> 'broken');
    end;
    v_steps := v_steps || pgrun.step_ms('reap_expired_leases', v_began);
  end if;
  if not 'fail_overdue' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_timed := pgrun.fail_overdue(stall_window, batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('fail_overdue', sqlerrm);
      v_rows := pgrun.maintain_rows('fail_overdue', pgrun.overdue_jobs(stall_window, batch), lease_budget, stall_window);
      v_timed := (v_rows ->> 'done')::integer;
      v_broken := v_broken || (v_rows -> 'broken');
    end;
    v_steps := v_steps || pgrun.step_ms('fail_overdue', v_began);
  end if;
  if not 'flag_dead_workers' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_dead := pgrun.flag_dead_workers();
    exception when others then
      v_errors := v_errors || jsonb_build_object('flag_dead_workers', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('flag_dead_workers', v_began);
  end if;
  if not 'forget_workers' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_workers := pgrun.forget_workers();
    exception when others then
      v_errors := v_errors || jsonb_build_object('forget_workers', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('forget_workers', v_began);
  end if;
  if not 'drain_outbox' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_outbox := pgrun.drain_outbox(batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('drain_outbox', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('drain_outbox', v_began);
  end if;
  if not 'fire_schedules' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_fired := pgrun.fire_schedules(batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('fire_schedules', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('fire_schedules', v_began);
  end if;
  if not 'refresh_job_stats' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_analyzed := pgrun.refresh_job_stats()::integer;
    exception when others then
      v_errors := v_errors || jsonb_build_object('refresh_job_stats', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('refresh_job_stats', v_began);
  end if;
  if not 'wake_waits' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_woken := pgrun.wake_waits(batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('wake_waits', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('wake_waits', v_began);
  end if;
  if not 'recheck_sequences' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_promoted := pgrun.recheck_sequences(batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('recheck_sequences', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('recheck_sequences', v_began, jsonb_build_object('promoted', v_promoted));
  end if;
  if not 'rollup_minutes' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_rolled := pgrun.rollup_minutes(v_now);
    exception when others then
      v_errors := v_errors || jsonb_build_object('rollup_minutes', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('rollup_minutes', v_began, jsonb_build_object('rows', v_rolled));
  end if;
  if not 'prune_history' = any (v_not_due) then
    v_began := clock_timestamp();
    begin
      v_pruned := pgrun.prune_history(default_retention, batch);
    exception when others then
      v_errors := v_errors || jsonb_build_object('prune_history', sqlerrm);
    end;
    v_steps := v_steps || pgrun.step_ms('prune_history', v_began);
  end if;

  return jsonb_build_object(
    'lease_requeued', coalesce((v_leases ->> 'requeued')::integer, 0),
    'lease_failed', coalesce((v_leases ->> 'failed')::integer, 0),
    'timed_out', v_timed,
    'workers_forgotten', v_workers,
    'workers_flagged_dead', v_dead,
    'schedules_fired', v_fired,
    'pruned', v_pruned,
    'stats_refreshed', v_analyzed,
    'waits_timed_out', v_woken,
    'outbox_dispatched', coalesce(v_outbox -> 'dispatched', '0'),
    'outbox_retried', coalesce(v_outbox -> 'retried', '0'),
    'outbox_poisoned', coalesce(v_outbox -> 'poisoned', '0'),
    'steps', v_steps,
    'not_due', to_jsonb(v_not_due))
    || case when v_errors = '{}' then '{}'::jsonb
            else jsonb_build_object('errors', v_errors, 'broken_jobs', v_broken) end;
end;
$$;
