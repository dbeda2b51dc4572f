package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Durable execution (docs/durable.md): a handler's steps, sleeps and awaits are
// recorded in the database under the job's claim, so that a later attempt of the
// same job (a retry, a crash, a lost lease, a shutdown, a redrive) does not redo
// them. Every helper here is one call of the SQL API (sql/functions/35_durable.sql),
// the same for a worker in any language. A handler makes its durable calls one after
// another: they are numbered in the order made, and a resumed handler that asks for
// them in another order fails with ErrStepMismatch instead of reading one step's
// result as another's.

var (
	// ErrParked is returned by Sleep, AwaitEvent and AwaitJob when the job left its
	// claim to wait: return it from the handler at once. The job holds no slot and
	// spends no attempt; when it is claimed again it runs from the top, and its
	// recorded steps return their stored values.
	ErrParked = errors.New("runner: the job is parked until its sleep or await ends")
	// ErrEventTimeout is AwaitEvent's answer when the event did not come in time.
	// The timeout is recorded: every later attempt gets the same answer.
	ErrEventTimeout = errors.New("runner: the awaited event did not come before the timeout")
	// ErrJobTimeout is AwaitJob's answer when the job did not finish in time.
	ErrJobTimeout = errors.New("runner: the awaited job did not finish before the timeout")
	// ErrAwaitedJobFailed is AwaitJob's answer for a job that ended failed, cancelled
	// or skipped; the job is returned too.
	ErrAwaitedJobFailed = errors.New("runner: the awaited job did not succeed")
	// ErrStepMismatch means the handler asked for its durable calls in an order that
	// contradicts what the job recorded (its code changed while it was parked). The
	// database has failed the attempt (class step_mismatch, retried while attempts
	// remain, so that a fixed deploy can pick it up): return the error.
	ErrStepMismatch = errors.New("runner: non-determinism: a step does not match what the job recorded")
)

// decidedError is what a durable call returns once the database has ended the
// attempt itself: parked the job, failed it for a step mismatch, or found the claim
// no longer the job's. The handler returns it and the runner reports nothing more.
type decidedError struct {
	outcome Outcome
	err     error
	detail  string
}

func (e *decidedError) Error() string {
	if e.detail == "" {
		return e.err.Error()
	}
	return e.err.Error() + ": " + e.detail
}

func (e *decidedError) Unwrap() error { return e.err }

// decided turns a durable call's status (not 'done', 'none' or 'timeout') into the
// error the handler returns.
func decided(status string, detail json.RawMessage) error {
	switch status {
	case "parked":
		return &decidedError{outcome: OutcomeParked, err: ErrParked}
	case "mismatch":
		var m struct{ Message string }
		_ = json.Unmarshal(detail, &m)
		return &decidedError{outcome: OutcomeRetried, err: ErrStepMismatch, detail: m.Message}
	case "stale":
		return &decidedError{outcome: OutcomeLeaseLost, err: ErrLeaseLost}
	}
	return fmt.Errorf("runner: unexpected status %q from the database", status)
}

// durableCall is what every helper needs of the job: who holds the claim, and the
// position of the call.
func durableCall[A any](j *Job[A], what, name string) (*execution, int32, error) {
	if j == nil || j.exec == nil {
		return nil, 0, fmt.Errorf("runner: %s %q: the job is not running in a handler of this runner", what, name)
	}
	if j.exec.batch.Load() != nil {
		return nil, 0, fmt.Errorf("runner: %s %q of job %d: %w", what, name, j.ID, ErrDurableInBatch)
	}
	return j.exec, j.exec.steps.Add(1) - 1, nil
}

// recordedStep is a step the job recorded before this attempt.
type recordedStep struct {
	pos    int32
	kind   string
	result []byte
}

// loadRecorded reads, once per attempt, what the job recorded before it: one round
// trip, after which a resumed handler skips its recorded steps without asking again.
// A job on its first claim has recorded nothing (steps are recorded under a claim),
// so it asks nothing.
func (e *execution) loadRecorded(ctx context.Context) (map[string]recordedStep, error) {
	e.recordedOnce.Do(func() {
		e.recorded = map[string]recordedStep{}
		if e.job.Attempt <= 1 {
			return
		}
		e.recordedErr = withRetry(ctx, func(ctx context.Context) error {
			rows, err := e.r.pool.Query(ctx, sqlapi.RecordedSteps, e.job.ID, e.r.cfg.WorkerID, e.job.ClaimID)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var name string
				var s recordedStep
				if err := rows.Scan(&name, &s.pos, &s.kind, &s.result); err != nil {
					return err
				}
				e.recorded[name] = s
			}
			return rows.Err()
		})
	})
	return e.recorded, e.recordedErr
}

// cachedStep answers a Step from what the attempt loaded: the recorded result and
// true when name was recorded as a step at pos; false when the database must decide
// (the step is new, or the order does not match: step_get then fails the attempt).
func (e *execution) cachedStep(ctx context.Context, name string, pos int32) ([]byte, bool, bool, error) {
	rec, err := e.loadRecorded(ctx)
	if err != nil {
		return nil, false, false, fmt.Errorf("steps of job %d: %w", e.job.ID, err)
	}
	if s, ok := rec[name]; ok {
		return s.result, s.pos == pos && s.kind == "step", false, nil
	}
	for _, s := range rec {
		if s.pos == pos {
			return nil, false, false, nil // another step at this position: a mismatch
		}
	}
	return nil, false, true, nil // new: nothing to ask
}

