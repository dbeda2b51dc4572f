package sqlapi

// RunColumns is the select list of one row of pgrun.runs, the status as text.
const RunColumns = `id, workflow, version, input, status::text as status, unique_key, output, error,
	created_at, finished_at, tenant`

// StartRun starts a run of a workflow's newest version (pgrun.start_run): $1
// workflow, $2 input, $3 unique key (empty: none).
const StartRun = `select ` + RunColumns + ` from pgrun.start_run($1, $2::jsonb, nullif($3, ''))`

// GetRun reads one run: $1 id.
const GetRun = `select ` + RunColumns + ` from pgrun.runs where id = $1`

// RunNodes reads the nodes of a run in creation order (the run_status view): $1 run id.
const RunNodes = `select node, job_id, kind, status::text as status, deps_remaining, attempt,
	progress_current, progress_total, started_at, finished_at, error_class, error_message
	from pgrun.run_status where run_id = $1 order by job_id`

// SubmitInput gives an input node its payload (pgrun.submit_input) and returns
// whether the node took it now: $1 run id, $2 node, $3 payload.
const SubmitInput = `select pgrun.submit_input($1, $2, $3::jsonb)`

// CancelRun cancels a running run and its unfinished nodes (pgrun.cancel_run) and
// returns it, or no row when it had already ended: $1 run id, $2 reason (empty: none).
const CancelRun = `select ` + RunColumns + ` from pgrun.cancel_run($1, nullif($2, '')) where id is not null`

// RetryRun redrives every failed or cancelled node of a run (pgrun.retry_run) and
// returns the run: $1 run id.
const RetryRun = `select ` + RunColumns + ` from pgrun.retry_run($1) where id is not null`
