package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// DefaultTelemetryInterval is how often `runner work` samples its host unless told
// otherwise (a Config leaves sampling off): often enough to watch a GPU batch,
// rarely enough to cost nothing.
const DefaultTelemetryInterval = 5 * time.Second

// telemetryLoop records a hardware sample of the host every TelemetryInterval
// (pgrun.record_hw keeps an hour per host and notifies pgrun_hw).
func (r *Runner) telemetryLoop(ctx context.Context) {
	s := &gpu.Sampler{}
	t := time.NewTicker(r.cfg.TelemetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sample, err := s.Sample(ctx)
		if err != nil {
			r.log.Debug("hardware sample failed", "err", err)
			continue
		}
		gpus, _ := json.Marshal(sample.GPUs)
		began := time.Now()
		if _, err := r.pool.Exec(ctx, sqlapi.RecordHW, r.cfg.Host, sample.CPUPct, sample.MemUsed, sample.MemTotal, gpus); err != nil {
			if ctx.Err() == nil && !r.down.fail("record_hw", err) {
				r.log.Warn("recording hardware sample failed", "err", err)
			}
		} else {
			r.down.ok(began)
		}
	}
}
