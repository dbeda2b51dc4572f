package sqlapi

// CancelJob cancels one job (pgrun.cancel_job) and returns it, or no row when it had
// already finished: $1 id, $2 reason (empty: none).
const CancelJob = `select ` + JobColumns + ` from pgrun.cancel_job($1, nullif($2, '')) where id is not null`

// RetryJob redrives one failed or cancelled job (pgrun.retry_job) and returns it, or
// no row when it was in another state: $1 id.
const RetryJob = `select ` + JobColumns + ` from pgrun.retry_job($1) where id is not null`
