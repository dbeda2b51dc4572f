package runner_test

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
