package runner_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// hookRecorder keeps every event a runner's hooks were called with.
type hookRecorder struct {
	mu        sync.Mutex
	claims    []runner.ClaimEvent
	outcomes  []runner.OutcomeEvent
	maintains []runner.MaintainEvent
	lost      []int64
}

func (h *hookRecorder) hooks() runner.Hooks {
	return runner.Hooks{
		OnClaim: func(ev runner.ClaimEvent) { h.mu.Lock(); h.claims = append(h.claims, ev); h.mu.Unlock() },
		OnOutcome: func(ev runner.OutcomeEvent) {
			h.mu.Lock()
			h.outcomes = append(h.outcomes, ev)
			h.mu.Unlock()
		},
		OnMaintain: func(ev runner.MaintainEvent) {
			h.mu.Lock()
			h.maintains = append(h.maintains, ev)
			h.mu.Unlock()
		},
		OnLeaseLost: func(j *pgrun.Job) { h.mu.Lock(); h.lost = append(h.lost, j.ID); h.mu.Unlock() },
	}
}

// of lists the outcomes recorded for job id, in order.
func (h *hookRecorder) of(id int64) []runner.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []runner.Outcome
	for _, ev := range h.outcomes {
		if ev.Job.ID == id {
			out = append(out, ev.Outcome)
		}
	}
	return out
}

// Every attempt that ends in a runner reaches OnOutcome once, with the outcome the
// database decided (a failure retried or final, a retry later, a deferral); every
// claim reaches OnClaim with the jobs it brought; a led maintain() round reaches
// OnMaintain.
func TestHooksSeeEveryClaimAndOutcome(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('default', backoff_base => '10 milliseconds', backoff_max => '20 milliseconds')`)
	require.NoError(t, err)
	rec := &hookRecorder{}
	r := testkit.NewRunner(b.Pool, runner.Config{Hooks: []runner.Hooks{rec.hooks()}, MaintenanceInterval: 50 * time.Millisecond})
	testkit.StartRunner(t, r)

	echo, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]int{"n": 1})
	require.NoError(t, err)
	flaky, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindFail, runner.FailArgs{Times: 1})
	require.NoError(t, err)
	broken, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindFail, runner.FailArgs{Permanent: true})
	require.NoError(t, err)
	later, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindLater, runner.LaterArgs{MS: 10})
	require.NoError(t, err)
	fanout, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindFanout, runner.FanoutArgs{Children: 2})
	require.NoError(t, err)

	want := map[int64][]runner.Outcome{
		echo.ID:   {runner.OutcomeSucceeded},
		flaky.ID:  {runner.OutcomeRetried, runner.OutcomeSucceeded},
		broken.ID: {runner.OutcomeFailed},
		later.ID:  {runner.OutcomeRetryLater, runner.OutcomeSucceeded},
		fanout.ID: {runner.OutcomeDeferred},
	}
	testkit.Eventually(t, 20*time.Second, "every attempt's outcome", func() bool {
		for id, w := range want {
			if !slices.Equal(rec.of(id), w) {
				return false
			}
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.outcomes) == 9 // the seven above and the fanout's two children
	})
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, fanout.ID))
	// The jobs can all end within the first maintenance interval: wait for a led round
	// on its own rather than assume one came first.
	testkit.Eventually(t, 10*time.Second, "a maintain round led by the only runner", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, ev := range rec.maintains {
			if ev.Leader {
				return true
			}
		}
		return false
	})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	claimed := 0
	for _, ev := range rec.claims {
		require.NoError(t, ev.Err)
		require.Equal(t, "default", ev.Queue)
		require.Positive(t, ev.RoundTrip)
		claimed += len(ev.Jobs)
	}
	require.Equal(t, len(rec.outcomes), claimed, "one outcome per claimed attempt")
	for _, ev := range rec.outcomes {
		require.NoError(t, ev.Err)
		require.GreaterOrEqual(t, ev.Wait, time.Duration(0))
		require.Positive(t, ev.Run)
		require.Positive(t, ev.ReportRoundTrip, "%s of job %d", ev.Outcome, ev.Job.ID)
		require.NotNil(t, ev.Job.StartedAt)
	}
	led := false
	for _, ev := range rec.maintains {
		require.NoError(t, ev.Err)
		require.NotEmpty(t, ev.Step)
		led = led || ev.Leader
	}
	require.True(t, led, "the only runner leads maintenance")
	require.Empty(t, rec.lost)
}

// The wait an outcome reports runs from when the job was due to its claim, by the
// database's clock.
func TestOutcomeWaitIsFromDueToClaim(t *testing.T) {
	b := testkit.Setup(t)
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindNoop, nil)
	require.NoError(t, err)
	// The job has waited a minute before any runner exists.
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set created_at = created_at - interval '1 minute',
		run_at = run_at - interval '1 minute' where id = $1`, j.ID)
	require.NoError(t, err)
	rec := &hookRecorder{}
	testkit.StartRunner(t, testkit.NewRunner(b.Pool, runner.Config{Hooks: []runner.Hooks{rec.hooks()}, MaintenanceInterval: -1}))
	testkit.Eventually(t, 10*time.Second, "the outcome", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.outcomes) == 1
	})
	ev := rec.outcomes[0]
	require.GreaterOrEqual(t, ev.Wait, time.Minute)
	require.Less(t, ev.Wait, 2*time.Minute)
	require.Equal(t, ev.Job.StartedAt.Sub(ev.Job.RunAt), ev.Wait)
}

// A job whose lease is lost reaches OnLeaseLost when its handler is cancelled, and
// OnOutcome as lease_lost; a job cancelled while it runs reaches OnOutcome as
// cancelled.
func TestHooksSeeLostLeasesAndCancels(t *testing.T) {
	b := testkit.Setup(t)
	rec := &hookRecorder{}
	started := make(chan *pgrun.Job, 2)
	r := testkit.NewRunner(b.Pool, runner.Config{WorkerID: "mine", Lease: time.Second, MaintenanceInterval: -1,
		Hooks: []runner.Hooks{rec.hooks()}})
	runner.Handle(r, "long", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		started <- j.Job
		<-ctx.Done()
		return nil, ctx.Err()
	})
	testkit.StartRunner(t, r)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "long", nil)
	require.NoError(t, err)
	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "long", nil)
	require.NoError(t, err)
	lost, cancelled := <-started, <-started

	// Another worker has taken the job over (as after a lease expiry and re-claim).
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set claimed_by = 'someone-else', attempt = attempt + 1 where id = $1`, lost.ID)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'test')`, cancelled.ID)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "both outcomes", func() bool {
		return slices.Equal(rec.of(lost.ID), []runner.Outcome{runner.OutcomeLeaseLost}) &&
			slices.Equal(rec.of(cancelled.ID), []runner.Outcome{runner.OutcomeCancelled})
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, []int64{lost.ID}, rec.lost)
}
