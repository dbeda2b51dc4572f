-- 62_maintain.sql: maintain(), the periodic work that keeps jobs from being lost or
-- stuck, as an orchestrator over named steps. Each step is a function of its own,
-- callable alone (from psql or pg_cron), and safe to run concurrently with itself:
-- it claims its rows with FOR UPDATE SKIP LOCKED and re-checks them in a guarded
-- UPDATE. maintain() runs every step in a subtransaction, so one failing step (or
-- row) is reported by name and the other steps still run that round.

-- take_maintenance makes leader the maintenance leader for lease, or renews its
-- lease, and returns true; it returns false while another holder's lease is current.
-- A leader that freezes or is cut off stops renewing, and its lease lapses: any
-- caller takes over after at most one lease length. The row is read with SKIP
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
  if r.holder <> leader and r.expires_at >= v_now then
    return false;
  end if;
  update pgrun.maintenance_leader m
  set holder = leader, expires_at = v_now + lease,
      since = case when r.holder = leader then r.since else v_now end
  where m.name = 'maintain';
  return true;
end;
$$;

-- expired_leases lists up to batch running jobs whose lease ran out, oldest first,
-- leaving out those still within the grace after the server epoch (in_epoch_grace).
create or replace function pgrun.expired_leases(batch integer)
returns bigint[]
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select array(select c.id from pgrun.jobs c
               where c.status = 'running' and least(c.lease_expires_at, c.deadline_at) < pgrun.clock()
                 and c.lease_expires_at < pgrun.clock()
                 and not pgrun.in_epoch_grace(pgrun.epoch_since(), c.lease_length, pgrun.clock())
               order by least(c.lease_expires_at, c.deadline_at) limit batch)
$$;

-- reap_expired_leases requeues running jobs whose lease ran out (event
-- job.lease_expired_requeue), without spending an attempt; a job that has already
-- lost lease_budget leases fails instead (class lease_expired). It takes up to batch
-- jobs (ids NULL) or exactly the given ids, each only if its lease has still run out.
-- After a server start or a promotion (pgrun.server_epochs, 11_failover.sql) a lease is
-- not judged until one lease length after the epoch began, however long ago it ran
-- out: during an outage no runner could renew it, and the job may well have finished
-- with its report on the way. Returns {"requeued": n, "failed": n}.
create or replace function pgrun.reap_expired_leases(
  lease_budget  integer default 3,
  batch         integer default 1000,
  ids           bigint[] default null
)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now       timestamptz := pgrun.clock();
  v_requeued  integer;
  v_failed    integer;
  v_queues    text[];
  v_since     timestamptz := pgrun.epoch_since();
  q           text;
begin
  with expired as (
    update pgrun.jobs j
    set lease_expiries = j.lease_expiries + 1,
        status = case when j.lease_expiries >= lease_budget
                      then 'failed'::pgrun.job_status else 'queued' end,
        run_at = case when j.lease_expiries >= lease_budget then j.run_at else v_now end,
        finished_at = case when j.lease_expiries >= lease_budget then v_now end,
        error = case when j.lease_expiries >= lease_budget
                     then jsonb_build_object('class', 'lease_expired',
                            'message', format('lease of worker %s expired (%s times)',
                                              j.claimed_by, j.lease_expiries + 1),
                            'attempt', j.attempt, 'at', v_now)
                     else j.error end,
        lease_expires_at = null
    where j.id = any (coalesce(ids, array(
        select c.id from pgrun.jobs c
        where c.status = 'running' and least(c.lease_expires_at, c.deadline_at) < v_now
          and c.lease_expires_at < v_now
          and not pgrun.in_epoch_grace(v_since, c.lease_length, v_now)
        order by least(c.lease_expires_at, c.deadline_at)
        limit batch
        for update skip locked)))
      and j.status = 'running' and j.lease_expires_at < v_now
      and not pgrun.in_epoch_grace(v_since, j.lease_length, v_now)
    returning j.id, j.status, j.queue, j.attempt, j.claimed_by, j.lease_expiries
  ),
  logged as (
    insert into pgrun.job_events (job_id, at, event, level, message, fields)
    select e.id, v_now,
           case when e.status = 'failed' then 'job.lease_expired' else 'job.lease_expired_requeue' end,
           case when e.status = 'failed' then 'error' else 'warn' end,
           format('lease of worker %s expired', e.claimed_by),
           jsonb_build_object('attempt', e.attempt, 'worker', e.claimed_by,
                              'lease_expiries', e.lease_expiries)
    from expired e
  )
  select count(*) filter (where e.status = 'queued'),
         count(*) filter (where e.status = 'failed'),
         array_agg(distinct e.queue) filter (where e.status = 'queued')
  into v_requeued, v_failed, v_queues
  from expired e;
  foreach q in array coalesce(v_queues, '{}') loop
    perform pg_notify('pgrun_jobs', q);
  end loop;
  return jsonb_build_object('requeued', v_requeued, 'failed', v_failed);
