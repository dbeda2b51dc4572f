package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHostCPUBusyFromProcStat(t *testing.T) {
	t.Parallel()
	a := parseCPU([]byte("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\n"))
	require.True(t, a.ok)
	require.Equal(t, uint64(150), a.busy)
	require.Equal(t, uint64(1000), a.total)
	// 300 ticks later: 240 busy (user, system, softirq, steal), 60 idle or iowait;
	// guest time, already in user, is not counted twice.
	b := parseCPU([]byte("cpu  300 0 70 840 70 0 10 10 99 0\n"))
	require.InDelta(t, 0.8, busyBetween(a, b), 1e-9)

	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5", "cpu 1 2"} {
		require.False(t, parseCPU([]byte(bad)).ok, bad)
	}
	require.Equal(t, -1.0, busyBetween(a, cpuSample{}), "unknown when a sample is missing")
	require.Equal(t, -1.0, busyBetween(b, a), "unknown when time went backwards")
	require.Equal(t, -1.0, busyBetween(a, a), "unknown over no time")

	if runtime.GOOS == "linux" {
		require.True(t, readCPU().ok, "/proc/stat is read on Linux")
	}
}
