// Package riverbench holds the River client settings every River burn-down of this
// module runs with (bench's side-by-side rounds and cmd/riverwork's processes), so
// that the two cannot drift apart.
package riverbench

import (
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// River's fetch settings in its own `river bench` (cmd/river/riverbench): its authors
// found them far better for throughput than the client defaults (100 ms cooldown, 1 s
// poll), so the comparison gives River its best-known settings.
const (
	FetchCooldown     = 2 * time.Millisecond
	FetchPollInterval = 20 * time.Millisecond
)

// Config is the client configuration of a burn-down: the default queue with
// maxWorkers workers (2,000 in `river bench`), the fetch settings above, and the
// given workers and logger.
func Config(maxWorkers int, workers *river.Workers, logger *slog.Logger) *river.Config {
	return &river.Config{
		FetchCooldown:     FetchCooldown,
		FetchPollInterval: FetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	}
}
