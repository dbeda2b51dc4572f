package sqlapi

// The outcomes a runner reports for the jobs it claimed (sql/functions/transitions.sql,
// children.sql). Each names the worker and the claim, so that a stale report (an
// earlier claim, another worker) matches nothing and changes nothing.

// CompleteJobs finishes a batch of claimed jobs and returns the queues in which the
// completions readied jobs, as ",q1,q2," (pgrun.readied; empty for none), and the ids
// it finished (a report that matched nothing is stale): $1 ids, $2 attempts, $3
// results (NULL: none has one), $4 worker, $5 claim ids.
const CompleteJobs = `select coalesce(current_setting('pgrun.readied', true), ''), done.ids
	from (select array_agg(id) as ids from pgrun.complete_jobs($1, $2, $3::jsonb[], $4, $5) id) done`

// CompleteJobsHanding is CompleteJobs that also hands this worker the next job of
// each sequence head named (hand_over) and returns the setting that lists them
// (pgrun.handed, ",id,id,"): $6 the heads, $7 the lease (NULL: each queue's
// default). HandedJobs, in the same transaction, reads them.
const CompleteJobsHanding = `select coalesce(current_setting('pgrun.readied', true), ''), done.ids,
	coalesce(current_setting('pgrun.handed', true), '')
	from (select array_agg(id) as ids from pgrun.complete_jobs($1, $2, $3::jsonb[], $4, $5, $6, $7) id) done`

// HandedJobs returns as [JobColumns] the jobs the complete_jobs call before it in the
// transaction handed over to worker $1 (pgrun.handed_jobs).
const HandedJobs = `select ` + JobColumns + ` from pgrun.handed_jobs($1)`

// CompleteJob finishes one claimed job, in the caller's transaction, and returns
// whether it was running under that claim: $1 id, $2 attempt, $3 result, $4 worker,
// $5 claim id.
const CompleteJob = `select pgrun.complete_job($1, $2, $3::jsonb, $4, $5)`

// FailJob records a failed attempt: $1 id, $2 attempt, $3 error, $4 retryable (NULL:
// the error's class decides), $5 worker, $6 claim id.
const FailJob = `select status::text from pgrun.fail_job($1, $2, $3::jsonb, $4, $5, $6)`

// RetryLater puts a running job back to run after a delay without spending an
// attempt: $1 id, $2 attempt, $3 delay, $4 reason (empty for none), $5 worker, $6 claim id.
const RetryLater = `select status::text from pgrun.retry_later($1, $2, $3, nullif($4, ''), $5, $6)`

// RequeueJob puts a running job back to run now without spending an attempt: $1 id,
// $2 attempt, $3 reason, $4 worker, $5 claim id.
const RequeueJob = `select status::text from pgrun.requeue_job($1, $2, $3, $4, $5)`

// RequeueJobs is RequeueJob for many jobs in one call: $1 ids, $2 attempts, $3 claim
// ids, $4 reason, $5 worker.
const RequeueJobs = `select pgrun.requeue_job(t.id, t.attempt, $4, $5, t.claim)
	from unnest($1::bigint[], $2::int[], $3::uuid[]) as t(id, attempt, claim)`

// DeferJob turns a running job into the waiting parent of children: $1 id, $2
// attempt, $3 children (a JSON array of job specs), $4 failure ratio, $5 worker, $6
// claim id.
const DeferJob = `select status::text from pgrun.defer_job($1, $2, $3::jsonb, $4, $5, $6)`
