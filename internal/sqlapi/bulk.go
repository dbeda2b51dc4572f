package sqlapi

// The statements of 52_bulk.sql: operator actions on every job a filter matches, and
// the jobs list read by the same rule (pgrun.job_matches), so that an action touches
// exactly the jobs the list shows. A filter is a jsonb object with 52_bulk.sql's keys
// (queue, kind, states, error, args, arg, arg_value, created_from, created_to,
// finished_from, finished_to, parent, run, id_min, id_max).

// RetryMatching redrives the next batch of failed or cancelled jobs a filter matches
// (pgrun.retry_matching): $1 filter, $2 dry run (count only), $3 after this id (0:
// the first batch), $4 at most this many (1 to 10,000). Returns matched, changed,
// skipped (a JSON object of reason to count, BulkSkipReasons) and last_id, the next
// batch's $3 (NULL: nothing matched, the end).
const RetryMatching = `select matched, changed, skipped, last_id from pgrun.retry_matching($1::jsonb, $2, $3, $4)`

// CancelMatching cancels the next batch of unfinished jobs a filter matches
// (pgrun.cancel_matching): $1 filter, $2 dry run, $3 after this id, $4 at most this
// many, $5 the reason (NULL: none). Returns as RetryMatching.
const CancelMatching = `select matched, changed, skipped, last_id from pgrun.cancel_matching($1::jsonb, $2, $3, $4, $5)`

// DeleteMatching deletes the next batch of finished jobs a filter matches, with their
// events (pgrun.delete_matching): $1 filter, $2 dry run, $3 after this id, $4 at most
// this many. Returns as RetryMatching.
const DeleteMatching = `select matched, changed, skipped, last_id from pgrun.delete_matching($1::jsonb, $2, $3, $4)`

// BulkSkipReasons are the reasons the bulk actions give for a matching job they left
// as it was (the keys of skipped), each with what it means, as a count of jobs reads
// it ("177 not failed or cancelled").
var BulkSkipReasons = map[string]string{
	"busy":                    "busy in another transaction (run the action again for them)",
	"no_longer_matches":       "changed meanwhile and no longer match",
	"not_failed_or_cancelled": "not failed or cancelled",
	"unique_key_held":         "with a unique key an active job holds",
	"already_finished":        "already finished",
	"not_finished":            "not finished (cancel them first)",
	"workflow_in_progress":    "part of a workflow still in progress",
}

// jobMatches is the filter rule applied to the row j, with the filter as $3.
const jobMatches = `pgrun.job_matches($3::jsonb, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at,
                         j.finished_at, j.parent_id, j.run_id)`

// JobsMatching is one page of the jobs list by the filter rule: jobs below id $1 and
// at or above id $2 that filter $3 matches (pgrun.job_matches), newest first, at most
// $4. The caller keeps $1 - $2 to a window of ids (the jobs page reads 20,000 at a
// time, and goes on further back within a time budget), so a filter that matches
// few rows costs a bounded range scan of the primary key, never the whole table.
const JobsMatching = `select ` + dashboardJobColumns + `
from pgrun.jobs j
where j.id < $1 and j.id >= $2
  and ` + jobMatches + `
order by j.id desc
limit $4`

// JobsMatchingFailed is JobsMatching for failed jobs alone (filter $3's states are
// ["failed"]), by the partial index of failed jobs: no window needed.
const JobsMatchingFailed = `select ` + dashboardJobColumns + `
from pgrun.jobs j
where j.status = 'failed' and j.id < $1 and j.id >= $2
  and ` + jobMatches + `
order by j.id desc
limit $4`

// JobsMatchingByParent is JobsMatching for the children of job $2 (by the parent
// index): below id $1, filter $3, at most $4.
const JobsMatchingByParent = `select ` + dashboardJobColumns + `
from pgrun.jobs j
where j.parent_id = $2 and j.id < $1
  and ` + jobMatches + `
order by j.id desc
limit $4`
