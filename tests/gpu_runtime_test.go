package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// sizedModel is a fake model of a fixed size.
type sizedModel struct{ size int64 }

func (m sizedModel) Size() int64  { return m.size }
func (m sizedModel) Close() error { return nil }

// affinityRun runs 60 jobs alternating two models through two runners whose caches
// hold one model each, and returns how many model loads it took.
func affinityRun(t *testing.T, affinity bool) int64 {
	url := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := &testkit.DB{Ctx: ctx, Pool: testdb.PoolFor(t, url), URL: url}
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('gpu', warm_wait => '1 minute')`)
	require.NoError(t, err)
	var loads atomic.Int64
	var runs atomic.Int64
	for _, name := range []string{"left", "right"} {
		cache := gpu.NewCache(gpu.CacheConfig{Budgets: []int64{100}, Load: func(_ context.Context, _ string, _ int) (gpu.Model, error) {
			loads.Add(1)
			return sizedModel{size: 100}, nil // one model fills the device
		}})
		cfg := runner.Config{WorkerID: name, Queues: map[string]runner.QueueConfig{"gpu": {GPU: true}},
			Devices: []gpu.Device{{Index: 0, Name: "fake"}}}
		if affinity {
			cfg.Models = cache
		}
		r := testkit.NewRunner(b.Pool, cfg)
		testkit.Handle(t, r, "infer", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			var h *gpu.Handle
			if affinity {
				if _, err := j.UseModel(ctx); err != nil {
					return nil, err
				}
			} else {
				// Same cache work, but the runner does not advertise what is warm.
				var err error
				if h, err = cache.Get(ctx, *j.Model); err != nil {
					return nil, err
				}
				defer h.Release()
			}
			runs.Add(1)
			time.Sleep(2 * time.Millisecond) // stands in for inference
			return nil, nil
		})
		testkit.StartRunner(t, r)
	}
	specs := make([]pgrun.JobSpec, 60)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "infer", Queue: "gpu", Model: []string{"m1", "m2"}[i%2]}
	}
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	testkit.Eventually(t, 60*time.Second, "all inferences done", func() bool { return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == len(specs) })
	require.EqualValues(t, len(specs), runs.Load())
	return loads.Load()
}

// With two workers, two models and a mixed backlog, routing jobs to the worker that
// has their model warm takes far fewer model loads than first-come order.
func TestModelAffinityCutsModelLoads(t *testing.T) {
	t.Parallel()
	withAffinity := affinityRun(t, true)
	firstCome := affinityRun(t, false)
	t.Logf("model loads: %d with affinity, %d first-come", withAffinity, firstCome)
	require.LessOrEqual(t, withAffinity, int64(6))
	require.Greater(t, firstCome, 3*withAffinity)
}

// A job whose model is warm on another live worker is left to it for warm_wait, then
// taken by anyone; a model_required job goes only to a worker that can serve it.
func TestWarmWaitAndRequiredModels(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('gpu', warm_wait => '10 seconds')`)
	c.Exec(`select pgrun.worker_heartbeat('warm', 'h1', 1, '{gpu}', '{m1}')`)
	c.Exec(`select pgrun.worker_heartbeat('cold', 'h2', 2, '{gpu}', '{}', servable => '{m9}')`)
	c.Exec(`select pgrun.enqueue_job('infer', queue => 'gpu', model => 'm1')`)
	require.Zero(t, claimCount(t, c.Conn, "gpu", "cold", 10), "left for the worker with m1 warm")
	c.Set(now.Add(11 * time.Second))
	require.Equal(t, 1, claimCount(t, c.Conn, "gpu", "cold", 10), "nobody took it within warm_wait")

	c.Exec(`insert into pgrun.jobs (kind, queue, model, model_required) values ('infer', 'gpu', 'm2', true), ('infer', 'gpu', 'm9', true)`)
	var model string
	c.QueryRow(`select model from pgrun.claim_jobs('gpu', 'cold', 10)`, nil, &model)
	require.Equal(t, "m9", model, "cold can serve m9 but not m2")
	c.QueryRow(`select model from pgrun.claim_jobs('gpu', 'warm', 10, models => '{m2}')`, nil, &model)
	require.Equal(t, "m2", model, "a worker with m2 warm takes it")
}

