-- 60_leases.sql: jobs whose holder stopped answering. A claim is a lease the worker
-- renews; the lease reaper brings back a job whose lease ran out, and the timeout rule
-- ends one that outlived its timeout without a sign of life. Both are maintain()
-- steps (62_maintain.sql), each callable alone and safe to run concurrently with
-- itself: it claims its rows with FOR UPDATE SKIP LOCKED and re-checks them in a
-- guarded UPDATE.

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

-- lose_leases ends the claims of running jobs ids whose holder is gone, the one
-- rule for a lost lease, whatever showed it lost: each is requeued due now
-- (job.lease_expired_requeue) without spending an attempt, or, once it has already
-- lost lease_budget leases, fails (job.lease_expired, class lease_expired: a job that
-- keeps killing its worker must not loop forever). The lease expiry is counted
-- (lease_expiries) either way. The message reads "lease of worker <id> <why>"; fields
-- are added to each event's. The caller has locked the rows and checked them; only those still
-- running change. Returns {"requeued": n, "failed": n}.
create or replace function pgrun.lose_leases(
  ids           bigint[],
  lease_budget  integer,
  why           text,
  fields        jsonb default '{}'
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
  q           text;
begin
  if cardinality(ids) = 0 then
    return jsonb_build_object('requeued', 0, 'failed', 0);
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
                            'message', format('lease of worker %s %s (%s times)', j.claimed_by, why, j.lease_expiries + 1),
                            'attempt', j.attempt, 'at', v_now)
                     else j.error end,
        lease_expires_at = null
    where j.id = any (ids) and j.status = 'running'
    returning j.id, j.status, j.queue, j.attempt, j.claimed_by, j.lease_expiries
  ),
  logged as (
    insert into pgrun.job_events (job_id, at, event, level, message, fields)
    select e.id, v_now,
           case when e.status = 'failed' then 'job.lease_expired' else 'job.lease_expired_requeue' end,
           case when e.status = 'failed' then 'error' else 'warn' end,
           format('lease of worker %s %s', e.claimed_by, why),
           jsonb_build_object('attempt', e.attempt, 'worker', e.claimed_by,
                              'lease_expiries', e.lease_expiries) || coalesce(fields, '{}')
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

-- reap_expired_leases requeues running jobs whose lease ran out (event
-- job.lease_expired_requeue), without spending an attempt; a job that has already
-- lost lease_budget leases fails instead (class lease_expired): lose_leases. It takes
-- up to batch jobs (ids NULL) or exactly the given ids, each only if its lease has
-- still run out. After a server start, a promotion or a gap in the maintenance rounds
-- (pgrun.server_epochs, 11_failover.sql) a lease is not judged until one lease length
-- after the epoch began, however long ago it ran out: during an outage no runner could
-- renew it, and the job may well have finished with its report on the way. Returns
-- {"requeued": n, "failed": n}.
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
  v_since     timestamptz := pgrun.epoch_since();
  v_ids       bigint[];
begin
  -- The candidates (expired_leases), locked unless another reaper holds them, are
  -- taken in a statement of their own: inlined into the statement below as
  -- "id = any (coalesce(ids, array(...)))", the planner could not see the array and
  -- walked the whole running index in every round, which cost a maintenance leader
  -- milliseconds per thousand running jobs even with nothing to reap.
  v_ids := coalesce(ids, array(
    select c.id from pgrun.jobs c
    where c.id = any (pgrun.expired_leases(batch))
    for update skip locked));
  if cardinality(v_ids) = 0 then
    return jsonb_build_object('requeued', 0, 'failed', 0);
  end if;
  -- Checked again under the lock (and given ids locked here).
  v_ids := array(
    select c.id from pgrun.jobs c
    where c.id = any (v_ids)
      and c.status = 'running' and c.lease_expires_at < v_now
      and not pgrun.in_epoch_grace(v_since, c.lease_length, v_now)
    for update skip locked);
  return pgrun.lose_leases(v_ids, lease_budget, 'expired');
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
      where c.parent_id = r.id and pgrun.is_active(c.status);
    end if;
    n := n + 1;
  end loop;
  return n;
end;
$$;
