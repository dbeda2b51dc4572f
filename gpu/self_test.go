package gpu

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// copyTree copies testdata/<from> into a new temporary directory and returns it, so a
// test can change the files between samples.
func copyTree(t *testing.T, from string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", from)
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
	return dst
}

// fakeProc is a /proc with the host's stat and meminfo and this process's self/
// files, its cgroup being cgroup.
func fakeProc(t *testing.T, cgroup string) string {
	t.Helper()
	root := copyTree(t, "proc")
	self := copyTree(t, "proc-self")
	require.NoError(t, os.Rename(filepath.Join(self, "self"), filepath.Join(root, "self")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "self", "cgroup"), []byte("0::"+cgroup+"\n"), 0o644))
	return root
}

func noDevices(context.Context) ([]Device, error) { return nil, nil }

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// The sampler reads its own cgroup's CPU time and memory.current and reports them
// apart from the host's, on the host's scale (a share of all its CPUs).
func TestSamplerSplitsItsCgroupFromTheHost(t *testing.T) {
	proc := fakeProc(t, "/system.slice/pgrun.service")
	cg := copyTree(t, "cgroup")
	s := &Sampler{ProcRoot: proc, CgroupRoot: cg, Probe: noDevices}
	first, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.Equal(t, &Self{Source: "cgroup", Cgroup: "/system.slice/pgrun.service", MemUsed: 2 << 30}, first.Self)

	// 1000 more jiffies on the host, 400 of them busy (40%); the cgroup used 2.5 s of
	// CPU, 250 jiffies: 25% of the host, the other 15% is everything else.
	write(t, filepath.Join(proc, "stat"), "cpu  1200 0 1200 8600 0 0 0 0 0 0\n")
	write(t, filepath.Join(cg, "system.slice/pgrun.service/cpu.stat"), "usage_usec 7500000\n")
	write(t, filepath.Join(cg, "system.slice/pgrun.service/memory.current"), "1073741824\n")
	second, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.InDelta(t, 40, second.CPUPct, 0.01)
	require.InDelta(t, 25, second.Self.CPUPct, 0.01)
	require.EqualValues(t, 1<<30, second.Self.MemUsed)
	cpu, mem := second.Others()
	require.InDelta(t, 15, cpu, 0.01)
	require.EqualValues(t, 12000000*1024-(1<<30), mem)
}

// Where the cgroup is the host's root (no memory.current: its figures would be the
// whole host's) or unreadable, the sampler falls back to the process's own figures
// without an error; where neither is readable, the sample has no Self.
func TestSamplerFallsBackQuietly(t *testing.T) {
	proc := fakeProc(t, "/")
	s := &Sampler{ProcRoot: proc, CgroupRoot: copyTree(t, "cgroup"), Probe: noDevices}
	first, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.Equal(t, &Self{Source: "process", MemUsed: 65536 * 1024}, first.Self)

	// utime+stime 200 -> 300 jiffies over 1000 of the host: 10%.
	write(t, filepath.Join(proc, "self", "stat"),
		"4242 (runner (pgrun)) S 1 4242 4242 0 -1 4194560 100 0 0 0 220 80 0 0 20 0 8 0 100 1000000 500 1\n")
	write(t, filepath.Join(proc, "stat"), "cpu  1200 0 1200 8600 0 0 0 0 0 0\n")
	second, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.InDelta(t, 10, second.Self.CPUPct, 0.01)

	// A cgroup directory that does not exist: the process again.
	s = &Sampler{ProcRoot: fakeProc(t, "/gone.scope"), CgroupRoot: t.TempDir(), Probe: noDevices}
	got, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.Equal(t, "process", got.Self.Source)

	// Nothing of the process readable: no Self, and no error.
	s = &Sampler{ProcRoot: copyTree(t, "proc"), Probe: noDevices}
	got, err = s.Sample(context.Background())
	require.NoError(t, err)
	require.Nil(t, got.Self)
	cpu, mem := got.Others()
	require.Equal(t, got.CPUPct, cpu)
	require.Equal(t, got.MemUsed, mem)
}

// On the machine running the test, the sampler finds its cgroup v2 where the kernel
// exposes one with its memory (a systemd service, a container), else the process.
func TestSamplerReadsItsRealShare(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s := &Sampler{Probe: noDevices}
	got, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.NotNil(t, got.Self)
	require.Positive(t, got.Self.MemUsed)
	require.Contains(t, []string{"cgroup", "process"}, got.Self.Source)
	if got.Self.Source == "cgroup" {
		require.NotEmpty(t, got.Self.Cgroup)
		require.LessOrEqual(t, got.Self.MemUsed, got.MemTotal)
	}
	t.Logf("own share read from the %s %s: %d bytes", got.Self.Source, got.Self.Cgroup, got.Self.MemUsed)
}
