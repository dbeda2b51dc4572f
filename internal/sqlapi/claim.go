package sqlapi

// JobColumns is the select list of a pgrun.jobs row in the order of the db tags of
// pgrun.Job (status as text, so that it scans into a plain string).
const JobColumns = `id, kind, queue, args, status::text as status, priority, run_at, attempt,
	failures, max_attempts, lease_expiries, claimed_by, lease_expires_at, heartbeat_at,
	timeout, created_at, started_at, finished_at, result, error, progress_current,
	progress_total, parent_id, run_id, node, deps_remaining, model, unique_key, meta, tenant, claim_id`

// ClaimJobs claims up to n due jobs of one queue (pgrun.claim_jobs) and returns them
// as [JobColumns]: $1 queue, $2 worker, $3 n, $4 lease (NULL: the queue's default),
// $5 warm models, $6 handled kinds, $7 $8 $9 the key (priority, run_at, id) to resume
// after (NULL: from the start).
const ClaimJobs = `select ` + JobColumns + `
	from pgrun.claim_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)`
