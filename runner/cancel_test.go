package runner_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A job stopped while running elsewhere (cancelled, or timed out by maintain()) and
// then run again (retry_job, or the timeout's own retry) is run by whichever runner
// claims the new attempt, including one that heard the stop on pgrun_cancel.
//
// Was a BUG (fixed): Runner.cancelRunning (runner/runner.go) remembers, for a minute, the id of
// every job it hears cancelled on pgrun_cancel but is not running itself (r.cancelled,
// keyed by job id only), and Runner.start cancels any job it claims whose id is in
// that memory. So a runner that merely heard the stop of attempt 1 (which ran on
// another runner) kills attempt 2 the moment it claims it: the handler never runs,
// and since report() ignores ErrJobCancelled nothing is reported, so the job sits
// "running" under this runner until its lease runs out (30 s by default), costs a
// lease expiry (lease_budget is 3: a job that keeps timing out can end failed with
// class lease_expired), and only then runs. The memory should be keyed by (id,
// attempt), or the notification should carry the attempt; the claim itself already
// proves the job is not cancelled.
func TestRedrivenJobRunsOnARunnerThatHeardItsStop(t *testing.T) {
	for _, how := range []string{"cancel_then_retry_job", "timeout_then_retry"} {
		t.Run(how, func(t *testing.T) {
			b := testkit.Setup(t)
			var mu sync.Mutex
			ran := map[int64][]int{} // job id -> attempts the handler saw
			// No polling and no maintenance: this runner claims only when a
			// notification wakes it, so a job it ran proves it had handled every
			// notification sent before that job's.
			r := testkit.NewRunner(b.Pool, runner.Config{WorkerID: "bystander", PollInterval: time.Hour, MaintenanceInterval: -1})
			testkit.Handle(t, r, "work", func(_ context.Context, j *runner.Job[struct{}]) (any, error) {
				mu.Lock()
				ran[j.ID] = append(ran[j.ID], j.Attempt)
				mu.Unlock()
				return "done", nil
			})
			testkit.StartRunner(t, r)
			heard := func() {
				t.Helper()
				s, err := pgrun.Enqueue(b.Ctx, b.Pool, "work", nil)
				require.NoError(t, err)
				testkit.Eventually(t, 10*time.Second, "the runner to run a sentinel job", func() bool {
					return testkit.JobStatus(t, b, s.ID) == pgrun.StatusSucceeded
				})
			}
			heard()

			// The job runs elsewhere: enqueued and claimed by another worker in one
			// transaction, so the bystander is woken but finds nothing to claim. For
			// the timeout case its attempt started two minutes ago.
			tx, err := b.Pool.Begin(b.Ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.Ctx)
			if how == "timeout_then_retry" {
				err = testkit.NewClock(time.Now().Add(-2*time.Minute)).PinTx(b.Ctx, tx)
				require.NoError(t, err)
			}
			var id int64
			require.NoError(t, tx.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('work', timeout => '10 seconds')`).Scan(&id))
			require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, testkit.ClaimN(t, tx, "default", "elsewhere", 1, "1 hour"))
			require.NoError(t, tx.Commit(b.Ctx))

			switch how {
			case "cancel_then_retry_job":
				_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'operator')`, id)
				require.NoError(t, err)
			case "timeout_then_retry":
				var out string
				// No stall window: the server's start counts as a sign of life of every
				// job, and this test may run within a minute of it (CI starts the server).
				require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain(stall_window => '0')::text`).Scan(&out))
				require.Contains(t, out, `"timed_out": 1`)
			}
			heard() // the bystander has now handled the pgrun_cancel notification for id

			switch how {
			case "cancel_then_retry_job":
				_, err = b.Pool.Exec(b.Ctx, `select pgrun.retry_job($1)`, id)
				require.NoError(t, err)
			case "timeout_then_retry":
				testkit.Eventually(t, 10*time.Second, "the retry's backoff to pass", func() bool {
					var due bool
					require.NoError(t, b.Pool.QueryRow(b.Ctx, `select run_at <= now() from pgrun.jobs where id = $1`, id).Scan(&due))
					return due
				})
				_, err = b.Pool.Exec(b.Ctx, `select pg_notify('pgrun_jobs', 'default')`)
				require.NoError(t, err)
			}

			testkit.Poll(5*time.Second, func() bool { return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded })
			j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
			require.NoError(t, err)
			mu.Lock()
			attempts := ran[id]
			mu.Unlock()
			claimedBy := ""
			if j.ClaimedBy != nil {
				claimedBy = *j.ClaimedBy
			}
			require.Equalf(t, pgrun.StatusSucceeded, j.Status,
				"BUG: attempt %d is %s under %q and its handler ran for attempts %v: the bystander killed it at start",
				j.Attempt, j.Status, claimedBy, attempts)
			require.Equal(t, []int{2}, attempts)
		})
	}
}

// Cancelling a running job cancels its handler's context within a second, with cause
// ErrJobCancelled, and the late return of the handler is ignored.
func TestCancelRunningJobCancelsHandlerWithinASecond(t *testing.T) {
	b := testkit.Setup(t)
	started := make(chan struct{})
	var cause atomic.Value
	var cancelledAt atomic.Int64
	r := testkit.NewRunner(b.Pool, runner.Config{Lease: time.Hour}) // no renewal: only the notification stops it
	hearsCancels := testkit.CancelProbe(t, b, r)
	testkit.Handle(t, r, "blocker", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		close(started)
		<-ctx.Done()
		cancelledAt.Store(time.Now().UnixNano())
		cause.Store(context.Cause(ctx))
		return "late result", nil // must be ignored
	})
	testkit.StartRunner(t, r)
	hearsCancels()
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "blocker", nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	at := time.Now()
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "operator")
	require.NoError(t, err)
	testkit.Eventually(t, time.Second, "handler context cancelled", func() bool { return cancelledAt.Load() != 0 })
	t.Logf("cancel reached the handler after %s", time.Unix(0, cancelledAt.Load()).Sub(at))
	require.True(t, errors.Is(cause.Load().(error), runner.ErrJobCancelled), "cause %v", cause.Load())

	// Give the runner every chance to (wrongly) report the late result.
	r2 := testkit.NewRunner(b.Pool, runner.Config{WorkerID: "probe"})
	testkit.StartRunner(t, r2)
	probe, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "probe job done", func() bool { return testkit.JobStatus(t, b, probe.ID) == pgrun.StatusSucceeded })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, j.Status)
	require.Nil(t, j.Result)
}

// A running handler's context is cancelled within a second of pgrun.Cancel, with
// cause runner.ErrJobCancelled, and whatever the handler returns afterwards (a result
// or an error) is ignored: the job stays cancelled with no result, no failure and no
// requeue, even after the runner has stopped and flushed everything.
func TestCancelStopsRunningHandlersAndIgnoresWhatTheyReturn(t *testing.T) {
	b := testkit.Setup(t)
	type stopped struct {
		cause error
		at    time.Time
	}
	started := make(chan int64, 2)
	causes := make(chan stopped, 2)
	r := testkit.NewRunner(b.Pool, runner.Config{Lease: time.Hour}) // no renewal: only the notification stops them
	hearsCancels := testkit.CancelProbe(t, b, r)
	block := func(ret func(ctx context.Context) (any, error)) func(context.Context, *runner.Job[struct{}]) (any, error) {
		return func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			started <- j.ID
			<-ctx.Done()
			causes <- stopped{context.Cause(ctx), time.Now()}
			return ret(ctx)
		}
	}
	testkit.Handle(t, r, "returns-result", block(func(context.Context) (any, error) { return "late result", nil }))
	testkit.Handle(t, r, "returns-error", block(func(ctx context.Context) (any, error) { return nil, ctx.Err() }))
	stop := testkit.StartRunner(t, r)
	hearsCancels()

	for _, kind := range []string{"returns-result", "returns-error"} {
		job, err := pgrun.Enqueue(b.Ctx, b.Pool, kind, nil)
		require.NoError(t, err)
		select {
		case id := <-started:
			require.Equal(t, job.ID, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler did not start", kind)
		}
		asked := time.Now()
		_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "operator")
		require.NoError(t, err)
		var got stopped
		testkit.Eventually(t, time.Second, kind+": handler context cancelled", func() bool {
			select {
			case got = <-causes:
				return true
			default:
				return false
			}
		})
		t.Logf("%s: cancel reached the handler after %s", kind, got.at.Sub(asked))
		require.Less(t, got.at.Sub(asked), time.Second)
		require.Truef(t, errors.Is(got.cause, runner.ErrJobCancelled), "%s: cause %v", kind, got.cause)
	}
	stop() // waits for Run to return: every outcome has been reported by now

	var cancelled, results, failures, others int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) filter (where status = 'cancelled' and kind <> 'cancel-probe'),
		count(result), sum(failures),
		(select count(*) from pgrun.job_events e where e.event <> 'job.cancelled')
		from pgrun.jobs`).Scan(&cancelled, &results, &failures, &others))
	require.Equal(t, 2, cancelled, "both jobs stay cancelled")
	require.Zero(t, results, "a late result was recorded")
	require.Zero(t, failures, "a late error was counted as a failure")
	require.Zero(t, others, "a late outcome wrote an event (failed, requeued...)")
}

// A job can be claimed before the runner's LISTEN connection is in place (Run
// starts both at once; a slow or reconnecting listener widens the window), and a
// cancel sent then is heard by nobody. The runner confirms every job it holds once
// its listener connects, so the handler stops then, not at the next lease renewal
// (an hour's lease here: renewal comes after twenty minutes). The listener goes
// through a gate that holds its connection until the job was cancelled.
func TestCancelSentBeforeTheListenerConnectedStopsTheHandler(t *testing.T) {
	b := testkit.Setup(t)
	gate := newHeldProxy(t, b.URL)
	r := testkit.NewBareRunner(b.Pool, runner.Config{Lease: time.Hour, MaintenanceInterval: -1,
		PollInterval: 20 * time.Millisecond, ListenURL: gate.url})
	started, stopped := make(chan int64, 1), make(chan error, 1)
	testkit.Handle(t, r, "long", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		started <- j.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "long", nil)
	require.NoError(t, err)
	testkit.StartRunner(t, r)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the long job did not start")
	}
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "before anyone listened")
	require.NoError(t, err)
	select {
	case cause := <-stopped:
		t.Fatalf("the handler stopped (%v) before the listener could connect", cause)
	default:
	}
	gate.open()
	select {
	case cause := <-stopped:
		require.ErrorIs(t, cause, runner.ErrJobCancelled)
	case <-time.After(15 * time.Second):
		t.Fatal("the handler was not stopped once the listener connected")
	}
}

// heldProxy forwards TCP connections to a PostgreSQL server only once opened: until
// then a connection through it waits, as a LISTEN connection that is slow to come up.
type heldProxy struct {
	url     string
	release chan struct{}
}

func newHeldProxy(t *testing.T, dbURL string) *heldProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &heldProxy{release: make(chan struct{})}
	target := u.Host
	u.Host = ln.Addr().String()
	p.url = u.String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-p.release
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
	return p
}

func (p *heldProxy) open() { close(p.release) }
