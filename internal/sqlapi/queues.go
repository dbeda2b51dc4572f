package sqlapi

// QueueColumns is the select list of one row of pgrun.queues (a queue's policy).
const QueueColumns = `name, paused, created_at, updated_at, max_running, rate_limit, rate_period,
	rate_window_start, rate_window_count, concurrency_limit, default_lease, default_timeout,
	default_max_attempts, backoff_base, backoff_max, retention, archive, warm_wait, ephemeral,
	sequence_on_failure, fair_by, key_rate_limit, key_rate_period, priority_aging`

// ListQueues reads every queue's policy by name.
const ListQueues = `select ` + QueueColumns + ` from pgrun.queues order by name`

// PauseQueue stops claims from an existing queue (pgrun.pause_queue): $1 name.
const PauseQueue = `select ` + QueueColumns + ` from pgrun.pause_queue($1)`

// ResumeQueue lets claims from an existing queue start again (pgrun.resume_queue): $1
// name.
const ResumeQueue = `select ` + QueueColumns + ` from pgrun.resume_queue($1)`

// SetQueue sets a queue's policy, creating the queue (pgrun.set_queue): $1 name, $2
// max_running, $3 rate_limit, $4 rate_period, $5 concurrency_limit, $6 default_lease,
// $7 default_timeout, $8 default_max_attempts, $9 backoff_base, $10 backoff_max, $11
// retention, $12 archive, $13 reset (settings to clear), $14 warm_wait, $15 ephemeral,
// $16 sequence_on_failure, $17 fair_by, $18 key_rate_limit, $19 key_rate_period, $20
// priority_aging (each NULL: unchanged).
const SetQueue = `select ` + QueueColumns + ` from pgrun.set_queue(name => $1,
	max_running => $2, rate_limit => $3, rate_period => $4, concurrency_limit => $5,
	default_lease => $6, default_timeout => $7, default_max_attempts => $8,
	backoff_base => $9, backoff_max => $10, retention => $11, archive => $12,
	reset => coalesce($13::text[], '{}'), warm_wait => $14, ephemeral => $15,
	sequence_on_failure => $16, fair_by => $17, key_rate_limit => $18, key_rate_period => $19,
	priority_aging => $20)`

// RetryJobs redrives failed jobs in bulk (pgrun.retry_jobs) and returns how many: $1
// queue, $2 kind, $3 failed at or after (each NULL: any), $4 at most this many.
const RetryJobs = `select pgrun.retry_jobs($1, $2, $3, $4)`

// RetryJobsDefaultMax is RetryJobs with the engine's default bound: $1 queue, $2
// kind, $3 failed at or after (each NULL: any).
const RetryJobsDefaultMax = `select pgrun.retry_jobs($1, $2, $3)`

// CountRetryable counts the jobs RetryJobs would redrive (pgrun.retryable_jobs): $1
// queue, $2 kind, $3 failed at or after (each NULL: any), $4 at most this many.
const CountRetryable = `select count(*) from pgrun.retryable_jobs($1, $2, $3, $4)`

// CountRetryableDefaultMax is CountRetryable with the engine's default bound: $1
// queue, $2 kind, $3 since.
const CountRetryableDefaultMax = `select count(*) from pgrun.retryable_jobs($1, $2, $3)`
