package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

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

// record_hw refuses a self that is not an object with numbers cpu_pct and mem_used,
// and accepts none (an older runner, or one that could not read its share).
func TestRecordHWChecksSelf(t *testing.T) {
	b := testkit.Setup(t)
	for _, bad := range []string{`[]`, `{"cpu_pct": 1}`, `{"cpu_pct": "1", "mem_used": 2}`} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]', self => $1::jsonb)`, bad)
		require.Equal(t, "22023", testkit.SQLState(err), bad)
	}
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]', self => '{"cpu_pct": 0.5, "mem_used": 1}')`)
	require.NoError(t, err)
}
