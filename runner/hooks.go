package runner

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/pgrun/pgrun"
)

// Hooks observe a runner; every field is optional and is called synchronously on the
// runner's goroutines, so it must be cheap and must not block: OnOutcome for
// successes runs on the goroutine that records completions, and a hook that blocks
// there holds up every job's report. Hooks must not change what they are given (the
// jobs are the runner's own). They are how OpenTelemetry, Prometheus (package
// metrics) or a user's own counters attach; set them in [Config.Hooks].
type Hooks struct {
	// OnClaim is called once per claim round trip (one pgrun.claim_jobs call,
	// retries of transient errors included), with the jobs it brought back.
	OnClaim func(ClaimEvent)
	// OnOutcome is called once per job this runner started, when its attempt has
	// ended here: after the report committed, or when the database had decided for
	// it (cancelled, timed out, lease lost), or when the report failed (Err).
	OnOutcome func(OutcomeEvent)
	// OnMaintain is called once per pgrun.maintain() round this runner ran, once per
	// step when the round reports its steps' times (see MaintainEvent).
	OnMaintain func(MaintainEvent)
	// OnLeaseLost is called when a running job stops being this runner's: its lease
	// was not renewed, or its claim was taken back. Its handler's context is being
	// cancelled with ErrLeaseLost.
	OnLeaseLost func(*pgrun.Job)
}

// ClaimEvent is one claim round trip of one queue.
type ClaimEvent struct {
	Queue string
	// Jobs are the jobs the claim handed out, possibly none.
	Jobs []*pgrun.Job
	// RoundTrip is the time from sending the claim to having its rows.
	RoundTrip time.Duration
	// Err is the claim's error; Jobs is empty then.
	Err error
}

// OutcomeEvent is how one attempt of one job ended in this runner.
type OutcomeEvent struct {
	// Job is the job as it was claimed (Attempt is the attempt that ended).
	Job     *pgrun.Job
	Outcome Outcome
	// Wait is how long the job waited to start: from when it was due (run_at, or its
	// creation if later) to its claim, both by the database's clock.
	Wait time.Duration
	// Run is how long the handler ran (until it was abandoned, if it was).
	Run time.Duration
	// ReportRoundTrip is how long reporting the outcome took until it committed (a
	// success shares its batch's complete_jobs call); zero where nothing was reported.
	ReportRoundTrip time.Duration
	// Err is set when the outcome could not be reported (the database was
	// unreachable through every retry): Outcome is then what the runner meant to
	// report, and the job's lease will bring it back.
	Err error
}

// Outcome names how an attempt ended, in the engine's words.
type Outcome string

