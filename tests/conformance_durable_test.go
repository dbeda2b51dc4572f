package tests

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The worker conformance suite for durable execution (sql/functions/35_durable.sql):
// the durable example kinds (runner.RegisterExamples, and the same in the Python
// worker) run against each adapter. Their step bodies emit step.ran, so how often a
// step ran is counted from the database; each step returns the attempt that ran it,
// so a job's result says which attempt's record it kept.

// shortLease gives queue conf the shortest lease a queue may have, so that a killed
// or frozen worker's job comes back within seconds.
func shortLease(t *testing.T, b *testkit.DB) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('conf', default_lease => '15 seconds')`)
	require.NoError(t, err)
}

// eventuallyMaintained is testkit.Eventually with a round of pgrun.maintain() every
// 100 ms on the way: the Python worker does not maintain, and lease expiries and
// timed-out waits need a round to be seen.
func eventuallyMaintained(t *testing.T, b *testkit.DB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	var last time.Time
	testkit.Eventually(t, within, what, func() bool {
		if time.Since(last) >= 100*time.Millisecond {
			_, err := b.Pool.Exec(b.Ctx, `select pgrun.maintain()`)
			require.NoError(t, err)
			last = time.Now()
		}
		return cond()
	})
}

// stepRuns counts how often the body of step ran for job id (its step.ran events).
func stepRuns(t *testing.T, b *testkit.DB, id int64, step string) int {
	t.Helper()
	return one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events
		where job_id = $1 and event = 'step.ran' and fields->>'step' = $2`, id, step)
}

// stepsRecorded lists job id's recorded durable calls as name@position/attempt, in
// position order.
func stepsRecorded(t *testing.T, b *testkit.DB, id int64) []string {
	t.Helper()
	return one[[]string](t, b.Ctx, b.Pool, `select coalesce(array_agg(name || '@' || position || '/' || attempt order by position), '{}')
		from pgrun.job_steps where job_id = $1`, id)
}

func jobEventCount(t *testing.T, b *testkit.DB, id int64, event string) int {
	t.Helper()
	return one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events where job_id = $1 and event = $2`, id, event)
}

func emitEvent(t *testing.T, b *testkit.DB, name, payload string) bool {
	t.Helper()
	return one[bool](t, b.Ctx, b.Pool, `select pgrun.emit_event($1, $2::jsonb)`, name, payload)
}

// A step recorded before the worker was killed is not run again: the worker that
// takes the job over gets its recorded result and runs only the steps after it.
func TestConformanceDurableStepRecordedBeforeSIGKILLIsNotRunAgain(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		shortLease(t, b)
		id := enqueueKind(t, b, "durable_steps", map[string]any{"pause_ms": 600_000})
		victim := startAdapter(t, a, b, "conf", "conf-victim-"+a.name)
		testkit.Eventually(t, 30*time.Second, "step one recorded", func() bool { return len(stepsRecorded(t, b, id)) == 1 })
		require.NoError(t, victim.Cmd.Process.Signal(syscall.SIGKILL))
		require.Equal(t, 128+int(syscall.SIGKILL), victim.Wait(t, 10*time.Second))
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		eventuallyMaintained(t, b, time.Minute, "the lease runs out and another worker finishes the job", func() bool {
			return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded
		})
		j := getJob(t, b, id)
		require.JSONEq(t, `{"one": {"attempt": 1}, "two": {"attempt": 2}}`, string(j.Result), "step one's result is the first attempt's")
		require.Equal(t, 1, stepRuns(t, b, id, "one"), "the recorded step ran again")
		require.Equal(t, 1, stepRuns(t, b, id, "two"))
		require.Equal(t, []string{"one@0/1", "two@1/2"}, stepsRecorded(t, b, id))
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 1, j.LeaseExpiries)
		require.Zero(t, j.Failures)
		require.Equal(t, "conf-"+a.name, *j.ClaimedBy)
	})
}

// A step whose body failed is not recorded and runs again on the next attempt; the
// step before it, recorded, does not.
func TestConformanceDurableFailedStepRunsAgain(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "durable_flaky", nil)
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, id, pgrun.StatusSucceeded)
		j := getJob(t, b, id)
		require.JSONEq(t, `{"before": {"attempt": 1}, "flaky": {"attempt": 2}}`, string(j.Result))
		require.Equal(t, 1, stepRuns(t, b, id, "before"), "the recorded step ran again")
		require.Equal(t, 2, stepRuns(t, b, id, "flaky"), "the failed step did not run again")
		require.Equal(t, []string{"before@0/1", "flaky@1/2"}, stepsRecorded(t, b, id))
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 1, j.Failures)
	})
}

// A durable sleep ends the claim and frees the slot: with one job at a time, a job
// enqueued after the sleeper parked runs, to the end, before the sleep is over. The
// sleeper comes back once its time has passed, without spending an attempt, and does
// not sleep again.
func TestConformanceDurableSleepFreesTheSlot(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		sleeper := enqueueKind(t, b, "durable_sleep", map[string]any{"ms": 3000})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		testkit.Eventually(t, 30*time.Second, "the sleeper parked", func() bool { return jobEventCount(t, b, sleeper, "job.sleeping") == 1 })
		quick := enqueueKind(t, b, "noop", nil)
		waitStatus(t, b, quick, pgrun.StatusSucceeded)
		waitStatus(t, b, sleeper, pgrun.StatusSucceeded)
		s := getJob(t, b, sleeper)
		require.JSONEq(t, `{"slept_ms": 3000}`, string(s.Result))
		var slept time.Duration
		var quickRanInTheSleep, resumedAfterTheTime bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (n.result->>'until')::timestamptz - n.recorded_at,
				q.finished_at < (n.result->>'until')::timestamptz, s.started_at >= (n.result->>'until')::timestamptz
			from pgrun.job_steps n, pgrun.jobs s, pgrun.jobs q
			where n.job_id = $1 and n.name = 'nap' and s.id = $1 and q.id = $2`,
			sleeper, quick).Scan(&slept, &quickRanInTheSleep, &resumedAfterTheTime))
		require.InDelta(t, 3*time.Second, slept, float64(time.Second), "the sleep recorded is not the one asked for")
		require.True(t, quickRanInTheSleep, "the quick job did not run in the sleeper's slot while it slept")
		require.True(t, resumedAfterTheTime, "the sleeper ran again before its time")
		require.Equal(t, 1, jobEventCount(t, b, sleeper, "job.sleeping"), "the sleep was repeated")
		require.Equal(t, 2, s.Attempt, "claimed twice: the sleep, then the resume")
		require.Zero(t, s.Failures, "the sleep spent an attempt")
	})
}

