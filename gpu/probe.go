// Package gpu holds what GPU work needs on a runner: the device probe, a warm model
// cache with per-device memory budgets, and hardware telemetry. Nothing here needs a
// GPU: without one the probe finds no devices and models run on the CPU.
package gpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Device is one accelerator as the vendor tool reports it.
type Device struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	Vendor      string `json:"vendor"`       // nvidia or amd
	MemoryTotal int64  `json:"memory_total"` // bytes
	MemoryUsed  int64  `json:"memory_used"`  // bytes
	Utilization int    `json:"utilization"`  // percent
}

// nvidiaQuery is what Probe asks nvidia-smi for.
var nvidiaQuery = []string{"--query-gpu=index,name,memory.total,memory.used,utilization.gpu", "--format=csv,noheader,nounits"}

// Probe lists the devices nvidia-smi and rocm-smi report. A tool that is not
// installed contributes no devices and no error; a tool that runs but fails, or
// prints what cannot be parsed, is an error.
func Probe(ctx context.Context) ([]Device, error) {
	var devices []Device
	if out, err := run(ctx, "nvidia-smi", nvidiaQuery...); err != nil {
		if !errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("nvidia-smi: %w", err)
		}
	} else {
		d, err := ParseNvidiaSMI(out)
		if err != nil {
			return nil, err
		}
		devices = append(devices, d...)
	}
	if out, err := run(ctx, "rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuse", "--json"); err != nil {
		if !errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("rocm-smi: %w", err)
		}
	} else {
		d, err := ParseROCmSMI(out)
		if err != nil {
			return nil, err
		}
		devices = append(devices, d...)
	}
	return devices, nil
}

func run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(tool)
	if err != nil {
		return nil, exec.ErrNotFound
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ParseNvidiaSMI reads `nvidia-smi --query-gpu=index,name,memory.total,memory.used,
// utilization.gpu --format=csv,noheader,nounits` (memory in MiB).
func ParseNvidiaSMI(out []byte) ([]Device, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi output: %w", err)
	}
	devices := make([]Device, 0, len(rows))
	for _, row := range rows {
		if len(row) != 5 {
			return nil, fmt.Errorf("nvidia-smi output: want 5 fields, got %d in %q", len(row), strings.Join(row, ","))
		}
		idx, err1 := strconv.Atoi(strings.TrimSpace(row[0]))
		total, err2 := strconv.ParseInt(strings.TrimSpace(row[2]), 10, 64)
		used, err3 := strconv.ParseInt(strings.TrimSpace(row[3]), 10, 64)
		util, err4 := strconv.Atoi(strings.TrimSpace(row[4]))
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("nvidia-smi output %q: %w", strings.Join(row, ","), err)
		}
		devices = append(devices, Device{Index: idx, Name: strings.TrimSpace(row[1]), Vendor: "nvidia",
			MemoryTotal: total << 20, MemoryUsed: used << 20, Utilization: util})
	}
	return devices, nil
}

// ParseROCmSMI reads `rocm-smi --showproductname --showmeminfo vram --showuse --json`:
// an object keyed "card0", "card1", ... (memory in bytes).
func ParseROCmSMI(out []byte) ([]Device, error) {
	var cards map[string]map[string]string
	if err := json.Unmarshal(out, &cards); err != nil {
		return nil, fmt.Errorf("rocm-smi output: %w", err)
	}
	var devices []Device
	for key, f := range cards {
		if !strings.HasPrefix(key, "card") {
			continue // "system" and similar
		}
		idx, err := strconv.Atoi(strings.TrimPrefix(key, "card"))
		if err != nil {
			return nil, fmt.Errorf("rocm-smi output: card key %q", key)
		}
		total, err1 := strconv.ParseInt(f["VRAM Total Memory (B)"], 10, 64)
		used, err2 := strconv.ParseInt(f["VRAM Total Used Memory (B)"], 10, 64)
		util, err3 := strconv.Atoi(f["GPU use (%)"])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("rocm-smi output for %s: %w", key, err)
		}
		name := f["Card series"]
		if name == "" {
			name = f["Card model"]
		}
		devices = append(devices, Device{Index: idx, Name: name, Vendor: "amd", MemoryTotal: total, MemoryUsed: used, Utilization: util})
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i].Index < devices[j].Index })
	return devices, nil
}
