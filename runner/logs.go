package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// LogOutcomes returns hooks that log one line per attempt that ended in the runner,
// at level: "job finished" with the job's id, kind, queue and attempt, how long the
// handler ran (duration) and waited to start (wait), and the outcome (see [Outcome]).
// A report that could not be made is logged at error with its error. Failures are
// also logged by the runner itself when they happen (at warn, with the error), so a
// log at warn keeps those and drops the line per job. Nothing is built when the logger
// drops level.
//
//	cfg.Hooks = append(cfg.Hooks, runner.LogOutcomes(logger, slog.LevelInfo))
func LogOutcomes(logger *slog.Logger, level slog.Level) Hooks {
	return Hooks{OnOutcome: func(ev OutcomeEvent) {
		lvl := level
		if ev.Err != nil {
			lvl = max(lvl, slog.LevelError)
		}
		ctx := context.Background()
		if !logger.Enabled(ctx, lvl) {
			return
		}
		attrs := []slog.Attr{
			slog.Int64("job", ev.Job.ID),
			slog.String("kind", ev.Job.Kind),
			slog.String("queue", ev.Job.Queue),
			slog.Int("attempt", ev.Job.Attempt),
			slog.Duration("duration", ev.Run),
			slog.Duration("wait", ev.Wait),
			slog.String("outcome", string(ev.Outcome)),
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.String("report_err", ev.Err.Error()))
		}
		logger.LogAttrs(ctx, lvl, "job finished", attrs...)
	}}
}

// slotsByQueue describes the slots of each queue for the start line, "default=8
// images=gpu": a GPU queue without a worker count gets one slot per device, counted
// when the devices have been probed.
func (r *Runner) slotsByQueue() string {
	var b strings.Builder
	for i, name := range r.queueNames() {
		if i > 0 {
			b.WriteByte(' ')
		}
		q := r.cfg.Queues[name]
		if q.GPU && q.Workers == 0 {
			fmt.Fprintf(&b, "%s=gpu", name)
		} else {
			fmt.Fprintf(&b, "%s=%d", name, q.Workers)
		}
	}
	return b.String()
}
