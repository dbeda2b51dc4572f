-- reaper.sql: maintain(), the periodic work that keeps jobs from being lost. Runners
-- call it every second under leadership; a pg_cron user may call it instead.

-- maintain does one round of periodic work and returns what it did as JSON:
--   * running jobs whose lease ran out go back to queued (lease_expired event); a job
--     that has already lost its lease lease_budget times fails with class
--     lease_expired instead;
--   * running jobs past their timeout fail that attempt (class timeout; retried if
--     attempts remain) unless they showed life (a beat, progress or event) within
--     stall_window; their runner is told to cancel them;
--   * workers silent for three heartbeat cadences while holding running jobs are
--     flagged dead (flagged_dead_at, and a worker.dead event on each of their jobs;
--     the lease reaper brings the jobs back); workers not seen for a day are forgotten;
--   * failed dispatches in the outbox are retried (drain_outbox);
--   * due schedules fire (fire_schedules);
--   * finished jobs past their queue's retention (default_retention when the queue
--     sets none) are deleted with their events, or moved to jobs_archive for queues
--     with archive; jobs of running runs and children of active parents are kept.
-- Each step handles at most batch rows per call. Concurrent calls do not overlap: a
-- call that cannot take the transaction-level advisory lock returns {"skipped": true}.
drop function if exists pgrun.maintain(integer, interval, integer);
create or replace function pgrun.maintain(
  lease_budget       integer default 3,
  stall_window       interval default interval '1 minute',
  batch              integer default 1000,
  default_retention  interval default interval '7 days'
)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now          timestamptz := pgrun.clock();
  v_requeued     integer;
  v_lease_failed integer;
  v_queues       text[];
  v_timed_out    integer := 0;
  v_workers      integer;
  v_dead         integer;
  v_outbox       jsonb;
  v_fired        integer;
  v_pruned       integer := 0;
  v_oldest       timestamptz;
  v_shortest     interval;
  v_n            integer;
  qr             record;
  q              text;
  r              record;
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
  if batch is null or batch < 1 then
    raise exception 'batch % is not valid', coalesce(batch::text, 'NULL')
      using errcode = '22023', hint = 'Use 1 or more rows per step.';
  end if;
  if not pg_try_advisory_xact_lock(hashtext('pgrun.maintain')) then
    return jsonb_build_object('skipped', true);
  end if;

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
    where j.id = any (array(
        select c.id from pgrun.jobs c
        where c.status = 'running' and c.lease_expires_at < v_now
        order by c.lease_expires_at
        limit batch
        for update skip locked))
      and j.status = 'running'
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
  into v_requeued, v_lease_failed, v_queues
  from expired e;
  foreach q in array coalesce(v_queues, '{}') loop
    perform pg_notify('pgrun_jobs', q);
  end loop;

  for r in
    select c.id, c.attempt, c.timeout from pgrun.jobs c
    where c.status = 'running' and c.timeout is not null
      and c.started_at + c.timeout < v_now
      and coalesce(c.heartbeat_at, c.started_at) < v_now - stall_window
    order by c.started_at
    limit batch
    for update skip locked
  loop
    perform pgrun.fail_job(r.id, r.attempt,
      jsonb_build_object('class', 'timeout',
                         'message', format('timed out after %s with no sign of life for %s', r.timeout, stall_window)));
    perform pg_notify('pgrun_cancel', r.id || ':' || r.attempt);
    v_timed_out := v_timed_out + 1;
  end loop;

  with dead as (
    update pgrun.workers w set flagged_dead_at = v_now
    where w.flagged_dead_at is null and w.state <> 'stopped' and w.last_seen < v_now - 3 * w.cadence
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
  select count(*) into v_dead from dead;

  delete from pgrun.workers w where w.last_seen < v_now - interval '1 day';
  get diagnostics v_workers = row_count;

  v_outbox := pgrun.drain_outbox(batch);
  v_fired := pgrun.fire_schedules(batch);

  -- Retention: skip the per-queue work unless the oldest finished job (the first
  -- entry of the finished index) is past the shortest retention in force.
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

  return jsonb_build_object(
    'lease_requeued', v_requeued,
    'lease_failed', v_lease_failed,
    'timed_out', v_timed_out,
    'workers_forgotten', v_workers,
    'workers_flagged_dead', v_dead,
    'schedules_fired', v_fired,
    'pruned', v_pruned,
    'outbox_dispatched', v_outbox -> 'dispatched',
    'outbox_retried', v_outbox -> 'retried',
    'outbox_poisoned', v_outbox -> 'poisoned');
end;
$$;
