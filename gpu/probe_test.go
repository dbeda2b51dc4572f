package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTool puts an executable named name on a fresh PATH that prints file (or fails
// with status 3 when file is "").
func fakeTool(t *testing.T, dir, name, file string) {
	t.Helper()
	script := "#!/bin/sh\nexit 3\n"
	if file != "" {
		abs, err := filepath.Abs(file)
		require.NoError(t, err)
		script = "#!/bin/sh\ncat " + abs + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755))
}

func TestProbeReadsRecordedOutputsThroughFakeTools(t *testing.T) {
	dir := t.TempDir()
	fakeTool(t, dir, "nvidia-smi", "testdata/nvidia-smi.csv")
	fakeTool(t, dir, "rocm-smi", "testdata/rocm-smi.json")
	t.Setenv("PATH", dir+":/usr/bin:/bin")
	devices, err := Probe(context.Background())
	require.NoError(t, err)
	require.Equal(t, []Device{
		{Index: 0, Name: "NVIDIA A100-SXM4-40GB", Vendor: "nvidia", MemoryTotal: 40960 << 20, MemoryUsed: 1024 << 20, Utilization: 37},
		{Index: 1, Name: "NVIDIA A100-SXM4-40GB", Vendor: "nvidia", MemoryTotal: 40960 << 20, MemoryUsed: 30720 << 20, Utilization: 99},
		{Index: 0, Name: "AMD Instinct MI210", Vendor: "amd", MemoryTotal: 68702699520, MemoryUsed: 10485760, Utilization: 12},
	}, devices)
}

func TestProbeWithoutToolsFindsNothing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	devices, err := Probe(context.Background())
	require.NoError(t, err)
	require.Empty(t, devices)
}

func TestProbeReportsAFailingTool(t *testing.T) {
	dir := t.TempDir()
	fakeTool(t, dir, "nvidia-smi", "")
	t.Setenv("PATH", dir)
	_, err := Probe(context.Background())
	require.ErrorContains(t, err, "nvidia-smi")
}

func TestParseRejectsGarbage(t *testing.T) {
	_, err := ParseNvidiaSMI([]byte("0, A100, lots, 1, 2\n"))
	require.ErrorContains(t, err, "lots")
	_, err = ParseROCmSMI([]byte("not json"))
	require.Error(t, err)
}