end;
$$;

-- overdue_jobs lists up to batch jobs past their timeout with no sign of life within
-- stall_window: running jobs (a beat, progress or an event is a sign of life) and
-- waiting parents (a child finishing is one). Jobs without a timeout never appear.
-- The start of the server epoch (a restart, a promotion: 11_failover.sql) counts as a
-- sign of life of every job: during the outage before it no sign could arrive.
create or replace function pgrun.overdue_jobs(stall_window interval, batch integer)
returns bigint[]
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select array(select x.id from (
    -- Running jobs by the running index's key (the earlier of lease and deadline): the
    -- scan stops at the first job that is due for neither, however many dead entries
    -- a burn-down left behind it.
    (select c.id, c.started_at from pgrun.jobs c
     where c.status = 'running' and least(c.lease_expires_at, c.deadline_at) < pgrun.clock()
       and c.timeout is not null
       and c.started_at + c.timeout < pgrun.clock()
       and greatest(coalesce(c.heartbeat_at, c.started_at), (select pgrun.epoch_alive(pgrun.clock())))
           < pgrun.clock() - stall_window
     order by least(c.lease_expires_at, c.deadline_at) limit batch)
    union all
    (select c.id, c.started_at from pgrun.jobs c
     where c.status = 'waiting' and c.failure_ratio is not null
       and c.timeout is not null
       and c.started_at + c.timeout < pgrun.clock()
       and greatest(coalesce(c.heartbeat_at, c.started_at), (select pgrun.epoch_alive(pgrun.clock())))
           < pgrun.clock() - stall_window
     limit batch)) x
    order by x.started_at limit batch)
$$;

-- fail_overdue enforces timeouts; this is the one timeout rule, whatever language
-- the worker is written in. A job past its timeout is spared while it shows a sign of
-- life within stall_window (the start of the server epoch counts as one, see
-- overdue_jobs); past both it fails:
--   * a running job fails that attempt with class timeout (retried while attempts
--     remain) and its worker is told on pgrun_cancel to stop the handler;
--   * a waiting parent fails for good with class timeout, and its unfinished
--     children are cancelled (a parent whose children's queue nobody serves would
--     otherwise wait forever).
-- It takes up to batch jobs (ids NULL) or exactly the given ids, each only if it is
-- still overdue. Returns how many failed.
create or replace function pgrun.fail_overdue(
  stall_window  interval default interval '1 minute',
  batch         integer default 1000,
  ids           bigint[] default null
)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now  timestamptz := pgrun.clock();
  v_ids  bigint[] := coalesce(ids, pgrun.overdue_jobs(stall_window, batch));
  v_alive timestamptz := pgrun.epoch_alive(v_now);
  r      record;
  n      integer := 0;
