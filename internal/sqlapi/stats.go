package sqlapi

// QueueCounts reads each queue's counts by name (pgrun.queue_counts, the rows of the
// queue_stats view).
const QueueCounts = `select queue, paused, queued, scheduled, running, pending, waiting,
	oldest_queued_age, succeeded_1m, failed_1m, cancelled_1m, unhandled, estimated
	from pgrun.queue_counts() order by queue`
