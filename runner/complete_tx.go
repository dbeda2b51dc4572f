package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// CompleteTx finishes job, with result as its stored result (nil: none), inside tx,
// the handler's own transaction: the handler's writes and the job's completion
// commit together, or neither does. Call it from the handler, last before
// tx.Commit, with the job the handler was given (j.Job):
//
//	tx, err := pool.Begin(ctx)
//	...
//	_, err = tx.Exec(ctx, `insert into thumbnails ...`)
//	...
//	if err := runner.CompleteTx(ctx, tx, j.Job, nil); err != nil {
//		return nil, err // rolls back
//	}
//	return nil, tx.Commit(ctx)
//
// The completion names the job's attempt, worker and claim, as the runner's own
// report does: if the job is no longer this runner's to finish (cancelled, its lease
// taken back) CompleteTx returns an error wrapping [ErrLeaseLost] and the handler
// should roll back. When the transaction commits, the runner's own completion of the
// job after the handler returns matches nothing and changes nothing; when it rolls
// back and the handler returns success, the runner completes the job as usual. The
// job's row stays locked until tx ends, and the runner's lease renewal waits for it
// meanwhile: keep the transaction short after CompleteTx.
func CompleteTx(ctx context.Context, tx pgx.Tx, job *pgrun.Job, result any) error {
	if job == nil {
		return errors.New("runner: CompleteTx: nil job")
	}
	e := executionFrom(ctx)
	if e != nil && e.job.ID != job.ID {
		e = nil // the ctx of another job's handler
	}
	var worker *string // NULL when the job names none: never claimed, nothing to finish
	switch {
	case e != nil:
		worker = &e.r.cfg.WorkerID
	case job.ClaimedBy != nil:
		worker = job.ClaimedBy
	}
	var payload []byte
	if result != nil {
		var err error
		if payload, err = json.Marshal(result); err != nil {
			return fmt.Errorf("complete job %d in transaction: encode result: %w", job.ID, err)
		}
	}
	var done bool
	if err := tx.QueryRow(ctx, sqlapi.CompleteJob, job.ID, job.Attempt, payload, worker, job.ClaimID).Scan(&done); err != nil {
		return fmt.Errorf("complete job %d in transaction: %w", job.ID, err)
	}
	if !done {
		return fmt.Errorf("complete job %d in transaction: attempt %d is not running under this claim: %w",
			job.ID, job.Attempt, ErrLeaseLost)
	}
	if e != nil {
		e.completedInTx.Store(true)
	}
	return nil
}