begin
  if cardinality(v_ids) = 0 then
    return 0;
  end if;
  for r in
    select c.id, c.attempt, c.timeout, c.status, c.progress_current, c.children_failed, c.progress_total
    from pgrun.jobs c
    where c.id = any (v_ids)
      and (c.status = 'running' or (c.status = 'waiting' and c.failure_ratio is not null))
      and c.timeout is not null
      and c.started_at + c.timeout < v_now
      and greatest(coalesce(c.heartbeat_at, c.started_at), v_alive) < v_now - stall_window
    order by c.started_at
    for update skip locked
  loop
    if r.status = 'running' then
      perform pgrun.fail_job(r.id, r.attempt,
        jsonb_build_object('class', 'timeout',
                           'message', format('timed out after %s with no sign of life for %s', r.timeout, stall_window)));
      perform pg_notify('pgrun_cancel', r.id || ':' || r.attempt);
    else
      update pgrun.jobs j
      set status = 'failed', finished_at = v_now,
          error = jsonb_build_object('class', 'timeout',
                    'message', format('waited %s for children (%s of %s finished, none for %s); giving up',
                                      r.timeout, r.progress_current + r.children_failed, r.progress_total, stall_window),
                    'attempt', r.attempt, 'at', v_now)
      where j.id = r.id and j.status = 'waiting';
      perform pgrun.add_event(r.id, 'job.failed', 'error',
        format('waited %s for children with no child finishing for %s', r.timeout, stall_window),
        jsonb_build_object('class', 'timeout', 'final', true, 'attempt', r.attempt,
                           'children_finished', r.progress_current + r.children_failed,
                           'children', r.progress_total));
      perform pgrun.cancel_tree(c.id, 'parent timed out')
      from pgrun.jobs c
      where c.parent_id = r.id and c.status in ('pending', 'queued', 'running', 'waiting');
    end if;
    n := n + 1;
  end loop;
  return n;
end;
$$;

-- flag_dead_workers flags workers that went silent for three heartbeat cadences while
-- holding running jobs (flagged_dead_at, and a worker.dead event on each of their
-- jobs); the lease reaper brings the jobs back. A heartbeat clears the flag. Within
-- three of a worker's cadences after a server start or a promotion (server_epochs) it
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
                      and not pgrun.in_epoch_grace(v_since, 3 * w.cadence, v_now));
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

-- forget_workers deletes workers not seen for after (default a day). Returns how many.
create or replace function pgrun.forget_workers(after interval default interval '1 day')
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  n integer;
begin
  perform pgrun.check_positive_interval('after', after);
  delete from pgrun.workers w where w.last_seen < pgrun.clock() - coalesce(after, interval '1 day');
  get diagnostics n = row_count;
  return n;
end;
$$;

-- prune_history deletes finished jobs past their queue's retention (default_retention
-- when the queue sets none) with their events, or moves them to jobs_archive for
-- queues with archive; jobs of running runs and children of active parents are kept.
-- At most batch jobs per queue per call; it returns at once unless the oldest
-- finished job is past the shortest retention in force. Returns how many were pruned.
create or replace function pgrun.prune_history(
  default_retention  interval default interval '7 days',
  batch              integer default 1000
)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now       timestamptz := pgrun.clock();
  v_oldest    timestamptz;
  v_shortest  interval;
  v_pruned    integer := 0;
  v_n         integer;
  qr          record;
begin
  select min(j.finished_at) into v_oldest from pgrun.jobs j where j.finished_at is not null;
  select least(min(q.retention), default_retention) into v_shortest from pgrun.queues q;
  for qr in
    select q.name, coalesce(q.retention, default_retention) as keep, q.archive from pgrun.queues q
    where v_oldest < v_now - coalesce(v_shortest, default_retention)
  loop
    with victims as (
      select j.id from pgrun.jobs j
      where j.queue = qr.name and j.finished_at < v_now - qr.keep
        and (j.run_id is null or not exists (select 1 from pgrun.runs r where r.id = j.run_id and r.status = 'running'))
        and (j.parent_id is null or not exists (select 1 from pgrun.jobs p where p.id = j.parent_id
                                                and p.status in ('pending', 'queued', 'running', 'waiting')))
      order by j.finished_at
      limit batch
      for update skip locked
    ),
    events as (delete from pgrun.job_events e using victims v where e.job_id = v.id),
    gone as (delete from pgrun.jobs j using victims v where j.id = v.id returning j.*),
    archived as (insert into pgrun.jobs_archive (id, queue, kind, status, finished_at, archived_at, job)
                 select g.id, g.queue, g.kind, g.status, g.finished_at, v_now, to_jsonb(g)
                 from gone g where qr.archive)
    select count(*) into v_n from gone;
    v_pruned := v_pruned + v_n;
  end loop;
  return v_pruned;
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
    where j.id = fail_broken_job.id and j.status in ('pending', 'queued', 'running', 'waiting');
  exception when others then
    update pgrun.jobs j
    set status = 'failed', finished_at = v_now, lease_expires_at = null,
        error = v_err || jsonb_build_object('unique_key_md5', md5(j.unique_key),
                                            'concurrency_key_md5', md5(j.concurrency_key)),
        unique_key = null, concurrency_key = null
    where j.id = fail_broken_job.id and j.status in ('pending', 'queued', 'running', 'waiting');
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

