package main

import (
	"os"

	"github.com/pgrun/pgrun/gpu"
)

// A steady-state bench's enqueuer and runner share this host's processors, and so
// does the server when it runs here too, as on a developer's machine or this
// project's. With nearly all of them busy, a latency tail is mostly time spent
// waiting for a core, which no claim path removes; the bench reports how busy the
// host was beside its figures so that such a tail is read as such.

// cpuSample is the host's processor time from /proc/stat (Linux), in clock ticks:
// busy is everything but idle and iowait. ok is false where there is no such file.
type cpuSample struct {
	busy, total uint64
	ok          bool
}

func readCPU() cpuSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	return parseCPU(b)
}

// parseCPU reads the aggregate "cpu" line of /proc/stat (gpu.ParseProcStat, the
// host telemetry's reading).
func parseCPU(stat []byte) cpuSample {
	busy, total, err := gpu.ParseProcStat(stat)
	if err != nil {
		return cpuSample{}
	}
	return cpuSample{busy: busy, total: total, ok: true}
}

// busyBetween is the fraction of the host's processor time that was busy from a to b,
// or -1 when it is not known.
func busyBetween(a, b cpuSample) float64 {
	if !a.ok || !b.ok || b.total <= a.total || b.busy < a.busy {
		return -1
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}
