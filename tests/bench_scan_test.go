package tests

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
)

// BenchmarkScanJobs measures reading 1,000 job rows into []*pgrun.Job with
// pgrun.ScanJobs, the scan the runner's claim and the job listings use (ns/op is per
// 1,000 rows; the statement itself is the same in every run). client-ns/op is the
// CPU time this process spent (user and system), which leaves out the server's share
// and is steadier than ns/op on a shared machine.
func BenchmarkScanJobs(b *testing.B) {
	ctx := context.Background()
	pool := testdb.Pool(b)
	specs := make([]pgrun.JobSpec, 1000)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Args: map[string]int{"i": i}, Meta: map[string]any{"trace": "abc"}}
	}
	_, err := pgrun.EnqueueMany(ctx, pool, specs)
	require.NoError(b, err)
	start := cpuTime()
	for b.Loop() {
		rows, err := pool.Query(ctx, `select `+pgrun.JobColumns+` from pgrun.jobs order by id`)
		require.NoError(b, err)
		jobs, err := pgrun.ScanJobs(rows)
		require.NoError(b, err)
		require.Len(b, jobs, 1000)
	}
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "client-ns/op")
}

// cpuTime is the CPU time this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