-- maintain does one round of periodic work and returns what it did as JSON. Steps,
-- in order (each is a function of its own, see above):
--   note_server_epoch    record a server start or promotion (11_failover.sql): leases and
--                        workers get a grace of their own length after it
--   reap_expired_leases  requeue (or, past lease_budget, fail) jobs whose lease ran out
--   fail_overdue         the timeout rule, with the stall_window sign-of-life grace
--   flag_dead_workers    flag workers silent for three cadences while holding jobs
--   forget_workers       delete workers not seen for a day
--   drain_outbox         retry failed dispatches (fan-in, DAG expansion)
--   fire_schedules       enqueue due cron schedules, once per slot
--   prune_history        delete or archive finished jobs past their retention
-- Each step handles at most batch rows and runs in a subtransaction: a step that
-- fails is rolled back alone and named under "errors" with its message, and the
-- other steps still run. If reap_expired_leases or fail_overdue fails on a batch,
-- its rows are retried one by one and a row that still fails ends failed (class
-- maintenance_error, naming the step).
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
  v_leases   jsonb := '{}';
  v_rows     jsonb;
  v_timed    integer := 0;
  v_dead     integer := 0;
  v_workers  integer := 0;
  v_outbox   jsonb := '{}';
  v_fired    integer := 0;
  v_pruned   integer := 0;
  v_errors   jsonb := '{}';
  v_broken   jsonb := '[]';
  v_holder   text;
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

  begin
    perform pgrun.note_server_epoch();
  exception when others then
    v_errors := v_errors || jsonb_build_object('note_server_epoch', sqlerrm);
  end;
  begin
    v_leases := pgrun.reap_expired_leases(lease_budget, batch);
  exception when others then
    v_errors := v_errors || jsonb_build_object('reap_expired_leases', sqlerrm);
    v_rows := pgrun.maintain_rows('reap_expired_leases', pgrun.expired_leases(batch), lease_budget, stall_window);
    v_broken := v_broken || (v_rows -> 'broken');
  end;
  begin
    v_timed := pgrun.fail_overdue(stall_window, batch);
  exception when others then
    v_errors := v_errors || jsonb_build_object('fail_overdue', sqlerrm);
    v_rows := pgrun.maintain_rows('fail_overdue', pgrun.overdue_jobs(stall_window, batch), lease_budget, stall_window);
    v_timed := (v_rows ->> 'done')::integer;
    v_broken := v_broken || (v_rows -> 'broken');
  end;
  begin
    v_dead := pgrun.flag_dead_workers();
  exception when others then
    v_errors := v_errors || jsonb_build_object('flag_dead_workers', sqlerrm);
  end;
  begin
    v_workers := pgrun.forget_workers();
  exception when others then
    v_errors := v_errors || jsonb_build_object('forget_workers', sqlerrm);
  end;
  begin
    v_outbox := pgrun.drain_outbox(batch);
  exception when others then
    v_errors := v_errors || jsonb_build_object('drain_outbox', sqlerrm);
  end;
  begin
    v_fired := pgrun.fire_schedules(batch);
  exception when others then
    v_errors := v_errors || jsonb_build_object('fire_schedules', sqlerrm);
  end;
  begin
    v_pruned := pgrun.prune_history(default_retention, batch);
  exception when others then
    v_errors := v_errors || jsonb_build_object('prune_history', sqlerrm);
  end;

  return jsonb_build_object(
    'lease_requeued', coalesce((v_leases ->> 'requeued')::integer, 0),
    'lease_failed', coalesce((v_leases ->> 'failed')::integer, 0),
    'timed_out', v_timed,
    'workers_forgotten', v_workers,
    'workers_flagged_dead', v_dead,
    'schedules_fired', v_fired,
    'pruned', v_pruned,
    'outbox_dispatched', coalesce(v_outbox -> 'dispatched', '0'),
    'outbox_retried', coalesce(v_outbox -> 'retried', '0'),
    'outbox_poisoned', coalesce(v_outbox -> 'poisoned', '0'))
    || case when v_errors = '{}' then '{}'::jsonb
            else jsonb_build_object('errors', v_errors, 'broken_jobs', v_broken) end;
end;
$$;
