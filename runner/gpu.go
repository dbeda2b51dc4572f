package runner

import (
	"context"
	"time"

	"github.com/pgrun/pgrun/gpu"
)

// The runner sees the GPU runtime through two small interfaces, so that a program
// can bring its own model cache or device inventory (or a test a fixed one); the
// gpu package provides both (*gpu.Cache, gpu.Probe).

// ModelCache keeps models loaded between jobs; handlers reach it through
// [Job.UseModel]. *gpu.Cache is one. A cache that also has a
// Run(ctx, every time.Duration) method (as *gpu.Cache does, to unload idle models) is
// run every second while the runner runs.
type ModelCache interface {
	// Acquire returns model name, loading it if it is not resident, and holds it
	// (it is not evicted) until release is called.
	Acquire(ctx context.Context, name string) (m gpu.Model, release func(), err error)
	// Loaded lists the resident models, sorted: what the runner advertises to
	// claim_jobs and in its heartbeat as warm.
	Loaded() []string
}

// sweeper is a model cache that unloads idle models (as *gpu.Cache does) every
// interval until ctx is done.
type sweeper interface {
	Run(ctx context.Context, every time.Duration)
}

// DeviceLister lists the accelerators of the host: a GPU queue without a worker
// count gets one slot per device.
type DeviceLister interface {
	Devices(ctx context.Context) ([]gpu.Device, error)
}

// DeviceListerFunc adapts a function, such as gpu.Probe, to [DeviceLister].
type DeviceListerFunc func(ctx context.Context) ([]gpu.Device, error)

// Devices calls f.
func (f DeviceListerFunc) Devices(ctx context.Context) ([]gpu.Device, error) { return f(ctx) }

// ProbeDevices asks the vendor tools (nvidia-smi, rocm-smi) through gpu.Probe; it is
// the default Config.DeviceLister.
var ProbeDevices DeviceLister = DeviceListerFunc(gpu.Probe)

var (
	_ ModelCache = (*gpu.Cache)(nil)
	_ sweeper    = (*gpu.Cache)(nil)
)
