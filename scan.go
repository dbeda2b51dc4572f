package pgrun

import (
	"github.com/jackc/pgx/v5"
)

// ScanRow implements pgx.RowScanner, so pgx.CollectRows(rows, pgx.RowToAddrOf[Job])
// (and pgx.RowTo[Job]) scan a job. Rows whose columns are exactly
// sqlapi.JobColumns, the select list of every statement of the binding that returns
// jobs, are scanned into a hand-written list of fields (targets); any other column
// list falls back to pgx.RowToStructByName. The hand-written list exists because the
// job row is on the hot paths (a claim of 500 jobs, an EnqueueMany of 1,000): measured
// there, RowToStructByName cost 2.5 times the client CPU (10.5 ms against 4.3 ms per
// 1,000 rows) and twice the allocations. scan_test.go holds the list to the column
// list and to Job's db tags.
func (j *Job) ScanRow(rows pgx.Rows) error {
	if columnsAre(rows, jobColumnNames, false) {
		return rows.Scan(j.targets(make([]any, 0, len(jobColumnNames)))...)
	}
	v, err := pgx.RowToStructByName[jobByName](rows)
	*j = Job(v)
	return err
}

// ScanRow implements pgx.RowScanner for rows of pgrun.enqueued: the job's columns
// then deduplicated (see [Job.ScanRow]).
func (e *Enqueued) ScanRow(rows pgx.Rows) error {
	if columnsAre(rows, jobColumnNames, true) {
		dst := e.Job.targets(make([]any, 0, len(jobColumnNames)+1))
		if err := rows.Scan(append(dst, &e.Deduplicated)...); err != nil {
			return err
		}
		e.Job.Deduplicated = e.Deduplicated
		return nil
	}
	v, err := pgx.RowToStructByName[enqueuedByName](rows)
	*e = Enqueued(v)
	e.Job.Deduplicated = e.Deduplicated
	return err
}

// jobByName and enqueuedByName have Job's and Enqueued's fields without their
// ScanRow methods, for pgx's by-name scan of other column lists.
type (
	jobByName      Job
	enqueuedByName Enqueued
)

// jobColumnNames are the names of the columns of sqlapi.JobColumns, in its order.
var jobColumnNames = []string{"id", "kind", "queue", "args", "status", "priority", "run_at",
	"attempt", "failures", "max_attempts", "lease_expiries", "claimed_by", "lease_expires_at",
	"heartbeat_at", "timeout", "created_at", "started_at", "finished_at", "result", "error",
	"progress_current", "progress_total", "parent_id", "run_id", "node", "deps_remaining",
	"model", "unique_key", "meta", "children_failed", "child_errors", "failure_ratio",
	"dispatched_at", "concurrency_key", "model_required", "tenant", "deadline_at", "claim_id",
	"lease_length"}

// columnsAre reports whether the row's columns are names (then deduplicated, with
// dedup). Comparing some forty short names costs far less than one reflective scan.
func columnsAre(rows pgx.Rows, names []string, dedup bool) bool {
	fds := rows.FieldDescriptions()
	n := len(names)
	if dedup {
		n++
	}
	if len(fds) != n {
		return false
	}
	for i, name := range names {
		if fds[i].Name != name {
			return false
		}
	}
	return !dedup || fds[len(names)].Name == "deduplicated"
}

// targets appends j's fields to dst in the order of jobColumnNames. JSON columns go
// in as plain bytes, which pgx copies as they are, and the status as a plain string
// (a named string type costs pgx a reflection per row).
func (j *Job) targets(dst []any) []any {
	return append(dst, &j.ID, &j.Kind, &j.Queue, (*[]byte)(&j.Args), (*string)(&j.Status),
		&j.Priority, &j.RunAt, &j.Attempt, &j.Failures, &j.MaxAttempts, &j.LeaseExpiries,
		&j.ClaimedBy, &j.LeaseExpiresAt, &j.HeartbeatAt, &j.Timeout, &j.CreatedAt, &j.StartedAt,
		&j.FinishedAt, (*[]byte)(&j.Result), (*[]byte)(&j.Error), &j.ProgressCurrent,
		&j.ProgressTotal, &j.ParentID, &j.RunID, &j.Node, &j.DepsRemaining, &j.Model,
		&j.UniqueKey, (*[]byte)(&j.Meta), &j.ChildrenFailed, &j.ChildErrors, &j.FailureRatio,
		&j.DispatchedAt, &j.ConcurrencyKey, &j.ModelRequired, &j.Tenant, &j.DeadlineAt,
		&j.ClaimID, &j.LeaseLength)
}
