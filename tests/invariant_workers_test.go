package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A worker silent for three cadences while holding jobs is flagged dead, with an
// event on its jobs naming it; a fresh heartbeat clears the flag.
func TestSilentWorkerIsFlaggedDeadAndHeartbeatClears(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}', cadence => '10 seconds')`)
	c.Exec(`select pgrun.enqueue_job('noop')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w1', 1, '10 minutes')`)
	c.Exec(`select pgrun.worker_heartbeat('idle', 'host-b', 43, cadence => '10 seconds')`)

	c.Set(now.Add(29 * time.Second))
	var out string
	c.QueryRow(`select pgrun.maintain()::text`, nil, &out)
	require.Contains(t, out, `"workers_flagged_dead": 0`)
	c.Set(now.Add(31 * time.Second))
	c.QueryRow(`select pgrun.maintain()::text`, nil, &out)
	require.Contains(t, out, `"workers_flagged_dead": 1`, "only the worker holding jobs")
	var flagged *time.Time
	c.QueryRow(`select flagged_dead_at from pgrun.workers where id = 'w1'`, nil, &flagged)
	require.NotNil(t, flagged)
	var msg string
	c.QueryRow(`select message from pgrun.job_events where event = 'worker.dead'`, nil, &msg)
	require.Contains(t, msg, "worker w1 on host-a")

	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}', cadence => '10 seconds')`)
	c.QueryRow(`select flagged_dead_at from pgrun.workers where id = 'w1'`, nil, &flagged)
	require.Nil(t, flagged)
}

// Operator control: drain stops new claims and lets the running job finish; off
// cancels running jobs within a second and requeues them without spending an
// attempt; on resumes.
func TestWorkerControlDrainOffOn(t *testing.T) {
	b := testkit.Setup(t)
	release := make(chan struct{})
	var cancelled atomic.Value
	r := testkit.NewRunner(b.Pool, runner.Config{Host: "host-x", WorkerID: "wx"})
	hearsCancels := testkit.CancelProbe(t, b, r)
	testkit.Handle(t, r, "hold", func(ctx context.Context, j *runner.Job[struct{ UntilCancelled bool }]) (any, error) {
		done := release
		if j.Args.UntilCancelled {
			done = nil
		}
		select {
		case <-done:
			return "done", nil
		case <-ctx.Done():
			cancelled.Store(context.Cause(ctx))
			return nil, ctx.Err()
		}
	})
	testkit.StartRunner(t, r)
	hearsCancels() // "off" is told on pgrun_cancel
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, "hold", nil)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "first job running", func() bool { return testkit.JobStatus(t, b, first.ID) == pgrun.StatusRunning })

	// drain: the running job may finish, nothing new starts.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-x', 'default', 'drain')`)
	require.NoError(t, err)
	second, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, nil)
	require.NoError(t, err)
	close(release)
	testkit.Eventually(t, 10*time.Second, "first job finished", func() bool { return testkit.JobStatus(t, b, first.ID) == pgrun.StatusSucceeded })
	require.Zero(t, claimCount(t, b.Pool, "default", "wx", 10), "claim_jobs refuses a drained host")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, second.ID))

	// on: it runs.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-x', 'default', 'on')`)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "second job ran", func() bool { return testkit.JobStatus(t, b, second.ID) == pgrun.StatusSucceeded })

	// off: SQL requeues the running job without spending an attempt, and the
	// handler is stopped (the job is no longer this runner's).
	third, err := pgrun.Enqueue(b.Ctx, b.Pool, "hold", map[string]any{"UntilCancelled": true})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "third job running", func() bool { return testkit.JobStatus(t, b, third.ID) == pgrun.StatusRunning })
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-x', '*', 'off')`)
	require.NoError(t, err)
	testkit.Eventually(t, time.Second, "handler cancelled", func() bool { return cancelled.Load() != nil })
	require.True(t, errors.Is(cancelled.Load().(error), runner.ErrLeaseLost))
	testkit.Eventually(t, 10*time.Second, "third job requeued", func() bool { return testkit.JobStatus(t, b, third.ID) == pgrun.StatusQueued })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, third.ID)
	require.NoError(t, err)
	require.Zero(t, j.Failures)

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-x', 'default', 'sideways')`)
	require.Equal(t, "22023", testkit.SQLState(err))
}

// Worker control off is carried out by SQL: the host's running jobs of the queue are
// requeued at once without spending an attempt, and each worker is told on
// pgrun_cancel. A worker in any language gets it by honouring the notification.
func TestWorkerControlOffRequeuesInSQL(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.worker_heartbeat('py-1', 'host-y', 1, array['default', 'other'])`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop'), pgrun.enqueue_job('noop', queue => 'other')`)
	require.NoError(t, err)
	mine := testkit.ClaimN(t, b.Pool, "default", "py-1", 1, "30 seconds")
	other := testkit.ClaimN(t, b.Pool, "other", "py-1", 1, "30 seconds")
	require.Len(t, mine, 1)
	require.Len(t, other, 1)
	l := testkit.Listen(t, b, "pgrun_cancel")

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-y', 'default', 'off')`)
	require.NoError(t, err)
	j, err := pgrun.GetJob(b.Ctx, b.Pool, mine[0].ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Failures, "no attempt spent")
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other[0].ID), "other queues go on")
	n := testkit.NextNotification(t, l, 5*time.Second)
	require.Equal(t, kitCancelPayload(mine[0]), n.Payload)
	var events int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events where job_id = $1 and event = 'job.requeued'`, mine[0].ID).Scan(&events))
	require.Equal(t, 1, events)
}

func kitCancelPayload(c testkit.Claim) string { return fmt.Sprintf("%d:%d", c.ID, c.Attempt) }