// The outcomes of an attempt.
const (
	// OutcomeSucceeded: complete_jobs recorded the result.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the job failed for good (fail_job: permanent, or its last attempt).
	OutcomeFailed Outcome = "failed"
	// OutcomeRetried: the attempt failed and the job is queued again after a backoff.
	OutcomeRetried Outcome = "retried"
	// OutcomeRetryLater: the handler asked to run later (RetryLater); no attempt spent.
	OutcomeRetryLater Outcome = "retry_later"
	// OutcomeDeferred: the job waits for the children it returned (Defer).
	OutcomeDeferred Outcome = "deferred"
	// OutcomeRequeued: the runner stopped before the job finished and put it back
	// without spending an attempt.
	OutcomeRequeued Outcome = "requeued"
	// OutcomeCancelled: the job was cancelled while it ran (ErrJobCancelled).
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeTimedOut: pgrun.maintain() failed the attempt for its timeout (ErrTimeout);
	// the job is retried if attempts remain.
	OutcomeTimedOut Outcome = "timed_out"
	// OutcomeLeaseLost: the job stopped being this runner's while it ran (ErrLeaseLost).
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeStale: the report matched nothing: the job had moved on (cancelled,
	// reclaimed) before the report arrived, and the database kept its own verdict.
	OutcomeStale Outcome = "stale"
	// OutcomeParked: the handler parked the job (a durable Sleep, AwaitEvent or
	// AwaitJob): it left its claim without spending an attempt and runs again later.
	OutcomeParked Outcome = "parked"
)

// MaintainEvent is one step of one pgrun.maintain() round. When maintain() reports
// per-step times (a "steps" object in its answer), there is one event per step, named
// as the step's function (reap_expired_leases, fail_overdue, ...); otherwise one
// event named "maintain" for the whole round. A round in which another runner led is
// one "maintain" event with Leader false.
type MaintainEvent struct {
	Step    string
	Elapsed time.Duration
	// Rows is how many rows the step handled (jobs requeued, workers flagged, ...).
	Rows int
	// Err is the step's error (the step was rolled back alone), or the call's.
	Err error
	// Leader reports whether this runner held the maintenance lease and did the work.
	Leader bool
}

// hooked reports whether any hook is configured, so the hot paths skip building
// events nobody reads.
func (r *Runner) hooked() bool { return len(r.cfg.Hooks) > 0 }

// claimed calls the OnClaim hooks.
func (r *Runner) claimed(queue string, jobs []*pgrun.Job, took time.Duration, err error) {
	for _, h := range r.cfg.Hooks {
		if h.OnClaim != nil {
			h.OnClaim(ClaimEvent{Queue: queue, Jobs: jobs, RoundTrip: took, Err: err})
		}
	}
}

// ended calls the OnOutcome hooks for an attempt of job that ran for ran.
func (r *Runner) ended(job *pgrun.Job, o Outcome, ran, report time.Duration, err error) {
	if !r.hooked() {
		return
	}
	ev := OutcomeEvent{Job: job, Outcome: o, Wait: jobWait(job), Run: ran, ReportRoundTrip: report, Err: err}
	for _, h := range r.cfg.Hooks {
		if h.OnOutcome != nil {
			h.OnOutcome(ev)
		}
	}
}

// leaseLost calls the OnLeaseLost hooks.
func (r *Runner) leaseLost(job *pgrun.Job) {
	for _, h := range r.cfg.Hooks {
		if h.OnLeaseLost != nil {
			h.OnLeaseLost(job)
		}
	}
}

// jobWait is how long a claimed job waited to start: started_at minus the later of
// run_at and created_at (a job enqueued with a past run_at waited only since it
// existed). Zero if unknown.
func jobWait(j *pgrun.Job) time.Duration {
	if j.StartedAt == nil {
		return 0
	}
	due := j.RunAt
	if j.CreatedAt.After(due) {
		due = j.CreatedAt
	}
	return max(0, j.StartedAt.Sub(due))
}

// reported is the outcome of a transition report (what: "fail", "retry later",
// "defer", "requeue") that left the job in status, "" when it matched nothing.
func reported(what, status string) Outcome {
	switch status {
	case "":
		return OutcomeStale
	case string(pgrun.StatusFailed):
		return OutcomeFailed
	case string(pgrun.StatusSucceeded):
		return OutcomeSucceeded
	case string(pgrun.StatusWaiting):
		return OutcomeDeferred
	case string(pgrun.StatusCancelled):
		return OutcomeCancelled
	}
	switch what {
	case "fail":
		return OutcomeRetried
	case "retry later":
		return OutcomeRetryLater
	case "defer":
		return OutcomeDeferred
	}
	return OutcomeRequeued
}

// intended is the outcome a transition report (see reported) meant to record, for
// a report that could not be made.
func intended(what string) Outcome {
	switch what {
	case "fail":
		return OutcomeFailed
	case "retry later":
		return OutcomeRetryLater
	case "defer":
		return OutcomeDeferred
	}
	return OutcomeRequeued
}

// deref returns *s, or "" for nil (a NULL status: the report matched nothing).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// stoppedBy is the outcome of an attempt the database stopped with cause.
func stoppedBy(cause error) Outcome {
	switch {
	case errors.Is(cause, ErrJobCancelled):
		return OutcomeCancelled
	case errors.Is(cause, ErrTimeout):
		return OutcomeTimedOut
	}
	return OutcomeLeaseLost
}

// maintainSteps maps each maintain() step to the keys of its answer that count the
// rows it handled.
var maintainSteps = map[string][]string{
	"reap_expired_leases": {"lease_requeued", "lease_failed"},
	"fail_overdue":        {"timed_out"},
	"flag_dead_workers":   {"workers_flagged_dead"},
	"forget_workers":      {"workers_forgotten"},
	"drain_outbox":        {"outbox_dispatched", "outbox_retried", "outbox_poisoned"},
	"fire_schedules":      {"schedules_fired"},
	"prune_history":       {"pruned"},
	"refresh_job_stats":   {"stats_refreshed"},
}

// maintainedEvents turns one maintain() round (its JSON answer, decoded into m, or
// the call's error) into events: one per step when the answer has a "steps" object
// ({"steps": {"reap_expired_leases": {"ms": 0.4, "rows": 2}, ...}}), else one for the
// round.
func maintainedEvents(m map[string]json.RawMessage, elapsed time.Duration, err error) []MaintainEvent {
	if err != nil {
		return []MaintainEvent{{Step: "maintain", Elapsed: elapsed, Err: err}}
	}
	if _, skipped := m["skipped"]; skipped {
		return []MaintainEvent{{Step: "maintain", Elapsed: elapsed}}
	}
	var stepErrs map[string]string
	_ = json.Unmarshal(m["errors"], &stepErrs)
	var steps map[string]struct {
		MS   float64 `json:"ms"`
		Rows *int    `json:"rows"`
	}
	if json.Unmarshal(m["steps"], &steps) != nil || len(steps) == 0 {
		ev := MaintainEvent{Step: "maintain", Elapsed: elapsed, Leader: true}
		for _, keys := range maintainSteps {
			ev.Rows += count(m, keys)
		}
		if len(stepErrs) > 0 {
			ev.Err = &MaintainStepError{Step: "maintain", Message: string(m["errors"])}
		}
		return []MaintainEvent{ev}
	}
	names := slices.Collect(maps.Keys(steps))
	for name := range stepErrs {
		if _, ok := steps[name]; !ok {
			names = append(names, name) // failed before it could be timed
		}
	}
	slices.Sort(names)
	out := make([]MaintainEvent, 0, len(names))
	for _, name := range names {
		s := steps[name]
		ev := MaintainEvent{Step: name, Elapsed: time.Duration(s.MS * float64(time.Millisecond)), Leader: true}
		if s.Rows != nil {
			ev.Rows = *s.Rows
		} else {
			ev.Rows = count(m, maintainSteps[name])
		}
		if msg, failed := stepErrs[name]; failed {
			ev.Err = &MaintainStepError{Step: name, Message: msg}
		}
		out = append(out, ev)
	}
	return out
}

// count adds up the numbers under keys in m.
func count(m map[string]json.RawMessage, keys []string) int {
	n := 0
	for _, k := range keys {
		var v float64
		if json.Unmarshal(m[k], &v) == nil {
			n += int(v)
		}
	}
	return n
}

// MaintainStepError is a maintain() step that failed (and was rolled back alone)
// while the others ran.
type MaintainStepError struct {
	Step    string
	Message string
}

func (e *MaintainStepError) Error() string { return "maintain " + e.Step + ": " + e.Message }

// maintained calls the OnMaintain hooks for one round.
func (r *Runner) maintained(m map[string]json.RawMessage, elapsed time.Duration, err error) {
	if !r.hooked() {
		return
	}
	for _, ev := range maintainedEvents(m, elapsed, err) {
		for _, h := range r.cfg.Hooks {
			if h.OnMaintain != nil {
				h.OnMaintain(ev)
			}
		}
	}
}
