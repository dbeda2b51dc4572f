package sqlapi

// The statements of package pgruntest, the test kit for users' own code.

// FindEnqueued reads the jobs of a kind that match a test's expectations, newest
// first: $1 kind, $2 queue, $3 priority, $4 statuses (text[]), $5 args the job's args
// contain (jsonb @>), $6 unique key, $7 max attempts (each NULL: any).
var FindEnqueued = `select ` + JobReadColumns + ` from pgrun.jobs
	where kind = $1
	and ($2::text is null or queue = $2)
	and ($3::integer is null or priority = $3)
	and ($4::text[] is null or status = any ($4::text[]::pgrun.job_status[]))
	and ($5::jsonb is null or args @> $5::jsonb)
	and ($6::text is null or unique_key = $6)
	and ($7::integer is null or max_attempts = $7)
	order by id desc`

// RecentJobs reads the newest jobs of any kind, for a failure message: $1 at most
// this many.
var RecentJobs = `select ` + JobReadColumns + ` from pgrun.jobs order by id desc limit $1`

// DueQueue names the queue of the next due job of a kind, in claim order: $1 kind.
const DueQueue = `select queue from pgrun.jobs
	where kind = $1 and status = 'queued' and run_at <= pgrun.clock()
	order by priority, run_at, id limit 1`

// ClaimJob claims the next due job of a queue for a worker (pgrun.claim_job), or no
// row: $1 queue, $2 worker, $3 kinds.
const ClaimJob = `select ` + JobColumns + ` from pgrun.claim_job($1, $2, $3)`
