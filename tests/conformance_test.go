package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The worker conformance suite. Every rule a worker follows is SQL's, so a worker in
// any language passes by making the calls of docs/sql-api.md#write-a-worker-in-your-language
// in order. A worker is driven through this adapter contract:
//
//   - it is a process started with a database URL and a queue, and the worker id in
//     $PGRUN_WORKER_ID (the Go runner takes flags instead);
//   - it serves one job at a time (the suite gives the Go runner one slot) of the
//     kinds noop, echo, sleep {ms}, fail {message, permanent, times}, later {ms} and
//     fanout {children}, and the durable kinds durable_steps {pause_ms},
//     durable_flaky, durable_sleep {ms}, durable_event {event, timeout_ms},
//     durable_spawn and durable_mismatch (conformance_durable_test.go), as
//     runner.RegisterExamples defines them;
//   - its durable calls (sql/functions/35_durable.sql) present its worker id and the
//     claim_id, numbered from 0 in each attempt; one answered parked, mismatch or
//     stale ends the handler without a report (the database has decided);
//   - SIGTERM stops it: it claims nothing more, hands its running job back without
//     spending an attempt, and exits; SIGKILL may come at any time.
//
// Each scenario runs against each adapter in a database of its own.
type workerAdapter struct {
	name  string
	start func(url, queue, id string) *exec.Cmd
}

var workerAdapters = []workerAdapter{
	{"go", func(url, queue, id string) *exec.Cmd {
		return exec.Command(runnerBin, "work", "--examples", "--database-url", url, "--queues", queue+"=1",
			"--worker-id", id, "--grace", "0s", "--log-level", "warn")
	}},
	{"python", func(url, queue, id string) *exec.Cmd {
		c := exec.Command(pythonBin, "../examples/python-worker/worker.py", url, queue)
		c.Env = append(os.Environ(), "PGRUN_WORKER_ID="+id)
		return c
	}},
}

// pythonBin is Debian's interpreter, which sees Debian's python3-psycopg (a python3
// earlier on PATH may not).
const pythonBin = "/usr/bin/python3"

// startAdapter starts worker id of adapter a on queue.
func startAdapter(t *testing.T, a workerAdapter, b *testkit.DB, queue, id string) *testkit.Proc {
	t.Helper()
	if a.name == "python" {
		out, err := exec.Command(pythonBin, "-c", "import psycopg").CombinedOutput()
		require.NoError(t, err, "the Python worker needs Debian's python3-psycopg (apt-get install python3-psycopg): %s", out)
	}
	return testkit.StartProc(t, a.name+" worker "+id, a.start(b.URL, queue, id))
}

// forEachAdapter runs scenario against every adapter, each in its own database.
func forEachAdapter(t *testing.T, scenario func(t *testing.T, a workerAdapter, b *testkit.DB)) {
	for _, a := range workerAdapters {
		t.Run(a.name, func(t *testing.T) {
			scenario(t, a, testkit.Setup(t))
		})
	}
}

func enqueueKind(t *testing.T, b *testkit.DB, kind string, args any, opts ...pgrun.Option) int64 {
	t.Helper()
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, kind, args, append([]pgrun.Option{pgrun.Queue("conf")}, opts...)...)
	require.NoError(t, err)
	return j.ID
}

func getJob(t *testing.T, b *testkit.DB, id int64) *pgrun.Job {
	t.Helper()
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	return j
}

func waitStatus(t *testing.T, b *testkit.DB, id int64, want pgrun.JobStatus) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("job %d %s", id, want), func() bool { return testkit.JobStatus(t, b, id) == want })
}

func TestConformanceCompleteInPriorityOrder(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		low := enqueueKind(t, b, "echo", map[string]any{"n": 2}, pgrun.Priority(2))
		high := enqueueKind(t, b, "echo", map[string]any{"n": 0}, pgrun.Priority(0))
		mid := enqueueKind(t, b, "echo", map[string]any{"n": 1}, pgrun.Priority(1))
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		for _, id := range []int64{high, mid, low} {
			waitStatus(t, b, id, pgrun.StatusSucceeded)
		}
		jh, jm, jl := getJob(t, b, high), getJob(t, b, mid), getJob(t, b, low)
		require.JSONEq(t, `{"n": 0}`, string(jh.Result))
		require.True(t, !jh.StartedAt.After(*jm.StartedAt) && !jm.StartedAt.After(*jl.StartedAt), "not claimed in priority order")
		require.Equal(t, 1, jl.Attempt)
	})
}

