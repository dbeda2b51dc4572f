package gpu

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Self is a sampling process's own share of its host: the CPU and memory of its
// cgroup v2 (the systemd service, container or pod it runs in) when the cgroup's
// files are readable, else of the process alone. The rest of the host is the
// sample's figures minus these (see [Sample.Others]).
type Self struct {
	// CPUPct is the share of all the host's CPUs used since the previous sample,
	// on the same scale as Sample.CPUPct.
	CPUPct float64 `json:"cpu_pct"`
	// MemUsed is in bytes: the cgroup's memory.current (page cache included, as the
	// kernel charges it), or the process's resident set.
	MemUsed int64 `json:"mem_used"`
	// Source is "cgroup" or "process".
	Source string `json:"source"`
	// Cgroup is the cgroup's path (as in /proc/self/cgroup) when Source is "cgroup".
	Cgroup string `json:"cgroup,omitempty"`
}

// Others returns the CPU and memory of the host outside the sampling process's own
// share (Self), never below zero; the whole host when Self is unknown.
func (s Sample) Others() (cpuPct float64, memUsed int64) {
	if s.Self == nil {
		return s.CPUPct, s.MemUsed
	}
	return max(0, s.CPUPct-s.Self.CPUPct), max(0, s.MemUsed-s.Self.MemUsed)
}

// userHZ is the unit of the kernel's CPU times in /proc (clock ticks a second):
// 100 on every Linux architecture Go supports, whatever the kernel's own HZ.
const userHZ = 100

// selfReader reads the sampling process's own CPU and memory. The cgroup is
// resolved once; which source works is decided at the first read and kept, so that
// consecutive CPU readings come from the same counter.
type selfReader struct {
	procRoot   string
	cgroupRoot string // where cgroup2 is mounted; "" finds it in mountinfo

	resolved bool
	dir      string // the cgroup's directory, "" to read the process
	path     string // the cgroup's path
	prevCPU  float64
	havePrev bool
}

// read returns the process's share, given the host's total CPU time (jiffies of
// /proc/stat) at this sample and at the previous one; nil where nothing is readable.
func (r *selfReader) read(total, prevTotal uint64, havePrevTotal bool) *Self {
	if !r.resolved {
		r.resolved = true
		r.dir, r.path = r.cgroupDir()
	}
	out := &Self{Source: "process"}
	var cpu float64 // seconds
	var err error
	if r.dir != "" {
		out.Source, out.Cgroup = "cgroup", r.path
		cpu, out.MemUsed, err = readCgroup(r.dir)
	} else {
		cpu, out.MemUsed, err = readProcessSelf(r.procRoot)
	}
	if err != nil {
		return nil // not readable here: the sample goes without it
	}
	if r.havePrev && havePrevTotal && total > prevTotal && cpu >= r.prevCPU {
		out.CPUPct = 100 * (cpu - r.prevCPU) * userHZ / float64(total-prevTotal)
	}
	r.prevCPU, r.havePrev = cpu, true
	return out
}

// cgroupDir finds the directory of this process's cgroup v2, or "" when it cannot be
// read or is the host's root cgroup (whose figures are the whole host's: no
// memory.current there).
func (r *selfReader) cgroupDir() (dir, path string) {
	b, err := os.ReadFile(filepath.Join(r.procRoot, "self", "cgroup"))
	if err != nil {
		return "", ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
			break
		}
	}
	if path == "" {
		return "", "" // cgroup v1 only
	}
	mount, root := r.cgroupRoot, "/"
	if mount == "" {
		mount, root = cgroup2Mount(filepath.Join(r.procRoot, "self", "mountinfo"))
	}
	if mount == "" {
		return "", ""
	}
	// A mount of a cgroup below the namespace's root (a container's view of the
	// host's hierarchy) holds the paths under that root.
	rel, ok := strings.CutPrefix(path, strings.TrimSuffix(root, "/"))
	if !ok {
		return "", ""
	}
	dir = filepath.Join(mount, rel)
	if _, _, err := readCgroup(dir); err != nil {
		return "", ""
	}
	return dir, path
}

// cgroup2Mount returns the mount point and root of the cgroup2 file system from a
// mountinfo file, or "" (then /sys/fs/cgroup is tried, the usual place).
func cgroup2Mount(mountinfo string) (mount, root string) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "/sys/fs/cgroup", "/"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mount-point options ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if !ok || len(fields) < 5 || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		return fields[4], fields[3]
	}
	return "/sys/fs/cgroup", "/"
}

// readCgroup returns a cgroup's CPU time in seconds (cpu.stat usage_usec) and its
// memory.current in bytes.
func readCgroup(dir string) (cpu float64, mem int64, err error) {
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	usec := int64(-1)
	for line := range strings.SplitSeq(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			if usec, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return 0, 0, fmt.Errorf("cgroup cpu.stat: %w", err)
			}
		}
	}
	if usec < 0 {
		return 0, 0, fmt.Errorf("cgroup: no usage_usec in %s/cpu.stat", dir)
	}
	m, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, 0, err
	}
	if mem, err = strconv.ParseInt(string(bytes.TrimSpace(m)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("cgroup memory.current: %w", err)
	}
	return float64(usec) / 1e6, mem, nil
}

// readProcessSelf returns the process's CPU time in seconds (utime + stime of
// /proc/self/stat) and its resident set in bytes (VmRSS of /proc/self/status).
func readProcessSelf(procRoot string) (cpu float64, mem int64, err error) {
	stat, err := os.ReadFile(filepath.Join(procRoot, "self", "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields are counted
	// from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, 0, fmt.Errorf("process: unexpected %s/self/stat", procRoot)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("process: unexpected times in %s/self/stat", procRoot)
	}
	status, err := os.ReadFile(filepath.Join(procRoot, "self", "status"))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("process: VmRSS: %w", err)
			}
			return float64(utime+stime) / userHZ, kb * 1024, nil
		}
	}
	return 0, 0, fmt.Errorf("process: no VmRSS in %s/self/status", procRoot)
}
