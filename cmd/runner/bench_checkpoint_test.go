package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The bench starts from a fresh checkpoint and counts the ones that start inside the
// run, so that a tail stretched by one is reported as such.
func TestBenchCountsCheckpointsInsideTheRun(t *testing.T) {
	t.Parallel()
	// The server's admin: checkpoints and their count are the whole server's.
	admin := testdb.PoolFor(t, testdb.ServerURL())
	ctx := context.Background()
	var progress bytes.Buffer
	c, err := freshCheckpoint(ctx, admin, &progress)
	require.NoError(t, err)
	require.Empty(t, progress.String(), "the server's admin may checkpoint")
	n, err := c.since(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "the fresh checkpoint is not one inside the run")
	_, err = admin.Exec(ctx, "checkpoint")
	require.NoError(t, err)
	// The checkpointer publishes its count a moment after the command returns.
	require.Eventually(t, func() bool {
		n, err = c.since(ctx)
		return err == nil && n >= 1
	}, 10*time.Second, 10*time.Millisecond, "a checkpoint taken inside the run is counted")
	require.Contains(t, checkpointNote(n), "during the run")
	require.Equal(t, "checkpoints     none during the run", checkpointNote(0))
	require.Equal(t, "checkpoints     not known on this server", checkpointNote(-1))
}

// A role that may not checkpoint still runs the bench: it is told, and the count
// (pg_stat_bgwriter is readable by everyone) still works.
func TestBenchWithoutTheRightToCheckpointSaysSo(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	plain := testkit.AsRole(t, db, "")
	var progress bytes.Buffer
	c, err := freshCheckpoint(ctx, plain, &progress)
	require.NoError(t, err)
	require.Contains(t, progress.String(), "no checkpoint before the run")
	require.Contains(t, progress.String(), "a checkpoint may fall inside it")
	n, err := c.since(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(0))
}

// runner bench reports the count with its figures, in text and in JSON.
func TestBenchReportsCheckpoints(t *testing.T) {
	c, _ := newCLI(t)
	out, err := c.run("bench", "--jobs", "200", "--latency-jobs", "2", "--no-progress")
	require.NoError(t, err, out)
	require.Contains(t, out, "checkpoints     ")
	out, err = c.run("bench", "--jobs", "200", "--latency-jobs", "0", "--no-progress", "--json")
	require.NoError(t, err, out)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[bytes.IndexByte([]byte(out), '{'):]), &res), out)
	require.Contains(t, res, "checkpoints")
	require.GreaterOrEqual(t, res["checkpoints"].(float64), 0.0)
	out, err = c.run("bench", "--rate", "200", "--duration", "200ms", "--warmup", "0", "--no-progress")
	require.NoError(t, err, out)
	require.Contains(t, out, "checkpoints     ")
	require.Contains(t, out, "round trips     ")
	require.Contains(t, out, "warm-up         0s not counted")
	if runtime.GOOS == "linux" {
		require.Contains(t, out, "host CPU        ")
	}

	// A second of warm-up at 500 jobs/s, then 200 ms measured: about 100 jobs are
	// counted of about 600 enqueued (a stall of half a second still fits).
	out, err = c.run("bench", "--rate", "500", "--duration", "200ms", "--warmup", "1s", "--no-progress", "--json")
	require.NoError(t, err, out)
	var steady steadyResult
	require.NoError(t, json.Unmarshal([]byte(out[bytes.IndexByte([]byte(out), '{'):]), &steady), out)
	require.Positive(t, steady.Jobs)
	require.Less(t, steady.Jobs, 350, "the warm-up's jobs are not counted")
	require.Equal(t, 1.0, steady.WarmupS)
	require.Positive(t, steady.WholeRunP99MS)
	if runtime.GOOS == "linux" {
		require.True(t, steady.HostCPUBusy > 0 && steady.HostCPUBusy <= 1, "host busy %v", steady.HostCPUBusy)
	}
	require.GreaterOrEqual(t, steady.AvgClaim, 1.0, "every job was claimed by some call")
	require.GreaterOrEqual(t, steady.AvgComplete, 1.0)
	require.GreaterOrEqual(t, steady.CommitP99MS, steady.CommitP50MS, "commit-to-start found each job's enqueue")
	require.GreaterOrEqual(t, steady.Checkpoints, int64(0))
}

// commitToStart pairs each started job with its enqueue's return, by id, whatever
// order the statements' ids were recorded in.
func TestBenchCommitToStartPairsJobsByID(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	var ids []int64
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select id from pgrun.enqueue_batch(array['noop','noop','noop'], queues => array['b','b','b'])`)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	}))
	require.Len(t, ids, 3)
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	_, err := db.Pool.Exec(ctx, `update pgrun.jobs set started_at = $1 where queue = 'b'`, base)
	require.NoError(t, err)
	// Started 1, 2 and 3 ms after their enqueues returned; recorded out of order.
	committed := []committedAt{
		{id: ids[2], at: base.Add(-3 * time.Millisecond)},
		{id: ids[0], at: base.Add(-1 * time.Millisecond)},
		{id: ids[1], at: base.Add(-2 * time.Millisecond)},
		{id: ids[2] + 1000, at: base}, // not in the queue: ignored
	}
	p50, p99, _, err := commitToStart(ctx, db.Pool, "b", committed)
	require.NoError(t, err)
	require.Equal(t, 2.0, p50)
	require.Equal(t, 2.0, p99, "p99 of three is the second (nearest rank below)")
}

// A steady-state bench with a bad rate, duration or warm-up exits with one line before
// it connects.
func TestBenchRejectsBadSteadyFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--rate", "-1"}, {"--rate", "2000000"}, {"--rate", "100", "--duration", "0s"},
		{"--rate", "100", "--warmup", "-1s"}, {"--rate", "100", "--warmup", "2h"},
	} {
		code, stderr := stderrOf(append([]string{"bench", "--database-url", "postgres://127.0.0.1:1/none"}, args...)...)
		requireOneLineError(t, code, stderr, "--rate must be 0 to 1000000 jobs/s, --duration positive and --warmup 0 to 1h")
	}
}