// query runs one durable statement with the runner's retries of transient errors.
func (e *execution) query(ctx context.Context, sql string, args []any, dest ...any) error {
	return withRetry(ctx, func(ctx context.Context) error {
		return e.r.pool.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// Step runs fn once for the job: the first time it succeeds, its result is
// recorded under name; on every later attempt of the job the recorded result is
// returned (decoded into T) and fn is not called. A step whose fn fails is not
// recorded and runs again on the next attempt. The result is recorded under the
// job's claim: if the claim is no longer the job's (its lease was lost), nothing is
// recorded and Step returns an error wrapping ErrLeaseLost. Names are 1 to 200
// characters, unique within the job; results at most 1 MiB of JSON.
func Step[A, T any](ctx context.Context, j *Job[A], name string, fn func(context.Context) (T, error)) (T, error) {
	return step(ctx, j, name, fn, func(ctx context.Context, e *execution, pos int32, payload []byte) (string, error) {
		var status string
		err := e.query(ctx, sqlapi.StepPut, []any{e.job.ID, name, pos, payload, e.r.cfg.WorkerID, e.job.ClaimID}, &status)
		return status, err
	})
}

// StepTx is Step recorded in the caller's own transaction tx: fn's writes and the
// step's record commit together, so a step whose effects are in this database
// happens exactly once. fn gets tx; commit it after StepTx returns. If tx rolls back,
// neither the writes nor the record remain, and the step runs again.
func StepTx[A, T any](ctx context.Context, j *Job[A], tx pgx.Tx, name string, fn func(context.Context, pgx.Tx) (T, error)) (T, error) {
	return step(ctx, j, name, func(ctx context.Context) (T, error) { return fn(ctx, tx) },
		func(ctx context.Context, e *execution, pos int32, payload []byte) (string, error) {
			var status string
			err := tx.QueryRow(ctx, sqlapi.StepPut, e.job.ID, name, pos, payload, e.r.cfg.WorkerID, e.job.ClaimID).Scan(&status)
			return status, err
		})
}

// step is Step and StepTx: the recorded value if there is one, else fn's, recorded by
// put (step_put, on the pool or in the caller's transaction).
func step[A, T any](ctx context.Context, j *Job[A], name string, fn func(context.Context) (T, error),
	put func(context.Context, *execution, int32, []byte) (string, error)) (T, error) {
	var zero T
	e, pos, err := durableCall(j, "step", name)
	if err != nil {
		return zero, err
	}
	if v, ok, err := stepRecorded[T](ctx, e, name, pos); ok || err != nil {
		return v, err
	}
	v, err := fn(ctx)
	if err != nil {
		return zero, err
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return zero, Permanent(fmt.Errorf("step %q: encode its result: %w", name, err))
	}
	status, err := put(ctx, e, pos, payload)
	if err != nil {
		return zero, fmt.Errorf("step %q of job %d: record: %w", name, e.job.ID, err)
	}
	if status != "done" {
		return zero, decided(status, nil)
	}
	return v, nil
}

// stepRecorded looks step name (at pos) up: its recorded value and true, or false
// when it is not recorded yet, or the error that ends the attempt. What the attempt
// loaded answers most calls (loadRecorded); where the order does not match, the
// database decides (step_get fails the attempt with step_mismatch).
func stepRecorded[T any](ctx context.Context, e *execution, name string, pos int32) (T, bool, error) {
	var zero T
	var status string
	var result []byte
	cached, hit, fresh, err := e.cachedStep(ctx, name, pos)
	switch {
	case err != nil:
		return zero, false, err
	case hit:
		status, result = "done", cached
	case fresh:
		return zero, false, nil
	default:
		if err := e.query(ctx, sqlapi.StepGet, []any{e.job.ID, name, pos, e.r.cfg.WorkerID, e.job.ClaimID}, &status, &result); err != nil {
			return zero, false, fmt.Errorf("step %q of job %d: %w", name, e.job.ID, err)
		}
	}
	switch status {
	case "none":
		return zero, false, nil
	case "done":
		var v T
		if len(result) > 0 {
			if err := json.Unmarshal(result, &v); err != nil {
				return zero, false, Permanent(fmt.Errorf("step %q: decode its recorded result: %w", name, err))
			}
		}
		return v, true, nil
	}
	return zero, false, decided(status, result)
}

// Sleep is a durable sleep of d, named name: SleepUntil(now + d), where now is the
// time of the first call (the end is recorded then and kept).
func Sleep[A any](ctx context.Context, j *Job[A], name string, d time.Duration) error {
	return SleepUntil(ctx, j, name, time.Now().Add(d))
}

// SleepUntil is a durable sleep named name until t. The first call records t; while
// it is ahead, the job ends its claim and goes back to its queue due at t, spending
// no attempt and holding no slot, connection or goroutine: SleepUntil returns
// ErrParked, which the handler returns at once. When the job runs again, from the
// top, the call returns nil once t has passed, and the sleep is not repeated. t is
// at most 366 days ahead.
func SleepUntil[A any](ctx context.Context, j *Job[A], name string, t time.Time) error {
	e, pos, err := durableCall(j, "sleep", name)
	if err != nil {
		return err
	}
	var status string
	if err := e.query(ctx, sqlapi.SleepJob, []any{e.job.ID, name, pos, t, e.r.cfg.WorkerID, e.job.ClaimID}, &status); err != nil {
		return fmt.Errorf("sleep %q of job %d: %w", name, e.job.ID, err)
	}
	if status == "done" {
		return nil
	}
	if status == "parked" && e.f != nil {
		e.f.wakeAt(t) // nothing announces that t came: claim at once then
	}
	return decided(status, nil)
}

// AwaitEvent waits for event name (pgrun.emit_event(name, payload), from any
// transaction in any language) for at most timeout (0: 366 days), and returns its
// payload. An event emitted before the await is not lost, and the first emit of a
// name wins. If the event is not there yet, the job parks (status waiting, no slot)
// and AwaitEvent returns ErrParked; when the event comes, or the time runs out, the
// job runs again from the top and the call returns the payload, or ErrEventTimeout.
// The answer is recorded: later attempts get the same one. The event name is the
// step's name.
func AwaitEvent[A any](ctx context.Context, j *Job[A], name string, timeout time.Duration) (json.RawMessage, error) {
	e, pos, err := durableCall(j, "await event", name)
	if err != nil {
		return nil, err
	}
	var status string
	var payload []byte
	if err := e.query(ctx, sqlapi.AwaitEvent, []any{e.job.ID, name, pos, name, waitArg(timeout), e.r.cfg.WorkerID, e.job.ClaimID},
		&status, &payload); err != nil {
		return nil, fmt.Errorf("await event %q of job %d: %w", name, e.job.ID, err)
	}
	switch status {
	case "done":
		return payload, nil
	case "timeout":
		return nil, fmt.Errorf("event %q: %w", name, ErrEventTimeout)
	}
	return nil, decided(status, payload)
}

// Spawn enqueues spec exactly once as step name: the first call enqueues the job and
// records its id in one transaction; later attempts get the recorded id and enqueue
// nothing. The child belongs to the job's tenant. Await it with AwaitJob.
func Spawn[A any](ctx context.Context, j *Job[A], name string, spec pgrun.JobSpec) (int64, error) {
	e, pos, err := durableCall(j, "spawn", name)
	if err != nil {
		return 0, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("spawn %q: encode the spec: %w", name, err)
	}
	var status string
	var child *int64
	if err := e.query(ctx, sqlapi.SpawnJob, []any{e.job.ID, name, pos, raw, e.r.cfg.WorkerID, e.job.ClaimID}, &status, &child); err != nil {
		return 0, fmt.Errorf("spawn %q of job %d: %w", name, e.job.ID, err)
	}
	if status != "done" || child == nil {
		return 0, decided(status, nil)
	}
	return *child, nil
}

// AwaitJob waits for job id to finish, for at most timeout (0: 366 days), and
// returns it (its id, status, result and error). If it has not finished, the job
// parks (no slot) and AwaitJob returns ErrParked; the job runs again when id
// finishes or the time runs out (ErrJobTimeout). A job that did not succeed is
// returned with an error wrapping ErrAwaitedJobFailed. The step's name is "job:<id>".
func AwaitJob[A any](ctx context.Context, j *Job[A], id int64, timeout time.Duration) (*pgrun.Job, error) {
	name := fmt.Sprintf("job:%d", id)
	e, pos, err := durableCall(j, "await job", name)
	if err != nil {
		return nil, err
	}
	var status string
	var outcome []byte
	if err := e.query(ctx, sqlapi.AwaitJob, []any{e.job.ID, name, pos, id, waitArg(timeout), e.r.cfg.WorkerID, e.job.ClaimID},
		&status, &outcome); err != nil {
		return nil, fmt.Errorf("await job %d from job %d: %w", id, e.job.ID, err)
	}
	switch status {
	case "timeout":
		return nil, fmt.Errorf("job %d: %w", id, ErrJobTimeout)
	case "done":
	default:
		return nil, decided(status, outcome)
	}
	var o struct {
		ID     int64           `json:"id"`
		Status pgrun.JobStatus `json:"status"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(outcome, &o); err != nil {
		return nil, fmt.Errorf("await job %d: decode its outcome: %w", id, err)
	}
	got := &pgrun.Job{ID: o.ID, Status: o.Status, Result: o.Result, Error: o.Error}
	if o.Status != pgrun.StatusSucceeded {
		return got, fmt.Errorf("job %d %s: %w", id, o.Status, ErrAwaitedJobFailed)
	}
	return got, nil
}

// waitArg is a wait's timeout for the SQL API: NULL (the longest) for 0 or less.
func waitArg(d time.Duration) any {
	if d <= 0 {
		return nil
	}
	return d
}
