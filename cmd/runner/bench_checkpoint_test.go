package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

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
	_, err = admin.Exec(ctx, "checkpoint")
	require.NoError(t, err)
	n, err := c.since(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(1), "a checkpoint taken inside the run is counted")
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
	out, err = c.run("bench", "--rate", "200", "--duration", "200ms", "--no-progress")
	require.NoError(t, err, out)
	require.Contains(t, out, "checkpoints     ")
}
