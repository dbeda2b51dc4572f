-- claim.sql: handing queued jobs to a worker under a lease.

-- claim_jobs claims up to n due jobs of one queue for worker, in priority, run_at, id
-- order, and returns them running with attempt incremented (the new attempt is the
-- claim token every later transition must present) and a lease of the given length.
-- Rows locked by another claimer are skipped (FOR UPDATE SKIP LOCKED), so concurrent
-- claimers never block each other and never receive the same job. A paused queue, or
-- no due job, returns no rows. With models, jobs whose model is warm on this worker
-- are taken first.
--
-- The id list is built in an ARRAY() sub-select so the planner keeps the partial claim
-- index and the primary key even under a generic plan (a LIMIT parameter otherwise
-- made it estimate 10% of the table and hash-join all of jobs). The guard is the row
-- lock: FOR UPDATE re-checks status = 'queued' on the newest row version and holds
-- the row until commit. The outer UPDATE deliberately repeats no status filter: with
-- one, the planner may fetch the ids through the partial claim index (id is its last
-- column) and scan the whole backlog per claim.
create or replace function pgrun.claim_jobs(
  queue   text,
  worker  text,
  n       integer default 1,
  lease   interval default interval '30 seconds',
  models  text[] default null
)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now   timestamptz := pgrun.clock();
  v_left  integer := n;
  v_got   integer;
  v_warm  boolean;
begin
  perform pgrun.check_queue_name(queue);
  if worker is null or worker = '' then
    raise exception 'worker id must not be empty'
      using errcode = '22023', hint = 'Pass a stable id such as host:pid.';
  end if;
  if n is null or n < 1 or n > 10000 then
    raise exception 'claim size % is not valid', coalesce(n::text, 'NULL')
      using errcode = '22023', hint = 'Claim 1 to 10000 jobs per call.';
  end if;
  if lease is null or lease <= interval '0' then
    raise exception 'lease % is not positive', coalesce(lease::text, 'NULL')
      using errcode = '22023', hint = 'Pass a lease such as ''30 seconds''.';
  end if;

  if exists (select 1 from pgrun.queues q where q.name = claim_jobs.queue and q.paused) then
    return;
  end if;

  -- With models, a first pass takes jobs whose model is warm here; the second pass
  -- (or the only one) takes any due job.
  foreach v_warm in array case when coalesce(cardinality(models), 0) > 0
                               then array[true, false] else array[false] end loop
    return query
    update pgrun.jobs j
    set status = 'running', attempt = j.attempt + 1, claimed_by = worker,
        lease_expires_at = v_now + lease, started_at = v_now, heartbeat_at = null
    where j.id = any (array(
        select c.id from pgrun.jobs c
        where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
          and (not v_warm or c.model = any (models))
        order by c.priority, c.run_at, c.id
        limit v_left
        for update skip locked))
    returning j.*;
    get diagnostics v_got = row_count;
    v_left := v_left - v_got;
    exit when v_left = 0;
  end loop;
end;
$$;

-- renew_leases extends the leases of worker's running jobs to now + lease and
-- returns the ids it extended. With ids NULL every running job of the worker is
-- renewed; with ids, only those. An id the worker asked for but did not get back is
-- no longer its to run (cancelled, reclaimed after its lease ran out, finished
-- elsewhere): the runner cancels that job's context.
create or replace function pgrun.renew_leases(
  worker  text,
  ids     bigint[] default null,
  lease   interval default interval '30 seconds'
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if lease is null or lease <= interval '0' then
    raise exception 'lease % is not positive', coalesce(lease::text, 'NULL')
      using errcode = '22023', hint = 'Pass a lease such as ''30 seconds''.';
  end if;
  return query
  update pgrun.jobs j
  set lease_expires_at = pgrun.clock() + lease
  where j.status = 'running' and j.claimed_by = worker
    and (ids is null or j.id = any (ids))
  returning j.id;
end;
$$;
