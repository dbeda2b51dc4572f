package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// A checkpoint inside a timed run changes what it measures: after it, the first
// change to each page writes the whole page to the WAL, and its closing fsyncs
// compete with the commits'. On this project's machine one checkpoint inside a 10 s
// steady-state run took the start latency's p99 from 10 ms to 15–70 ms
// (docs/benchmarks.md). A run of the bench therefore starts from a fresh checkpoint,
// so that one requested by the WAL of earlier runs does not fall inside it by chance,
// and it reports how many checkpoints started while it was timed, so that a tail that
// includes one is read as such.

// checkpointCounter counts the checkpoints the server starts from a point on; known
// is false when the server keeps no count where the bench looks (it then reports -1).
type checkpointCounter struct {
	pool  *pgxpool.Pool
	start int64
	known bool
}

// freshCheckpoint asks the server for a checkpoint, saying on progress when the
// bench's role may not, and starts counting the checkpoints from there. The
// checkpointer publishes its count a moment after the CHECKPOINT command returns, so
// it waits (up to checkpointReportWait) for the count to move past the one read
// before: otherwise the fresh checkpoint would be counted as one inside the run.
func freshCheckpoint(ctx context.Context, pool *pgxpool.Pool, progress io.Writer) (*checkpointCounter, error) {
	c := &checkpointCounter{pool: pool}
	before, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	c.start, c.known = before, before >= 0
	if _, err := pool.Exec(ctx, sqlapi.BenchCheckpoint); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		fmt.Fprintf(progress, "bench: no checkpoint before the run (%v); a checkpoint may fall inside it\n", err)
		return c, nil
	}
	if !c.known {
		return c, nil
	}
	deadline := time.Now().Add(checkpointReportWait)
	for c.start == before && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if c.start, err = c.read(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkpointReportWait bounds how long freshCheckpoint waits for the checkpointer to
// publish its count.
const checkpointReportWait = 2 * time.Second

// since is how many checkpoints started since freshCheckpoint, -1 if not known.
func (c *checkpointCounter) since(ctx context.Context) (int64, error) {
	if !c.known {
		return -1, nil
	}
	n, err := c.read(ctx)
	if err != nil || n < 0 {
		return -1, err
	}
	return n - c.start, nil
}

func (c *checkpointCounter) read(ctx context.Context) (int64, error) {
	var n *int64
	if err := c.pool.QueryRow(ctx, sqlapi.BenchCheckpoints).Scan(&n); err != nil {
		return 0, fmt.Errorf("checkpoint count: %w", err)
	}
	if n == nil {
		return -1, nil
	}
	return *n, nil
}

// checkpointNote is the line that reports the checkpoints of a run.
func checkpointNote(n int64) string {
	switch {
	case n < 0:
		return "checkpoints     not known on this server"
	case n == 0:
		return "checkpoints     none during the run"
	default:
		return fmt.Sprintf("checkpoints     %d during the run (the figures above include the full-page writes and fsyncs)", n)
	}
}
