-- 02_retired.sql: every function signature the SQL API has retired, with the version
-- that retired it, applied before the files of the API (10 onwards), so that a new
-- signature never meets its predecessor. Migrate also drops any function of schema
-- pgrun the set no longer defines (functionset.go), so this file is the
-- record a reader and an upgrade can go by: a signature leaves the API here, in the
-- same change that appends parameters to its successor (docs/upgrading.md). Version 0
-- is everything before the API carried a version.

-- from 33_children.sql
drop function if exists pgrun.defer_job(bigint, integer, jsonb, double precision); -- retired in version 0
drop function if exists pgrun.defer_job(bigint, integer, jsonb, double precision, text); -- retired in version 1

-- from 30_claim.sql
drop function if exists pgrun.claim_jobs(text, text, integer, interval, text[]); -- retired in version 0
drop function if exists pgrun.claim_jobs(text, text, integer, interval, text[], text[]); -- retired in version 0
drop function if exists pgrun.renew_leases(text, bigint[], interval); -- retired in version 1
-- (an internal helper of claim_jobs, never granted: it now takes the job's fields)
drop function if exists pgrun.may_take_cold(pgrun.jobs, text, text[], text[], timestamptz, interval); -- retired in version 4

-- from 38_claim_keys.sql (an internal helper of claim_keyed, never granted: it
-- takes the queue's front and returns each job's priority and run_at now)
drop function if exists pgrun.claim_front(text, timestamptz, integer, smallint[], interval, text[], text, text[],
                                          text[], text[], interval, bigint[]); -- retired in version 9
-- (it takes whether to lock the jobs it returns)
drop function if exists pgrun.claim_front(text, timestamptz, integer, smallint[], interval, text[], text, text[],
                                          text[], text[], interval, bigint[], smallint, timestamptz, bigint); -- retired in version 10
-- (an internal helper of claim_jobs, never granted: it takes whether the claim counts
-- its jobs' rate windows itself or leaves that to key_rate_take)
drop function if exists pgrun.claim_keyed(pgrun.queues, text, integer, interval, timestamptz, text[], text, text[],
                                          text[], interval); -- retired in version 10
-- (an internal helper of the claim and the queue views, never granted: key_limits,
-- which also returns the row of each key's rate window, replaces it)
drop function if exists pgrun.key_rooms(pgrun.queues, text[], timestamptz); -- retired in version 9

-- from 36_sequences.sql (internal helpers of the dispatch, never granted: they take
-- the heads whose next job is handed over now)
drop function if exists pgrun.sequences_ended(text[], text[], text[], bigint[]); -- retired in version 10
drop function if exists pgrun.sequences_promote(text[], text[], text[], boolean); -- retired in version 10
-- (from 30_claim.sql: claim_locked, an internal helper of claim_jobs, never granted,
-- takes the status a handed-over job must still have)
drop function if exists pgrun.claim_locked(bigint[], text, timestamptz, interval); -- retired in version 10

-- from 62_maintain.sql (an internal helper of maintain, never granted: it takes a
-- step's own counts now)
drop function if exists pgrun.step_ms(text, timestamptz); -- retired in version 8

-- from 34_dispatch.sql
drop function if exists pgrun.dispatch_finished(bigint[]); -- retired in version 0
-- The row trigger jobs_before_finish (retired in version 0), then its function. It is
-- dropped only where it exists: DROP TRIGGER locks the table even when there is
-- nothing to drop.
do $$
begin
  if exists (select 1 from pg_trigger where tgrelid = 'pgrun.jobs'::regclass and tgname = 'jobs_before_finish') then
    drop trigger jobs_before_finish on pgrun.jobs;
  end if;
end $$;
drop function if exists pgrun.jobs_before_finish(); -- retired in version 0

-- from 20_enqueue.sql
drop function if exists pgrun.replace_queued(text, jsonb, integer, timestamptz); -- retired in version 0
drop function if exists pgrun.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, bigint, text, interval, jsonb); -- retired in version 0
drop function if exists pgrun.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, bigint, text, interval, jsonb, text, interval, text); -- retired in version 1
drop function if exists pgrun.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, bigint, text, interval, jsonb, text, interval, text, boolean); -- retired in version 8

-- from 62_maintain.sql
drop function if exists pgrun.maintain(integer, interval, integer); -- retired in version 0
drop function if exists pgrun.maintain(integer, interval, integer, interval); -- retired in version 0

-- from 50_queues.sql
drop function if exists pgrun.set_queue(text, integer, integer, interval, integer, interval, integer, interval, interval, interval, boolean, text[]); -- retired in version 0
drop function if exists pgrun.set_queue(text, integer, integer, interval, integer, interval, interval, integer, interval, interval, interval, boolean, text[]); -- retired in version 0
drop function if exists pgrun.set_queue(text, integer, integer, interval, integer, interval, interval, integer, interval, interval, interval, boolean, text[], interval); -- retired in version 0
drop function if exists pgrun.set_queue(text, integer, integer, interval, integer, interval, interval, integer, interval, interval, interval, boolean, text[], interval, boolean); -- retired in version 8

-- from 41_runs.sql
drop function if exists pgrun.node_dependents(pgrun.runs, text); -- retired in version 0

-- from 32_transitions.sql
drop function if exists pgrun.complete_jobs(bigint[], integer[], jsonb[]); -- retired in version 0
drop function if exists pgrun.complete_jobs(bigint[], integer[], jsonb[], text); -- retired in version 1
drop function if exists pgrun.complete_jobs(bigint[], integer[], jsonb[], text, uuid[]); -- retired in version 10
drop function if exists pgrun.complete_job(bigint, integer, jsonb); -- retired in version 0
drop function if exists pgrun.complete_job(bigint, integer, jsonb, text); -- retired in version 1
drop function if exists pgrun.fail_job(bigint, integer, jsonb, boolean); -- retired in version 0
drop function if exists pgrun.fail_job(bigint, integer, jsonb, boolean, text); -- retired in version 1
drop function if exists pgrun.put_back(bigint, integer, interval, text, text); -- retired in version 0
drop function if exists pgrun.put_back(bigint, integer, interval, text, text, text); -- retired in version 1
drop function if exists pgrun.retry_later(bigint, integer, interval, text); -- retired in version 0
drop function if exists pgrun.retry_later(bigint, integer, interval, text, text); -- retired in version 1
drop function if exists pgrun.requeue_job(bigint, integer, text); -- retired in version 0
drop function if exists pgrun.requeue_job(bigint, integer, text, text); -- retired in version 1

-- from 12_workers.sql
drop function if exists pgrun.worker_heartbeat(text, text, integer, text[], text[], text, text); -- retired in version 0
drop function if exists pgrun.worker_heartbeat(text, text, integer, text[], text[], text, text, interval); -- retired in version 0
drop function if exists pgrun.worker_heartbeat(text, text, integer, text[], text[], text, text, interval, text[]); -- retired in version 0

-- from 21_enqueue_batch.sql
drop function if exists pgrun.enqueue_batch(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], bigint[], text[], interval[], jsonb[], text[]); -- retired in version 1
-- sequences and debounce appended their arrays and parameters (sequence_key,
-- debounce_key, debounce, debounce_edge)
drop function if exists pgrun.enqueue_batch(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], bigint[], text[], interval[], jsonb[], text[], interval[], text[], boolean[]); -- retired in version 8
drop function if exists pgrun.enqueue_columns(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], bigint[], text[], interval[], jsonb[], text[], interval[], text[], boolean[]); -- retired in version 8
drop function if exists pgrun.job_spec(text, jsonb, text, integer, timestamptz, integer, text, bigint, text, interval, jsonb, text, interval, text, boolean); -- retired in version 8
drop function if exists pgrun.spec_at(integer, text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], bigint[], text[], interval[], jsonb[], text[], interval[], text[], boolean[]); -- retired in version 8

-- from telemetry.sql
drop function if exists pgrun.record_hw(text, real, bigint, bigint, jsonb, interval); -- retired in version 2

-- from 31_progress.sql: a handler's calls present the claim (worker, claim token)
drop function if exists pgrun.set_progress(bigint, bigint, bigint); -- retired in version 5
drop function if exists pgrun.beat(bigint[]); -- retired in version 5
drop function if exists pgrun.emit(bigint, text, jsonb, text, text); -- retired in version 5

-- from 01_common.sql: check_reporter became check_claim (never granted)
drop function if exists pgrun.check_reporter(text); -- retired in version 5
