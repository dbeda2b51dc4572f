package runner

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// A notification is a hint, never an authority: any role that can connect may send
// NOTIFY pgrun_cancel. So the listener only queues what it hears, and the confirmer
// reads the database once per batch of notifications and stops a handler only if its
// job is no longer running under this runner's claim. The cause it gives the handler
// says what the database shows: cancelled, failed for its timeout, or taken back (an
// operator turned the worker off, the lease was reclaimed).

// rememberCancelled is how long a confirmed cancellation of a job not running here is
// kept, in case the job was claimed here just before it was cancelled.
const rememberCancelled = time.Minute

// cancelKey names one attempt of a job; attempt 0 means whichever attempt runs here.
type cancelKey struct {
	id      int64
	attempt int
}

// notifyCancel queues a cancel notification for confirmation; it never blocks the
// listener (a full queue drops the hint: the next lease renewal finds the job gone).
func (r *Runner) notifyCancel(k cancelKey) {
	select {
	case r.cancelCh <- k:
	default:
	}
}

// confirmCancels turns queued cancel notifications into cancellations, one database
// read per batch, until ctx is done.
func (r *Runner) confirmCancels(ctx context.Context) {
	for {
		var batch []cancelKey
		select {
		case <-ctx.Done():
			return
		case k := <-r.cancelCh:
			batch = append(batch, k)
		}
	drain:
		for len(batch) < 1000 {
			select {
			case k := <-r.cancelCh:
				batch = append(batch, k)
			default:
				break drain
			}
		}
		r.confirm(ctx, batch)
	}
}

// jobState is what the confirmer reads of a job (sqlapi.ClaimStates).
type jobState struct {
	ID        int64         `db:"id"`
	Attempt   int           `db:"attempt"`
	Status    string        `db:"status"`
	ClaimedBy string        `db:"claimed_by"`
	Class     string        `db:"class"`
	Claim     pgrun.ClaimID `db:"claim_id"`
}

// confirm reads the jobs of batch and cancels, with the cause the database shows,
// each attempt that is no longer running under this runner's claim.
func (r *Runner) confirm(ctx context.Context, batch []cancelKey) {
	ids := make([]int64, len(batch))
	for i, k := range batch {
		ids[i] = k.id
	}
	rows, err := r.pool.Query(ctx, sqlapi.ClaimStates, ids)
	var found []jobState
	if err == nil {
		found, err = pgx.CollectRows(rows, pgx.RowToStructByName[jobState])
	}
	if err != nil {
		if ctx.Err() == nil && !r.down.fail("confirm cancels", err) {
			r.log.Warn("confirming cancellations failed; lease renewal will catch them", "jobs", len(batch), "err", err)
		}
		return
	}
	states := make(map[int64]jobState, len(found))
	for _, s := range found {
		states[s.ID] = s
	}
	for _, k := range batch {
		s, ok := states[k.id]
		if !ok {
			continue // no such job: a forged or stale hint
		}
		attempt := k.attempt
		if attempt == 0 {
			attempt = s.Attempt
		}
		if s.Attempt != attempt {
			continue // about an earlier attempt; a later one may run here now
		}
		if s.Status == "running" && s.ClaimedBy == r.cfg.WorkerID && r.holdsClaim(k.id, s.Claim) {
			continue // still ours: the hint was wrong
		}
		cause := ErrLeaseLost
		switch {
		case s.Status == "cancelled":
			cause = ErrJobCancelled
		case s.Status == "failed" && s.Class == "timeout":
			cause = ErrTimeout
		}
		if r.cancelRunning(cancelKey{id: k.id, attempt: attempt}, cause) {
			r.log.Info("job stopped remotely", "job", k.id, "cause", cause)
		}
	}
}

// holdsClaim reports whether the execution of job id here, if any, runs under claim:
// after an asynchronous failover the same attempt number can be claimed again, here
// or elsewhere, and only the claim token tells the two apart. With no execution (its
// claim is still in flight) the database's word stands.
func (r *Runner) holdsClaim(id int64, claim pgrun.ClaimID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.running[id]
	return e == nil || e.job.ClaimID.IsZero() || e.job.ClaimID == claim
}

// cancelRunning cancels the execution of attempt k of job k.id with cause, if it
// runs here; if not, it remembers the attempt so that it does not start if its claim
// is in flight. A later attempt (a redrive) is not affected.
func (r *Runner) cancelRunning(k cancelKey, cause error) bool {
	r.mu.Lock()
	e := r.running[k.id]
	if e != nil && e.job.Attempt != k.attempt {
		e = nil // a notification about another attempt
	}
	if e != nil && e.completedInTx.Load() {
		r.mu.Unlock()
		return false // the handler finished the job itself (CompleteTx) and is returning
	}
	if e == nil {
		r.cancelled[k] = time.Now()
	}
	r.mu.Unlock()
	if e == nil {
		return false
	}
	e.cancel(cause)
	return true
}

// pruneCancelled forgets cancellations older than rememberCancelled; the lease
// renewer calls it every round.
func (r *Runner) pruneCancelled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.cancelled {
		if time.Since(at) > rememberCancelled {
			delete(r.cancelled, id)
		}
	}
}
