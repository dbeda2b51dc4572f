package sqlapi

// QueueCounts reads each queue's counts by name (pgrun.queue_counts, the rows of the
// queue_stats view).
const QueueCounts = `select queue, paused, queued, scheduled, running, pending, waiting,
	oldest_queued_age, succeeded_1m, failed_1m, cancelled_1m, unhandled, estimated,
	held, fair_by, concurrency_limit, keys_running, key_rate_limit, key_rate_period, key_windows,
	keys_at_limit, priority_aging
	from pgrun.queue_counts() order by queue`

// JobBlocker says why a queued or pending job is not being claimed now
// (pgrun.job_blocker), NULL when nothing holds it: $1 id.
const JobBlocker = `select pgrun.job_blocker($1)`
