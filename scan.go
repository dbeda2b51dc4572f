package pgrun

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ScanRow implements pgx.RowScanner, so pgx.CollectRows(rows, pgx.RowToAddrOf[Job])
// (and pgx.RowTo[Job]) scan a job. Rows whose columns are exactly
// sqlapi.JobColumns, the select list of every statement of the binding that returns
// jobs, are decoded from their wire bytes (jobwire.go; [AppendJobs] does the same
// for many rows with fewer allocations); any other column list falls back to
// pgx.RowToStructByName.
func (j *Job) ScanRow(rows pgx.Rows) error {
	if w, ok := newJobWire(rows, false, 1); ok && w.decode(rows.RawValues(), j) {
		return nil
	}
	return j.scanSlow(rows, false)
}

// ScanRow implements pgx.RowScanner for rows of pgrun.enqueued: the job's columns
// then deduplicated and folded (see [Job.ScanRow]).
func (e *Enqueued) ScanRow(rows pgx.Rows) error {
	if w, ok := newJobWire(rows, true, 1); !ok || !w.decode(rows.RawValues(), &e.Job) {
		if err := e.Job.scanSlow(rows, true); err != nil {
			return err
		}
	}
	e.Deduplicated = e.Job.Deduplicated
	e.Folded = e.Job.Folded
	return nil
}

// scanSlow scans a row pgx's way: into the hand-written list of fields (targets) when
// its columns are sqlapi.JobColumns (then deduplicated and folded, with dedup) but
// the wire decoder could not take it (text format, an unexpected value), else by
// name. With dedup it sets j.Deduplicated and j.Folded.
func (j *Job) scanSlow(rows pgx.Rows, dedup bool) error {
	if columnsAre(rows.FieldDescriptions(), jobColumnNames, dedup) {
		dst := j.targets(make([]any, 0, len(jobColumnNames)+2))
		if dedup {
			dst = append(dst, &j.Deduplicated, &j.Folded)
		}
		return rows.Scan(dst...)
	}
	if dedup {
		v, err := pgx.RowToStructByName[enqueuedByName](rows)
		*j = v.Job
		j.Deduplicated = v.Deduplicated
		j.Folded = v.Folded
		return err
	}
	v, err := pgx.RowToStructByName[jobByName](rows)
	*j = Job(v)
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
	"lease_length", "sequence_key", "debounce_key"}

// columnsAre reports whether the columns fds are names (then deduplicated and
// folded, with dedup).
func columnsAre(fds []pgconn.FieldDescription, names []string, dedup bool) bool {
	n := len(names)
	if dedup {
		n += 2
	}
	if len(fds) != n {
		return false
	}
	for i, name := range names {
		if fds[i].Name != name {
			return false
		}
	}
	return !dedup || (fds[len(names)].Name == "deduplicated" && fds[len(names)+1].Name == "folded")
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
		&j.ClaimID, &j.LeaseLength, &j.SequenceKey, &j.DebounceKey)
}
