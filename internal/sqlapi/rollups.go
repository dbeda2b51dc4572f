package sqlapi

// The statements over the per-minute rollups (sql/functions/74_rollups.sql): the
// dashboard's time-range charts, its errors page and the typical run times that flag
// slow running jobs. Each reads a few thousand rollup rows at most, plus the minutes
// not rolled up yet (counted live, bounded), so its cost does not grow with the
// number of jobs.

// DashboardJobSeries is throughput, failures and wait and run percentiles
// (pgrun.job_series) over the last $1 (an interval, at most 8 days) in buckets of $2
// (whole minutes, 1 minute to 1 day, at most 2,000 buckets), for queue $3 and kind $4
// (NULL: all), grouped by $5: NULL per queue and kind, 'queue', 'kind' or 'all' (the
// columns not grouped by are NULL). One row per bucket that had endings, oldest
// first; times in seconds; partial marks a bucket not over yet.
const DashboardJobSeries = `select at, queue, kind, succeeded, failed, cancelled, wait_n, wait_p50, wait_p95,
       run_n, run_p50, run_p95, partial
from pgrun.job_series($1, $2, $3, $4, $5)`

// DashboardErrorGroups is the failures of the last $1 (an interval, at most 8 days)
// by queue, kind and error group (pgrun.error_groups), most first, at most $2 (1 to
// 500) groups: each with a sample message, its count, first and last failure, and
// spark, its counts in 24 equal slices of the span. error_group is NULL for failures
// without a message. The bulk filter {"queue", "kind", "states": ["failed"],
// "error_group"} selects a group's failed jobs.
const DashboardErrorGroups = `select queue, kind, error_group, sample, n, first_seen, last_seen, spark
from pgrun.error_groups($1, $2)`

// DashboardTypicalRunTimes is, per queue and kind, how many jobs ended over the last
// $1 (an interval, at most 8 days) and the p50 and p95 of their run times in seconds
// (pgrun.typical_run_times).
const DashboardTypicalRunTimes = `select queue, kind, n, p50, p95 from pgrun.typical_run_times($1)`

// RollupMinutes rolls up the closed minutes after the rollups' watermark as of $1
// (pgrun.rollup_minutes, a maintain() step) and returns how many minutes it moved on.
const RollupMinutes = `select pgrun.rollup_minutes($1)`
