package sqlapi

// QueueMetrics reads every queue's gauges for a Prometheus scrape from
// pgrun.queue_counts() (stats.sql): counts exact up to stats_exact_limit() rows and
// estimated past it, the oldest due job found per priority level over the claim
// index, so a scrape costs the same with a backlog of millions. oldest_queued_seconds
// is 0 when nothing is due.
const QueueMetrics = `select queue, paused, queued, scheduled, running, pending, waiting,
	coalesce(extract(epoch from oldest_queued_age), 0)::float8 as oldest_queued_seconds,
	unhandled, estimated
	from pgrun.queue_counts()`