// A GPU queue without a worker count gets one slot per device.
func TestGPUQueueSlotsFollowDevices(t *testing.T) {
	b := testkit.Setup(t)
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:  map[string]runner.QueueConfig{"gpu": {GPU: true}},
		Devices: []gpu.Device{{Index: 0}, {Index: 1}},
	})
	testkit.Handle(t, r, "infer", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		defer inFlight.Add(-1)
		<-release
		return nil, nil
	})
	testkit.StartRunner(t, r)
	for range 5 {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "infer", nil, pgrun.Queue("gpu"))
		require.NoError(t, err)
	}
	testkit.Eventually(t, 10*time.Second, "two jobs running", func() bool { return inFlight.Load() == 2 })
	require.Equal(t, 2, testkit.CountStatus(t, b, pgrun.StatusRunning), "one job per device")
	close(release)
	testkit.Eventually(t, 10*time.Second, "all done", func() bool { return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == 5 })
	require.EqualValues(t, 2, peak.Load())
}

// A handler that ignores its cancelled context is abandoned AbandonAfter later: its
// slot is freed, its job reported without it (here: the cancellation stands), and
// it is counted; past the threshold the runner says so (the CLI exits with
// ExitAbandoned).
func TestAbandonment(t *testing.T) {
	b := testkit.Setup(t)
	clk := testkit.NewClock(time.Unix(1_900_000_000, 0))
	var tooMany atomic.Int32
	stuck := make(chan struct{})
	defer close(stuck)
	r := testkit.NewRunner(b.Pool, runner.Config{Watchdog: runner.WatchdogConfig{
		AbandonAfter: 30 * time.Second, MaxAbandoned: 1,
		Interval: 5 * time.Millisecond, Now: clk.Now,
		OnTooManyAbandoned: func(n int) { tooMany.Store(int32(n)) },
	}})
	var rudeCancelled atomic.Int32
	testkit.Handle(t, r, "rude", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		context.AfterFunc(ctx, func() { rudeCancelled.Add(1) })
		<-stuck // ignores ctx
		return nil, nil
	})
	testkit.StartRunner(t, r)
	for i := range 2 {
		rude, err := pgrun.Enqueue(b.Ctx, b.Pool, "rude", nil, pgrun.MaxAttempts(1))
		require.NoError(t, err)
		testkit.Eventually(t, 10*time.Second, "rude running", func() bool { return testkit.JobStatus(t, b, rude.ID) == pgrun.StatusRunning })
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'stop')`, rude.ID)
		require.NoError(t, err)
		testkit.Eventually(t, 10*time.Second, "rude cancelled", func() bool { return rudeCancelled.Load() == int32(i+1) })
		require.EqualValues(t, i, r.Abandoned(), "not abandoned yet")
		clk.Advance(31 * time.Second) // abandon
		testkit.Eventually(t, 10*time.Second, "rude abandoned", func() bool { return r.Abandoned() == int64(i+1) })
		require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, b, rude.ID))
	}
	testkit.Eventually(t, 5*time.Second, "threshold reached", func() bool { return tooMany.Load() == 2 })
}

// The runner samples its host into pgrun.hw_metrics and notifies pgrun_hw; the table
// keeps an hour per host.
func TestTelemetryIsRecordedAndBounded(t *testing.T) {
	b := testkit.Setup(t)
	l := testkit.Listen(t, b, "pgrun_hw")
	r := testkit.NewRunner(b.Pool, runner.Config{Host: "sampled-host", TelemetryInterval: 20 * time.Millisecond})
	stop := testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "two samples", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.hw_metrics where host = 'sampled-host'`).Scan(&n))
		return n >= 2
	})
	var total int64
	var gpus int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select mem_total, gpu_count from pgrun.host_status where host = 'sampled-host'`).Scan(&total, &gpus))
	require.Positive(t, total)
	require.Zero(t, gpus, "no GPU on this machine: CPU only")
	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
	defer cancel()
	n, err := l.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Contains(t, n.Payload, `"host": "sampled-host"`)

	stop() // no sample of the runner's may land between the one below and the count
	c := testkit.PinClock(t, b, time.Now().Add(2*time.Hour))
	c.Exec(`select pgrun.record_hw('sampled-host', 10, 1, 2, '[]')`)
	var left int
	c.QueryRow(`select count(*) from pgrun.hw_metrics where host = 'sampled-host'`, nil, &left)
	require.Equal(t, 1, left, "samples older than an hour are gone")
}
