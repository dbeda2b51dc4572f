package sqlapi

import "strings"

// JobColumns is the select list of one job: every column of pgrun.jobs in table
// order, the status as text. It scans into pgrun.Job by name; a column added to the
// table is added here (tests/client_columns_test.go checks the two agree). Use it over
// what a function returns (claim_jobs, cancel_job, enqueue_columns...): over
// pgrun.jobs itself, claim_id is a column only administrators may read, and
// JobReadColumns is the list for everyone.
const JobColumns = `id, kind, queue, args, status::text as status, priority, run_at, attempt,
	failures, max_attempts, lease_expiries, claimed_by, lease_expires_at, heartbeat_at,
	timeout, created_at, started_at, finished_at, result, error, progress_current,
	progress_total, parent_id, run_id, node, deps_remaining, model, unique_key, meta,
	children_failed, child_errors, failure_ratio, dispatched_at, concurrency_key,
	model_required, tenant, deadline_at, claim_id, lease_length, sequence_key, debounce_key`

// JobReadColumns is JobColumns for reading pgrun.jobs: the claim token comes through
// pgrun.claim_token, which shows it to the claim's holder and administrators and
// NULL to anyone else.
var JobReadColumns = strings.Replace(JobColumns, " claim_id,", " pgrun.claim_token(id) as claim_id,", 1)

// GetJob reads one job: $1 id.
var GetJob = `select ` + JobReadColumns + ` from pgrun.jobs where id = $1`

// listJobsWhere is the filter of ListJobs and ListJobsNewest: $1 queue, $2 kind,
// $3 statuses (text[]), $4 parent id, $5 run id (each NULL: any).
const listJobsWhere = `($1::text is null or queue = $1)
	and ($2::text is null or kind = $2)
	and ($3::text[] is null or status = any ($3::text[]::pgrun.job_status[]))
	and ($4::bigint is null or parent_id = $4)
	and ($5::bigint is null or run_id = $5)`

// ListJobs reads a page of jobs, oldest first, by keyset on id (never OFFSET): $1
// queue, $2 kind, $3 statuses, $4 parent id, $5 run id (each NULL: any), $6 the last
// id of the previous page (NULL: from the start), $7 the page size.
var ListJobs = `select ` + JobReadColumns + ` from pgrun.jobs
	where ` + listJobsWhere + `
	and ($6::bigint is null or id > $6)
	order by id limit $7`

// ListJobsNewest is ListJobs newest first: $6 is the last (smallest) id of the
// previous page.
var ListJobsNewest = `select ` + JobReadColumns + ` from pgrun.jobs
	where ` + listJobsWhere + `
	and ($6::bigint is null or id < $6)
	order by id desc limit $7`

// JobEvents reads the audit log of one job, oldest first: $1 job id.
const JobEvents = `select id, job_id, at, event, level, message, fields
	from pgrun.job_events where job_id = $1 order by id`