func TestConformanceFailRetriesWithBackoffThenFailsForGood(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		retried := enqueueKind(t, b, "fail", map[string]any{"times": 1})
		permanent := enqueueKind(t, b, "fail", map[string]any{"permanent": true, "message": "no"})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, retried, pgrun.StatusSucceeded)
		waitStatus(t, b, permanent, pgrun.StatusFailed)
		r, p := getJob(t, b, retried), getJob(t, b, permanent)
		require.Equal(t, 2, r.Attempt)
		require.Equal(t, 1, r.Failures)
		var backoff bool // the retry was scheduled after the failure, not at once
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (fields->>'next_run_at')::timestamptz > at from pgrun.job_events
			where job_id = $1 and event = 'job.failed'`, retried).Scan(&backoff))
		require.True(t, backoff)
		require.Equal(t, 1, p.Attempt)
		var e struct{ Class, Message string }
		require.NoError(t, json.Unmarshal(p.Error, &e))
		require.Equal(t, "no", e.Message)
	})
}

func TestConformanceRetryLaterSpendsNoAttempt(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "later", map[string]any{"ms": 50})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, id, pgrun.StatusSucceeded)
		j := getJob(t, b, id)
		require.Equal(t, 2, j.Attempt, "later runs twice: attempt counts claims")
		require.Equal(t, 0, j.Failures, "retry later spent an attempt")
	})
}

func TestConformanceCancelStopsTheRunningJob(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		long := enqueueKind(t, b, "sleep", map[string]any{"ms": 600_000})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, long, pgrun.StatusRunning)
		_, err := pgrun.Cancel(b.Ctx, b.Pool, long, "not needed")
		require.NoError(t, err)
		// One job at a time: the next one runs only once the cancelled handler stopped.
		next := enqueueKind(t, b, "noop", nil)
		waitStatus(t, b, next, pgrun.StatusSucceeded)
		require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, b, long))
	})
}

func TestConformanceLostLeaseIsReclaimed(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('conf', default_lease => '15 seconds')`)
		require.NoError(t, err)
		id := enqueueKind(t, b, "sleep", map[string]any{"ms": 1500})
		frozen := startAdapter(t, a, b, "conf", "conf-frozen-"+a.name)
		waitStatus(t, b, id, pgrun.StatusRunning)
		require.NoError(t, frozen.Cmd.Process.Signal(syscall.SIGSTOP))
		startAdapter(t, a, b, "conf", "conf-other-"+a.name)
		testkit.Eventually(t, 30*time.Second, "the lease runs out and another worker finishes the job", func() bool {
			_, _ = b.Pool.Exec(b.Ctx, `select pgrun.maintain()`) // the Python worker does not maintain
			return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded
		})
		require.NoError(t, frozen.Cmd.Process.Signal(syscall.SIGCONT))
		j := getJob(t, b, id)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 1, j.LeaseExpiries)
		require.Equal(t, "conf-other-"+a.name, *j.ClaimedBy)
	})
}

func TestConformanceShutdownRequeues(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		id := enqueueKind(t, b, "sleep", map[string]any{"ms": 600_000})
		p := startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, id, pgrun.StatusRunning)
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
		p.Wait(t, 30*time.Second)
		j := getJob(t, b, id)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 0, j.Failures, "a shutdown spent an attempt")
	})
}

func TestConformanceUnknownKindWaits(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		unknown := enqueueKind(t, b, "nobody.handles.this", nil)
		after := enqueueKind(t, b, "noop", nil)
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, after, pgrun.StatusSucceeded)
		j := getJob(t, b, unknown)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 0, j.Attempt)
	})
}

func TestConformanceDeferAndFanIn(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		parent := enqueueKind(t, b, "fanout", map[string]any{"children": 3})
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		waitStatus(t, b, parent, pgrun.StatusSucceeded)
		var done int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1 and status = 'succeeded'`,
			parent).Scan(&done))
		require.Equal(t, 3, done)
	})
}

// A mixed fleet, Go and Python workers on one queue, one of each killed with SIGKILL
// mid-job: nothing is lost, and only the jobs whose lease ran out ran again.
func TestConformanceMixedFleetSurvivesSIGKILL(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('conf', default_lease => '15 seconds')`)
	require.NoError(t, err)
	specs := make([]pgrun.JobSpec, 60)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "sleep", Queue: "conf", Args: map[string]any{"ms": 100}}
	}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	var victims []*testkit.Proc
	for _, a := range workerAdapters {
		victims = append(victims, startAdapter(t, a, b, "conf", "fleet-victim-"+a.name))
		startAdapter(t, a, b, "conf", "fleet-"+a.name)
	}
	testkit.Eventually(t, 30*time.Second, "every worker runs a job", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct claimed_by) from pgrun.jobs where status = 'running'`).Scan(&n))
		return n == 4
	})
	for _, v := range victims {
		require.NoError(t, v.Cmd.Process.Signal(syscall.SIGKILL))
	}
	testkit.Eventually(t, time.Minute, "every job succeeds", func() bool {
		_, _ = b.Pool.Exec(b.Ctx, `select pgrun.maintain()`)
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == len(jobs)
	})
	var rerunWithoutLostLease int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where attempt > 1 and lease_expiries = 0`).Scan(&rerunWithoutLostLease))
	require.Zero(t, rerunWithoutLostLease, "a job ran again though no lease of it ran out")
}

// A worker that logs in as a pgrun_worker member, as in production (the other
// scenarios run as the schema owner): it registers its id before claiming, presents
// its worker id and claim token with every report, and each outcome lands. Its id is
// then its login's: another worker login cannot act under it.
func TestConformanceAsAWorkerLogin(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		login, p := testkit.NewRole(t, b, "pgrun_worker")
		done := enqueueKind(t, b, "echo", map[string]any{"n": 1})
		retried := enqueueKind(t, b, "fail", map[string]any{"times": 1})
		failed := enqueueKind(t, b, "fail", map[string]any{"permanent": true, "message": "no"})
		later := enqueueKind(t, b, "later", map[string]any{"ms": 50})
		parent := enqueueKind(t, b, "fanout", map[string]any{"children": 2})
		id := "conf-login-" + a.name
		testkit.StartProc(t, a.name+" worker "+id, a.start(p.Config().ConnString(), "conf", id))
		for _, j := range []int64{done, retried, later, parent} {
			waitStatus(t, b, j, pgrun.StatusSucceeded)
		}
		waitStatus(t, b, failed, pgrun.StatusFailed)
		require.Equal(t, 2, getJob(t, b, later).Attempt)
		require.Equal(t, login, one[string](t, b.Ctx, b.Pool, `select login_role::text from pgrun.workers where id = $1`, id))
		_, other := testkit.NewRole(t, b, "pgrun_worker")
		testkit.Denied(t, b, other, `select pgrun.worker_heartbeat($1, 'h', 1, array['conf'], state => 'stopped')`, id)
	})
}