// An awaited event reaches the handler whether it was emitted before the await or
// after the job parked, waiting, for it; the first emit of a name wins.
func TestConformanceDurableEventEmittedBeforeAndAfterTheAwait(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		require.True(t, emitEvent(t, b, "conf:early", `{"n": 1}`))
		early := enqueueKind(t, b, "durable_event", map[string]any{"event": "conf:early"})
		late := enqueueKind(t, b, "durable_event", map[string]any{"event": "conf:late"})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, early, pgrun.StatusSucceeded)
		waitStatus(t, b, late, pgrun.StatusWaiting)
		require.True(t, emitEvent(t, b, "conf:late", `{"n": 2}`))
		require.False(t, emitEvent(t, b, "conf:late", `{"n": 3}`), "the first emit wins")
		waitStatus(t, b, late, pgrun.StatusSucceeded)
		e, l := getJob(t, b, early), getJob(t, b, late)
		require.JSONEq(t, `{"n": 1}`, string(e.Result))
		require.Equal(t, 1, e.Attempt, "an event emitted before the await needs no wait")
		require.JSONEq(t, `{"n": 2}`, string(l.Result))
		require.Equal(t, 2, l.Attempt, "claimed twice: the await, then the resume")
		require.Zero(t, l.Failures, "the wait spent an attempt")
	})
}

// An await whose time runs out resumes the handler with the timeout, which it
// handles (durable_event returns {"timeout": true}).
func TestConformanceDurableAwaitTimesOut(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "durable_event", map[string]any{"event": "conf:never", "timeout_ms": 300})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		eventuallyMaintained(t, b, 30*time.Second, "the await times out and the job finishes", func() bool {
			return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded
		})
		j := getJob(t, b, id)
		require.JSONEq(t, `{"timeout": true}`, string(j.Result))
		require.Equal(t, 1, jobEventCount(t, b, id, "job.awaiting"), "the job did not park to wait")
		require.Equal(t, 2, j.Attempt)
		require.Zero(t, j.Failures)
	})
}

