-- 32_transitions.sql: how a claimed job leaves the running state, and the operator's
-- cancel and redrive. Each worker-side transition is one guarded UPDATE on
-- (id, attempt, status), and on the claim's token when the worker passes it (claim_id,
-- the last parameter of every report, default NULL: any claim of that attempt): a
-- duplicate delivery, a stale worker whose lease was reclaimed, a report from before a
-- failover that undid its claim, or a job already finished matches nothing, and the
-- function returns NULL (or no row) and changes nothing. Runners always pass the
-- token: after an asynchronous failover an attempt number can be handed out twice,
-- a claim token never is.

-- succeed_running is complete_jobs' write: each (id, attempt) of the batch still
-- running under that attempt (for worker, and under its claim id, when given; its
-- result within max_bytes) succeeds at now with its result. Returns the ids it
-- finished. No role may call it; complete_jobs, running as the engine, checks the
-- batch first. Planned once, with the planner pinned (30_claim.sql, claim_locked).
--
-- The expected status and worker come in as columns of the unnested batch (r.status,
-- r.worker), not as constants: compared with constants they are restrictions on
-- pgrun.jobs, which the statistics can make look like no row at all (a table never
-- analyzed, or analyzed while every job was queued and claimed_by NULL); the planner
-- then read the jobs first and matched each to every row of the batch, 1.3 s for a
-- batch of 1,000 on a table of 12,000 rows. Compared with the batch's columns they
-- only join. status is compared as text for the same reason: as "status = 'running'"
-- the planner may match the partial index of running rows and scan all of them per
-- batch (seen with 300k running rows of dead workers not yet reaped). And the ids
-- restrict pgrun.jobs directly as well (j.id = any ($1)), which gives the planner a
-- way to read only the batch's rows by primary key that no statistics make look
-- dearer than reading the table: vacuumed while nearly empty (a purge, an ephemeral
-- queue that deleted its jobs) and refilled since, the table looks like a few rows
-- however large it is, and the join alone then hashed the whole table for every batch
-- or compared every job with every element of it (over 20 s a batch of 1,000 with
-- two million jobs). tests/plan_check_test.go holds these cases.
create or replace function pgrun.succeed_running(
  ids        bigint[],
  attempts   integer[],
  results    jsonb[],
  claim_ids  uuid[],
  worker     text,
  max_bytes  integer,
  at         timestamptz
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_nestloop = off
set jit = off
as $$
begin
  return query
  update pgrun.jobs j
  set status = 'succeeded', finished_at = succeed_running.at, result = r.result, lease_expires_at = null
  from unnest(ids, attempts, coalesce(results, array_fill(null::jsonb, array[cardinality(ids)])),
              coalesce(claim_ids, array_fill(null::uuid, array[cardinality(ids)])),
              array_fill('running'::text, array[cardinality(ids)]),
              array_fill(succeed_running.worker, array[cardinality(ids)]))
       as r(id, attempt, result, claim_id, status, worker)
  where j.id = any (ids) and j.id = r.id and j.attempt = r.attempt and j.status::text = r.status
    and (r.worker is null or j.claimed_by = r.worker)
    and (r.claim_id is null or j.claim_id = r.claim_id)
    and (r.result is null or pg_column_size(r.result) <= succeed_running.max_bytes)
  returning j.id;
end;
$$;

-- delete_succeeded is complete_jobs' write for ephemeral queues: it deletes each job
-- of the batch that would succeed (succeed_running's rules) and is a plain job (no
-- parent, no run) of an ephemeral queue, and returns its id and queue. No role may
-- call it. Planned once, with the planner pinned (30_claim.sql, claim_locked).
create or replace function pgrun.delete_succeeded(
  ids        bigint[],
  attempts   integer[],
  results    jsonb[],
  claim_ids  uuid[],
  worker     text,
  max_bytes  integer
)
returns table (id bigint, queue text)
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_nestloop = off
set jit = off
as $$
begin
  return query
  delete from pgrun.jobs j
  using unnest(ids, attempts, coalesce(results, array_fill(null::jsonb, array[cardinality(ids)])),
               coalesce(claim_ids, array_fill(null::uuid, array[cardinality(ids)])),
               array_fill('running'::text, array[cardinality(ids)]),
               array_fill(delete_succeeded.worker, array[cardinality(ids)]))
        as r(id, attempt, result, claim_id, status, worker), pgrun.queues q
  where j.id = any (ids) and j.id = r.id and j.attempt = r.attempt and j.status::text = r.status
    and (r.worker is null or j.claimed_by = r.worker)
    and (r.claim_id is null or j.claim_id = r.claim_id)
    and (r.result is null or pg_column_size(r.result) <= delete_succeeded.max_bytes)
    and q.name = j.queue and q.ephemeral and j.parent_id is null and j.run_id is null
  returning j.id, j.queue;
end;
$$;

-- complete_jobs finishes running jobs in one statement. A pair (id, attempt) that is
-- no longer running under that attempt is skipped, so duplicate or stale calls change
-- nothing; the ids that did finish are returned. results may be NULL (no results).
-- A result over max_json_bytes() does not fail the batch: that job alone fails for
-- good with class bad_result (its id is returned too, since it did finish), and the
-- others succeed. worker is the id the jobs were claimed with: a job claimed by
-- another worker is skipped like a stale one. claim_ids holds each job's claim_id,
-- and a job is finished only under that claim. Both are required of every session but
-- the engine's (check_claim: the worker must be the session login's, and every claim
-- named); the engine's may leave worker NULL and an element NULL (any claim of that
-- attempt).
--
-- hand_over (a sequence's handoff, 36_sequences.sql) lists jobs of the batch whose
-- sequence's next job worker will run at once: when such a job succeeds here and its
-- successor may be claimed by worker (its queue has no limit, fairness or aging and is
-- not paused or off for worker's host, the successor is due and of the same kind and
-- model), the successor goes from held straight to running under worker, with a new
-- claim and a lease of lease (NULL: its queue's default_lease, else default_lease()),
-- in this statement: one write of it instead of two (released, then claimed) and no
-- claim. Their ids are left, until the end of the transaction (or the next such call
-- in it), in the setting pgrun.handed (",id,id,"): the caller reads them there with
-- handed_jobs (their rows, claim tokens included) and runs them as claimed jobs, or
-- their leases bring them back. At most as many as ids; a worker is required.
create or replace function pgrun.complete_jobs(
  ids        bigint[],
  attempts   integer[],
  results    jsonb[] default null,
  worker     text default null,
  claim_ids  uuid[] default null,
  hand_over  bigint[] default null,
  lease      interval default null
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_limit integer := pgrun.max_json_bytes();
  -- Once, not per row: a call of pgrun.clock() costs microseconds (see clock).
  v_now   timestamptz := pgrun.clock();
  v_gone  bigint[];
  v_gone_queues text[];
begin
  perform pgrun.check_claim(worker, claim_ids is not null and array_position(claim_ids, null) is null);
  if ids is null then
    raise exception 'complete_jobs got NULL ids'
      using errcode = '22023', hint = 'Pass an array of ids and one of attempts (empty arrays complete nothing).';
  end if;
  if cardinality(ids) is distinct from cardinality(attempts)
     or (results is not null and cardinality(results) <> cardinality(ids))
     or (claim_ids is not null and cardinality(claim_ids) <> cardinality(ids)) then
    raise exception 'complete_jobs got % ids, % attempts, % results and % claim ids',
      coalesce(cardinality(ids), 0), coalesce(cardinality(attempts), 0), coalesce(cardinality(results)::text, 'no'),
      coalesce(cardinality(claim_ids)::text, 'no')
      using errcode = '22023', hint = 'Pass arrays of equal length: element i of each describes one job.';
  end if;
  if cardinality(ids) > 10000 then
    raise exception 'complete_jobs got % jobs, over the limit of 10000', cardinality(ids)
      using errcode = '22023', hint = 'Complete at most 10000 jobs per call.';
  end if;
  if hand_over is not null and worker is null then
    raise exception 'complete_jobs got hand_over without a worker'
      using errcode = '22023', hint = 'Pass worker => the worker id the jobs were claimed with: it runs the jobs handed over.';
  end if;
  if cardinality(hand_over) > cardinality(ids) then
    raise exception 'complete_jobs got % jobs to hand over for % ids', cardinality(hand_over), cardinality(ids)
      using errcode = '22023', hint = 'Name in hand_over only jobs of the batch (ids), each once.';
  end if;
  if lease is not null then
    perform pgrun.check_interval('lease', lease, pgrun.max_lease());
  end if;
  -- The handoff's request, for the statement below only (jobs_dispatch reads it:
  -- handoff_request); set here whatever the caller set, so that no session setting
  -- asks for a handoff this call did not.
  if cardinality(hand_over) > 0 then
    perform set_config('pgrun.handed', '', true),
            set_config('pgrun.handoff', jsonb_build_object('worker', worker, 'lease', lease,
              'heads', (select jsonb_object_agg(h::text, true) from unnest(hand_over) h where h is not null))::text, true);
  elsif coalesce(current_setting('pgrun.handoff', true), '') <> '' then
    perform set_config('pgrun.handoff', '', true);
  end if;
  -- Ephemeral queues (set_queue): their plain jobs are deleted as they succeed, in this
  -- statement (delete_succeeded). The common case, no such queue at all, keeps the one
  -- UPDATE below.
  if exists (select 1 from pgrun.queues q where q.ephemeral) then
    select array_agg(d.id), array_agg(distinct d.queue) into v_gone, v_gone_queues
    from pgrun.delete_succeeded(ids, attempts, results, claim_ids, worker, v_limit) d;
    return query select unnest(v_gone);
    -- A durable job's steps go with it (35_durable.sql; no foreign key, so that this
    -- delete pays nothing per row when no job has any).
    if v_gone is not null and exists (select 1 from pgrun.job_steps) then
      delete from pgrun.job_steps s where s.job_id = any (v_gone);
    end if;
    -- Deleted, not updated: jobs_room_made (30_claim.sql) does not see these jobs
    -- leave running, so the claimers of their queues are woken here if they have a
    -- limit.
    perform pg_notify('pgrun_jobs', q.name) from pgrun.queues q
    where q.name = any (v_gone_queues) and pgrun.announces_room(q.max_running, q.concurrency_limit);
  end if;
  return query select * from pgrun.succeed_running(ids, attempts, results, claim_ids, worker, v_limit, v_now);
  if cardinality(hand_over) > 0 then
    perform set_config('pgrun.handoff', '', true);
  end if;
  if results is not null then
    return query
    select f.id
    from unnest(ids, attempts, results, coalesce(claim_ids, array_fill(null::uuid, array[cardinality(ids)])))
           as r(id, attempt, result, claim_id),
         lateral pgrun.fail_job(r.id, r.attempt,
           jsonb_build_object('class', 'bad_result',
             'message', format('result is %s bytes, over the limit of %s bytes', pg_column_size(r.result), v_limit)),
           false, worker, r.claim_id) f
    where pg_column_size(r.result) > v_limit and f.id is not null;
  end if;
end;
$$;

-- complete_job is the one-job form of complete_jobs, for simple workers: it returns
-- true if (id, attempt) was running (under claim_id, if given) and is now finished.
create or replace function pgrun.complete_job(id bigint, attempt integer, result jsonb default null,
                                              worker text default null, claim_id uuid default null)
returns boolean
language sql
set search_path = pgrun, pg_catalog
as $$
  select exists (select 1 from pgrun.complete_jobs(array[id], array[attempt], array[result], worker, array[claim_id]))
$$;

-- error_class_permanent reports whether a failure of class is never worth retrying,
-- whatever attempts are left: the args are invalid (invalid_args), the result could
-- not be stored (bad_result), the outcome could not be reported (report_failed), or a
-- maintenance step could not process the job (maintenance_error). Workers in any
-- language report the class; this is where its meaning lives.
create or replace function pgrun.error_class_permanent(class text)
returns boolean
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select coalesce(class in ('invalid_args', 'bad_result', 'report_failed', 'maintenance_error'), false)
$$;

-- fail_job records a failed attempt. error is a JSON object with at least "message"
-- (and optionally "class", "stack", ...). The attempt is final, and the job ends
-- failed, when retryable is false, when the class is permanent
-- (error_class_permanent), or when it was the last of max_attempts; otherwise the job
-- goes back to queued after an exponential backoff with jitter (the queue's
-- backoff_base and backoff_max, default 1 second and 1 hour). retryable NULL (the
-- default) leaves the decision to the class. An error over max_json_bytes() is
-- stored cut down (class, the first 8 KB of the message and 32 KB of the stack,
-- "truncated": true) rather than refused, so a failure can always be recorded.
-- worker is the id the job was claimed with (see complete_jobs), claim_id the claim's
-- token (NULL: any claim of that attempt; both required of every session but the
-- engine's, check_claim). Returns the job, or NULL if (id, attempt) is not running
-- under that worker and claim.
create or replace function pgrun.fail_job(
  id         bigint,
  attempt    integer,
  error      jsonb,
  retryable  boolean default null,
  worker     text default null,
  claim_id   uuid default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now  timestamptz := pgrun.clock();
  j      pgrun.jobs;
  final  boolean;
  perm   boolean;
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  if error is null or jsonb_typeof(error) <> 'object' or jsonb_typeof(error -> 'message') is distinct from 'string' then
    raise exception 'error % is not a JSON object with a "message" string', left(coalesce(error::text, 'NULL'), 200)
      using errcode = '22023', hint = 'Pass ''{"message": "what went wrong", "class": "timeout"}''.';
  end if;
  if pg_column_size(error) > pgrun.max_json_bytes() then
    error := jsonb_strip_nulls(jsonb_build_object('class', error ->> 'class',
               'message', left(error ->> 'message', 8192), 'stack', left(error ->> 'stack', 32768),
               'truncated', true));
  end if;
  perm := not coalesce(retryable, true) or pgrun.error_class_permanent(error ->> 'class');
  update pgrun.jobs j
  set failures = j.failures + 1,
      status = case when perm or j.failures + 1 >= j.max_attempts
                    then 'failed'::pgrun.job_status else 'queued' end,
      run_at = case when perm or j.failures + 1 >= j.max_attempts
                    then j.run_at
                    else v_now + pgrun.backoff(j.failures + 1,
                           coalesce((select q.backoff_base from pgrun.queues q where q.name = j.queue), interval '1 second'),
                           coalesce((select q.backoff_max from pgrun.queues q where q.name = j.queue), interval '1 hour')) end,
      finished_at = case when perm or j.failures + 1 >= j.max_attempts
                         then v_now end,
      error = fail_job.error || jsonb_build_object('attempt', j.attempt, 'at', v_now),
      lease_expires_at = null
  where j.id = fail_job.id and j.attempt = fail_job.attempt and j.status = 'running'
    and (fail_job.worker is null or j.claimed_by = fail_job.worker)
    and (fail_job.claim_id is null or j.claim_id = fail_job.claim_id)
  returning j.* into j;
  if not found then
    return null;
  end if;
  final := j.status = 'failed';
  perform pgrun.add_event(j.id, 'job.failed', case when final then 'error' else 'warn' end,
    left(error ->> 'message', 2000),
    jsonb_build_object('attempt', j.attempt, 'class', coalesce(error ->> 'class', 'error'),
                       'retryable', not perm, 'final', final,
                       'next_run_at', case when final then null else j.run_at end));
  return j;
end;
$$;

-- put_back returns a running job to its queue, due after delay, without spending an
-- attempt, and records event with reason. It is the shared body of retry_later and
-- requeue_job. Returns the job, or NULL if (id, attempt) is not running (under
-- worker and claim_id, when given).
create or replace function pgrun.put_back(
  id        bigint,
  attempt   integer,
  delay     interval,
  event     text,
  reason    text,
  worker    text default null,
  claim_id  uuid default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  if delay is null or delay < interval '0' or delay > interval '366 days' then
    raise exception 'delay % is not valid', coalesce(delay::text, 'NULL')
      using errcode = '22023', hint = 'Pass a delay from zero to 366 days, such as ''30 seconds''.';
  end if;
  if octet_length(reason) > 2000 then
    reason := left(reason, 2000) || '...';
  end if;
  update pgrun.jobs j
  set status = 'queued', run_at = pgrun.clock() + delay, lease_expires_at = null
  where j.id = put_back.id and j.attempt = put_back.attempt and j.status = 'running'
    and (put_back.worker is null or j.claimed_by = put_back.worker)
    and (put_back.claim_id is null or j.claim_id = put_back.claim_id)
  returning j.* into j;
  if not found then
    return null;
  end if;
  perform pgrun.add_event(j.id, event, 'info', reason,
    jsonb_build_object('attempt', j.attempt, 'worker', j.claimed_by, 'run_at', j.run_at));
  if delay = interval '0' then
    perform pg_notify('pgrun_jobs', j.queue);
  end if;
  return j;
end;
$$;

-- retry_later puts a running job back in the queue to run after delay, without
-- spending an attempt (the handler asked to be run later: a rate limit, a busy GPU).
-- Returns the job, or NULL if (id, attempt) is not running (under worker and
-- claim_id, when given).
create or replace function pgrun.retry_later(
  id        bigint,
  attempt   integer,
  delay     interval,
  reason    text default null,
  worker    text default null,
  claim_id  uuid default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  return pgrun.put_back(id, attempt, delay, 'job.retry_later', reason, worker, claim_id);
end;
$$;

-- requeue_job puts a running job back in the queue to run now, without spending an
-- attempt: the runner shutting down, or an operator turning a worker off. Returns the
-- job, or NULL if (id, attempt) is not running (under worker and claim_id, when
-- given).
create or replace function pgrun.requeue_job(
  id        bigint,
  attempt   integer,
  reason    text default null,
  worker    text default null,
  claim_id  uuid default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  return pgrun.put_back(id, attempt, interval '0', 'job.requeued', reason, worker, claim_id);
end;
$$;

-- cancel_job cancels a job that has not finished, and its unfinished descendants. A
-- pending, queued or waiting job is cancelled at once; a running one is cancelled too,
-- and its runner is told on the pgrun_cancel channel to cancel the handler's context
-- (its late completion then matches nothing). A failed job that holds its sequence
-- (36_sequences.sql) is cancelled too, which lets the sequence go on. Returns the job,
-- NULL if it had already finished; raises P0002 if no job has that id. Administrators
-- cancel any job; with the tenant mode on, an enqueuer cancels its own tenant's jobs
-- (another tenant's are P0002, as if they did not exist); without it, an enqueuer may
-- not cancel (42501).
create or replace function pgrun.cancel_job(
  id      bigint,
  reason  text default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  t  text;
begin
  select j.tenant into t from pgrun.jobs j where j.id = cancel_job.id;
  if not found or not pgrun.may_touch(t) then
    perform pgrun.job_not_found(cancel_job.id);
  end if;
  perform pgrun.check_may_cancel(format('job %s', cancel_job.id));
  return pgrun.cancel_tree(cancel_job.id, reason);
end;
$$;

-- cancel_tree is cancel_job without the caller's check: the engine's own cancels
-- (a failed parent's children, a failed or cancelled run's nodes, a timed-out
-- parent's children) call it. Granted to nobody.
create or replace function pgrun.cancel_tree(
  id      bigint,
  reason  text default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  prev  pgrun.job_status;
  j     pgrun.jobs;
begin
  select j.status into prev from pgrun.jobs j where j.id = cancel_tree.id for update;
  if not found then
    perform pgrun.job_not_found(cancel_tree.id);
  end if;
  update pgrun.jobs j
  set status = 'cancelled', finished_at = pgrun.clock(), lease_expires_at = null,
      error = jsonb_build_object('class', 'cancelled', 'message', coalesce(reason, 'cancelled'))
  where j.id = cancel_tree.id and (pgrun.is_active(j.status) or (j.status = 'failed' and pgrun.holds_sequence(j.id)))
  returning j.* into j;
  if not found then
    return null;
  end if;
  if prev = 'running' then
    perform pg_notify('pgrun_cancel', j.id || ':' || j.attempt);
  end if;
  perform pgrun.add_event(j.id, 'job.cancelled', 'warn', reason,
    jsonb_build_object('previous_status', prev, 'attempt', j.attempt));
  -- Descendants go too: queued, pending and waiting ones at once, running ones are
  -- told to stop (each recursion handles its own children).
  perform pgrun.cancel_tree(c.id, 'parent cancelled')
  from pgrun.jobs c
  where c.parent_id = j.id and pgrun.is_active(c.status);
  return j;
end;
$$;

-- retry_job redrives a failed or cancelled job: queued to run now, with its failure
-- and lease-expiry counts reset so it gets its full budget again. Returns the job,
-- NULL if it is not failed or cancelled; raises P0002 if no job has that id.
create or replace function pgrun.retry_job(id bigint)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  perform 1 from pgrun.jobs j where j.id = retry_job.id;
  if not found then
    perform pgrun.job_not_found(retry_job.id);
  end if;
  begin
    update pgrun.jobs j
    set status = 'queued', run_at = pgrun.clock(), failures = 0, lease_expiries = 0,
        finished_at = null, result = null, lease_expires_at = null
    where j.id = retry_job.id and j.status in ('failed', 'cancelled')
    returning j.* into j;
  exception when unique_violation then
    raise exception 'job % cannot be retried: another active job holds its unique_key', retry_job.id
      using errcode = '23505',
            hint = 'Wait for or cancel the job that holds the key: SELECT id FROM pgrun.jobs WHERE unique_key = ... AND pgrun.is_active(status);';
  end;
  if not found then
    return null;
  end if;
  if j.run_id is not null and j.parent_id is null then
    perform pgrun.node_redriven(j); -- a DAG node: its run resumes (41_runs.sql)
  end if;
  -- A durable await left behind by a cancel starts afresh: its recorded steps stay.
  delete from pgrun.job_waits w where w.job_id = j.id;
  perform pgrun.add_event(j.id, 'job.retried', 'info', 'manual redrive',
    jsonb_build_object('attempt', j.attempt));
  perform pg_notify('pgrun_jobs', j.queue);
  return j;
end;
$$;
