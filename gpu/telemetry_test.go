package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSamplerReadsProcAndDevices(t *testing.T) {
	root := t.TempDir()
	copyFile := func(name string) {
		b, err := os.ReadFile(filepath.Join("testdata/proc", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, name), b, 0o644))
	}
	copyFile("stat")
	copyFile("meminfo")
	s := &Sampler{ProcRoot: root, Probe: func(context.Context) ([]Device, error) {
		return []Device{{Index: 0, Name: "fake", Utilization: 50}}, nil
	}}
	first, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.Zero(t, first.CPUPct, "no previous sample")
	require.EqualValues(t, 16000000*1024, first.MemTotal)
	require.EqualValues(t, 12000000*1024, first.MemUsed)
	require.Len(t, first.GPUs, 1)

	// 1000 more jiffies, 250 of them busy: 25%.
	require.NoError(t, os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1200 0 1050 8750 0 0 0 0 0 0\n"), 0o644))
	second, err := s.Sample(context.Background())
	require.NoError(t, err)
	require.InDelta(t, 25.0, second.CPUPct, 0.01)

	_, err = (&Sampler{ProcRoot: t.TempDir()}).Sample(context.Background())
	require.ErrorContains(t, err, "cpu")
}