// A claim that is no longer the job's cannot record a step. A worker records step
// one and is frozen (SIGSTOP) before step two; its lease runs out and the job is
// claimed again (here by the test, through pgrun.claim_job). The frozen worker's
// claim then records nothing (step_put and step_get answer 'stale') while the new
// claim records; and the worker, thawed, records and reports nothing: the job stays
// the new claimant's.
func TestConformanceDurableStaleClaimCannotRecordAStep(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		shortLease(t, b)
		id := enqueueKind(t, b, "durable_steps", map[string]any{"pause_ms": 600_000})
		frozenID := "conf-frozen-" + a.name
		frozen := startAdapter(t, a, b, "conf", frozenID)
		testkit.Eventually(t, 30*time.Second, "step one recorded", func() bool { return len(stepsRecorded(t, b, id)) == 1 })
		stale := one[string](t, b.Ctx, b.Pool, `select claim_id::text from pgrun.jobs where id = $1`, id)
		require.NoError(t, frozen.Cmd.Process.Signal(syscall.SIGSTOP))
		eventuallyMaintained(t, b, time.Minute, "the frozen worker's lease runs out", func() bool {
			return testkit.JobStatus(t, b, id) == pgrun.StatusQueued
		})
		fresh := one[string](t, b.Ctx, b.Pool, `select claim_id::text from pgrun.claim_job('conf', 'conf-next', array['durable_steps'])`)
		put := func(worker, claim string) string {
			return one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'two', 1, '{"attempt": 0}', $2, $3::uuid)`, id, worker, claim)
		}
		require.Equal(t, "stale", put(frozenID, stale))
		require.Equal(t, "stale", one[string](t, b.Ctx, b.Pool, `select status from pgrun.step_get($1, 'one', 0, $2, $3::uuid)`, id, frozenID, stale))
		require.Equal(t, []string{"one@0/1"}, stepsRecorded(t, b, id), "a stale claim recorded a step")
		require.Equal(t, "done", put("conf-next", fresh), "the job's claim could not record the step")

		require.NoError(t, frozen.Cmd.Process.Signal(syscall.SIGCONT))
		// One job at a time: the thawed worker runs the next job once it has let the
		// stale one go.
		next := enqueueKind(t, b, "noop", nil)
		waitStatus(t, b, next, pgrun.StatusSucceeded)
		require.Equal(t, frozenID, *getJob(t, b, next).ClaimedBy)
		j := getJob(t, b, id)
		require.Equal(t, pgrun.StatusRunning, j.Status, "the stale worker reported the job")
		require.Equal(t, fresh, j.ClaimID.String())
		require.Equal(t, []string{"one@0/1", "two@1/2"}, stepsRecorded(t, b, id))
		require.Zero(t, stepRuns(t, b, id, "two"), "the stale worker ran step two")
	})
}

// A child spawned before a failure is enqueued once: the retry gets the recorded
// id, enqueues nothing, and awaits that child.
func TestConformanceDurableSpawnedChildIsEnqueuedOnce(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "durable_spawn", nil)
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, id, pgrun.StatusSucceeded)
		child := one[int64](t, b.Ctx, b.Pool, `select (result->>'id')::bigint from pgrun.job_steps where job_id = $1 and name = 'child'`, id)
		require.Equal(t, 1, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where kind = 'noop'`), "the child was enqueued again")
		j := getJob(t, b, id)
		require.JSONEq(t, fmt.Sprintf(`{"child": %d, "status": "succeeded"}`, child), string(j.Result))
		require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, child))
		require.Equal(t, 1, j.Failures, "only the failure after the spawn spent an attempt")
		require.GreaterOrEqual(t, j.Attempt, 2, "the failure, then (a wait and) the resume")
	})
}

// A handler that asks for its steps in another order than the job recorded (its
// code changed between attempts) fails with class step_mismatch, naming both, and
// the step asked for out of order does not run.
func TestConformanceDurableMismatchedStepOrderFails(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "durable_mismatch", nil, pgrun.MaxAttempts(2))
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, id, pgrun.StatusFailed)
		j := getJob(t, b, id)
		var e struct{ Class, Message string }
		require.NoError(t, json.Unmarshal(j.Error, &e))
		require.Equal(t, "step_mismatch", e.Class, e.Message)
		require.Contains(t, e.Message, "'a'")
		require.Contains(t, e.Message, "'b'")
		require.Equal(t, 1, stepRuns(t, b, id, "a"))
		require.Zero(t, stepRuns(t, b, id, "b"), "the mismatched step ran")
		require.Equal(t, []string{"a@0/1"}, stepsRecorded(t, b, id))
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 2, j.Failures)
	})
}
