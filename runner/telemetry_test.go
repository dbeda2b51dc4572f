package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

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

// A runner's hardware samples carry its own share of the host (its cgroup v2 where
// readable, else its process) apart from the rest, named by worker; host_status shows
// both.
func TestTelemetrySplitsTheRunnersOwnShare(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewRunner(b.Pool, runner.Config{Host: "split-host", TelemetryInterval: 20 * time.Millisecond})
	testkit.StartRunner(t, r)
	var worker, source *string
	var selfMem, othersMem, used *int64
	var selfCPU, othersCPU *float32
	testkit.Eventually(t, 10*time.Second, "a sample with the runner's share", func() bool {
		err := b.Pool.QueryRow(b.Ctx, `select self_worker, self_source, self_mem_used, others_mem_used,
			mem_used, self_cpu_pct, others_cpu_pct from pgrun.host_status where host = 'split-host'`).
			Scan(&worker, &source, &selfMem, &othersMem, &used, &selfCPU, &othersCPU)
		if errors.Is(err, pgx.ErrNoRows) {
			return false // no sample yet
		}
		require.NoError(t, err)
		return source != nil
	})
	require.Equal(t, r.WorkerID(), *worker)
	require.Contains(t, []string{"cgroup", "process"}, *source)
	require.Positive(t, *selfMem)
	require.Equal(t, max(0, *used-*selfMem), *othersMem)
	require.GreaterOrEqual(t, *selfCPU, float32(0))
	require.GreaterOrEqual(t, *othersCPU, float32(0))
}
