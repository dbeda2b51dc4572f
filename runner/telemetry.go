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

// telemetryWriteTimeout bounds one record_hw call.
const telemetryWriteTimeout = 2 * time.Second

// telemetryLoop records a hardware sample of the host every TelemetryInterval
// (pgrun.record_hw keeps an hour per host and notifies pgrun_hw), with the runner's
// own share of it (its cgroup v2, or its process) apart from the rest.
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
		self := r.selfJSON(sample.Self)
		began := time.Now()
		// Not cancelled by a shutdown: a write cancelled on its way can still commit
		// on the server after Run has returned (a sample that lands once the runner is
		// gone). Run waits for this loop, so a shutdown waits for the write instead,
		// at most telemetryWriteTimeout.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryWriteTimeout)
		_, err = r.pool.Exec(wctx, sqlapi.RecordHW, r.cfg.Host, sample.CPUPct, sample.MemUsed, sample.MemTotal, gpus, self)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !r.down.fail("record_hw", err) {
				r.log.Warn("recording hardware sample failed", "err", err)
			}
		} else {
			r.down.ok(began)
		}
	}
}

// selfJSON is the runner's own share for record_hw's self argument, naming the worker
// (several runners may share a host); nil when it could not be read.
func (r *Runner) selfJSON(s *gpu.Self) []byte {
	if s == nil {
		return nil
	}
	b, _ := json.Marshal(struct {
		Worker string `json:"worker"`
		*gpu.Self
	}{r.cfg.WorkerID, s})
	return b
}
