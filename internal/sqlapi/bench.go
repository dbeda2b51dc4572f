package sqlapi

// The statements of `runner bench` and `runner demo` alone: clearing a bench queue,
// the bare claim and complete calls it times without a runner, and the
// measurements it reads back from the rows (both instants of each taken by the
// database). No engine code sends them.

// BenchDeleteQueueEvents deletes the audit log of a bench queue's jobs: $1 queue.
const BenchDeleteQueueEvents = `delete from pgrun.job_events where job_id in (select id from pgrun.jobs where queue = $1)`

// BenchDeleteQueueJobs deletes a bench queue's jobs: $1 queue.
const BenchDeleteQueueJobs = `delete from pgrun.jobs where queue = $1`

// BenchDeleteQueue deletes a bench queue's row: $1 name.
const BenchDeleteQueue = `delete from pgrun.queues where name = $1`

// BenchVacuumJobs vacuums and analyzes pgrun.jobs, so that runs start comparable.
const BenchVacuumJobs = `vacuum (analyze) pgrun.jobs`

// BenchCheckpoint asks for a checkpoint before a timed run (superuser or
// pg_checkpoint only; a bench without the right goes on without it).
const BenchCheckpoint = `checkpoint`

// BenchCheckpoints counts the checkpoints the server has started since its
// statistics were reset, timed and requested. Read through to_jsonb so that the
// statement parses on every version: PostgreSQL 17 moved the counts to
// pg_stat_checkpointer, and there it returns NULL (not known).
const BenchCheckpoints = `select (to_jsonb(b) ->> 'checkpoints_timed')::bigint + (to_jsonb(b) ->> 'checkpoints_req')::bigint
	from pg_catalog.pg_stat_bgwriter b`

// BenchStartLatency reads enqueue-to-start latency (started_at - created_at) of a
// queue's jobs in milliseconds at p50, p99 and p999, and the rate they started at:
// $1 queue, $2 from this job id on.
const BenchStartLatency = `select
	1000 * percentile_cont(0.5) within group (order by extract(epoch from started_at - created_at)),
	1000 * percentile_cont(0.99) within group (order by extract(epoch from started_at - created_at)),
	1000 * percentile_cont(0.999) within group (order by extract(epoch from started_at - created_at)),
	count(*) / greatest(extract(epoch from max(started_at) - min(started_at)), 0.001)
	from pgrun.jobs where queue = $1 and id >= $2`

// BenchStartedAt lists when each job of a queue started: $1 queue.
const BenchStartedAt = `select id, started_at from pgrun.jobs where queue = $1 and started_at is not null`

// BenchChainDoneToStarted reads, over the a -> b -> c chain runs from run $1 on, the
// p50 and p99 in milliseconds from a node's finish to its dependent's start.
const BenchChainDoneToStarted = `with pairs as (
	  select extract(epoch from d.started_at - p.finished_at) * 1000 as started_ms
	  from pgrun.jobs p join pgrun.jobs d on d.run_id = p.run_id
	   and ((p.node = 'a' and d.node = 'b') or (p.node = 'b' and d.node = 'c'))
	  where p.run_id >= $1)
	select percentile_cont(0.5) within group (order by started_ms),
	       percentile_cont(0.99) within group (order by started_ms)
	from pairs`

// BenchClaimOne claims one job and returns its id and attempt (pgrun.claim_jobs): $1
// queue, $2 worker id.
const BenchClaimOne = `select id, attempt from pgrun.claim_jobs($1, $2, 1)`

// BenchCompleteJobs completes claimed jobs with no result (pgrun.complete_jobs): $1
// ids, $2 attempts.
const BenchCompleteJobs = `select pgrun.complete_jobs($1, $2)`

// BenchDeferJob defers a claimed job to children (pgrun.defer_job): $1 id, $2
// attempt, $3 the children's specs.
const BenchDeferJob = `select pgrun.defer_job($1, $2, $3::jsonb)`

// BenchClock reads the database's clock now (not the transaction's start).
const BenchClock = `select clock_timestamp()`

// BenchFinishedSinceMS reads how many milliseconds after $2 job $1 finished.
const BenchFinishedSinceMS = `select extract(epoch from finished_at - $2::timestamptz) * 1000
	from pgrun.jobs where id = $1`

// BenchRunsRunning counts the runs from id $1 on that are still running.
const BenchRunsRunning = `select count(*) from pgrun.runs where id >= $1 and status = 'running'`

// DemoEmbedSummary reads what the embed node of demo run $1 did: the seconds from
// its first batch's start to its last batch's finish, the batch jobs, and the
// vectors stored for corpus $2.
const DemoEmbedSummary = `select extract(epoch from max(c.finished_at) - min(c.started_at)), count(*),
	(select count(*) from pgrun_examples.documents d where d.corpus = $2 and d.embedding is not null)
	from pgrun.jobs c join pgrun.jobs p on p.id = c.parent_id
	where p.run_id = $1 and p.node = 'embed'`
