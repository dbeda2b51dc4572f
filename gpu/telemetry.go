package gpu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Sample is one reading of a host's hardware.
type Sample struct {
	CPUPct   float64  `json:"cpu_pct"`   // busy share of all CPUs since the previous sample
	MemUsed  int64    `json:"mem_used"`  // bytes (total minus available)
	MemTotal int64    `json:"mem_total"` // bytes
	GPUs     []Device `json:"gpus"`
	// Self is the sampling process's own share of CPU and memory (its cgroup v2 when
	// readable, else the process alone); nil where neither can be read.
	Self *Self `json:"self,omitempty"`
}

// Sampler reads CPU and memory from /proc, its own process's share from its cgroup
// v2, and the GPUs from the vendor tools.
type Sampler struct {
	// ProcRoot is where /proc is read from (tests point it at recorded files).
	ProcRoot string
	// CgroupRoot is where the cgroup v2 hierarchy is mounted; default: as
	// ProcRoot/self/mountinfo says, else /sys/fs/cgroup.
	CgroupRoot string
	// Probe lists devices (default Probe).
	Probe func(context.Context) ([]Device, error)

	mu        sync.Mutex
	prevBusy  uint64
	prevTotal uint64
	havePrev  bool
	self      *selfReader
}

// Sample reads the hardware now. CPU% is measured between consecutive calls; the
// first call reports 0.
func (s *Sampler) Sample(ctx context.Context) (Sample, error) {
	root := s.ProcRoot
	if root == "" {
		root = "/proc"
	}
	var out Sample
	busy, total, err := readCPU(filepath.Join(root, "stat"))
	if err != nil {
		return out, err
	}
	s.mu.Lock()
	if s.havePrev && total > s.prevTotal {
		out.CPUPct = 100 * float64(busy-s.prevBusy) / float64(total-s.prevTotal)
	}
	if s.self == nil {
		s.self = &selfReader{procRoot: root, cgroupRoot: s.CgroupRoot}
	}
	out.Self = s.self.read(total, s.prevTotal, s.havePrev)
	s.prevBusy, s.prevTotal, s.havePrev = busy, total, true
	s.mu.Unlock()
	if out.MemTotal, out.MemUsed, err = readMem(filepath.Join(root, "meminfo")); err != nil {
		return out, err
	}
	probe := s.Probe
	if probe == nil {
		probe = Probe
	}
	if out.GPUs, err = probe(ctx); err != nil {
		return out, err
	}
	if out.GPUs == nil {
		out.GPUs = []Device{}
	}
	return out, nil
}

// readCPU returns busy and total jiffies from the "cpu" line of /proc/stat.
func readCPU(path string) (busy, total uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu: %w", err)
	}
	if busy, total, err = ParseProcStat(b); err != nil {
		return 0, 0, fmt.Errorf("%w (%s)", err, path)
	}
	return busy, total, nil
}

// ParseProcStat reads the aggregate "cpu" line of a /proc/stat and returns the
// processor time in clock ticks, busy and in all: user nice system idle iowait irq
// softirq steal, of which idle and iowait are not busy. guest and guest_nice follow
// them, and are left out: user and nice already count them.
func ParseProcStat(stat []byte) (busy, total uint64, err error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("cpu: unexpected first line %q", line)
	}
	for i, x := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cpu: %q: %w", x, err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// readMem returns MemTotal and MemTotal-MemAvailable from /proc/meminfo, in bytes.
func readMem(path string) (total, used int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("memory: %w", err)
	}
	defer f.Close()
	vals := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err == nil {
			vals[k] = n * 1024 // kB
		}
	}
	if vals["MemTotal"] == 0 {
		return 0, 0, fmt.Errorf("memory: no MemTotal in %s", path)
	}
	return vals["MemTotal"], vals["MemTotal"] - vals["MemAvailable"], sc.Err()
}
