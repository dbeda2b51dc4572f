package runner

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func decode(t *testing.T, s string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

// Without per-step times, a led round is one "maintain" event with the rows of every
// step added up and its step errors.
func TestMaintainRoundWithoutSteps(t *testing.T) {
	m := decode(t, `{"lease_requeued": 2, "lease_failed": 1, "timed_out": 0, "workers_forgotten": 0,
		"workers_flagged_dead": 1, "schedules_fired": 3, "pruned": 10, "outbox_dispatched": 4,
		"outbox_retried": 0, "outbox_poisoned": 0}`)
	evs := maintainedEvents(m, 3*time.Millisecond, nil)
	require.Equal(t, []MaintainEvent{{Step: "maintain", Elapsed: 3 * time.Millisecond, Rows: 21, Leader: true}}, evs)

	m = decode(t, `{"pruned": 0, "errors": {"prune_history": "boom"}, "broken_jobs": []}`)
	evs = maintainedEvents(m, time.Millisecond, nil)
	require.Len(t, evs, 1)
	var se *MaintainStepError
	require.ErrorAs(t, evs[0].Err, &se)
	require.Contains(t, se.Message, "boom")
}

// With a "steps" object, each step is an event with its own time, its rows (its own
// count, else the round's keys for it) and its own error; a step that failed before it
// was timed still gets one.
func TestMaintainRoundWithSteps(t *testing.T) {
	m := decode(t, `{"lease_requeued": 2, "lease_failed": 1, "pruned": 5,
		"steps": {"reap_expired_leases": {"ms": 0.5}, "prune_history": {"ms": 2, "rows": 7}},
		"errors": {"prune_history": "disk full", "fire_schedules": "boom"}}`)
	evs := maintainedEvents(m, 10*time.Millisecond, nil)
	require.Len(t, evs, 3)
	require.Equal(t, "fire_schedules", evs[0].Step)
	require.Error(t, evs[0].Err)
	require.Equal(t, MaintainEvent{Step: "prune_history", Elapsed: 2 * time.Millisecond, Rows: 7, Leader: true,
		Err: &MaintainStepError{Step: "prune_history", Message: "disk full"}}, evs[1])
	require.Equal(t, MaintainEvent{Step: "reap_expired_leases", Elapsed: 500 * time.Microsecond, Rows: 3, Leader: true}, evs[2])
}

// A round another runner led, and a call that failed, are one "maintain" event each,
// not led.
func TestMaintainRoundNotLed(t *testing.T) {
	evs := maintainedEvents(decode(t, `{"skipped": true, "leader": "other"}`), time.Millisecond, nil)
	require.Equal(t, []MaintainEvent{{Step: "maintain", Elapsed: time.Millisecond}}, evs)
	boom := errors.New("connection reset")
	evs = maintainedEvents(nil, time.Millisecond, boom)
	require.Equal(t, []MaintainEvent{{Step: "maintain", Elapsed: time.Millisecond, Err: boom}}, evs)
}

// A report's outcome is the status the database left the job in.
func TestReportedOutcomes(t *testing.T) {
	for _, c := range []struct {
		what, status string
		want         Outcome
	}{
		{"fail", "failed", OutcomeFailed},
		{"fail", "queued", OutcomeRetried},
		{"fail", "", OutcomeStale},
		{"retry later", "queued", OutcomeRetryLater},
		{"defer", "waiting", OutcomeDeferred},
		{"defer", "succeeded", OutcomeSucceeded},
		{"requeue", "queued", OutcomeRequeued},
		{"requeue", "cancelled", OutcomeCancelled},
	} {
		require.Equal(t, c.want, reported(c.what, c.status), "%s -> %s", c.what, c.status)
	}
	require.Equal(t, OutcomeTimedOut, stoppedBy(ErrTimeout))
	require.Equal(t, OutcomeCancelled, stoppedBy(ErrJobCancelled))
	require.Equal(t, OutcomeLeaseLost, stoppedBy(ErrLeaseLost))
}
