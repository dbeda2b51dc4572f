package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
)

// cli runs the command line against a database and returns stdout, stderr-style
// error text and whether it succeeded.
type cli struct {
	t   *testing.T
	url string
}

func newCLI(t *testing.T) (*cli, *pgxpool.Pool) {
	t.Parallel()
	url := testdb.URL(t)
	return &cli{t: t, url: url}, testdb.PoolFor(t, url)
}

func (c *cli) run(args ...string) (string, error) {
	c.t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--database-url", c.url))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func TestEnqueueThenJobShowsIt(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("enqueue", "echo", `{"hello": "world"}`, "--queue", "images", "--priority", "3")
	require.NoError(t, err)
	require.Equal(t, "job 1 queued (echo, queue images)\n", out)
	out, err = c.run("job", "1")
	require.NoError(t, err)
	require.Contains(t, out, "queued")
	require.Contains(t, out, `{"hello":"world"}`)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.jobs where queue = 'images' and priority = 3`))

	out, err = c.run("enqueue", "noop", "--count", "5")
	require.NoError(t, err)
	require.Equal(t, "5 jobs enqueued (ids 2..6, queue default)\n", out)
}

func TestBadInputWritesNothing(t *testing.T) {
	c, pool := newCLI(t)
	for _, args := range [][]string{
		{"enqueue", "echo", `[1, 2]`},
		{"enqueue", "echo", `{"broken": `},
		{"enqueue", "echo", "--queue", "Bad Queue"},
		{"enqueue", "echo", "--priority", "-1"},
		{"enqueue", "echo", "--delay", "-5s"},
		{"enqueue", "echo", "--run-at", "tomorrow"},
	} {
		_, err := c.run(args...)
		require.Error(t, err, "%v", args)
		require.NotContains(t, oneLine(err), "\n")
	}
	require.Zero(t, count(t, pool, `select count(*) from pgrun.jobs`))
	_, err := c.run("enqueue", "echo", "--queue", "Bad Queue")
	require.ErrorContains(t, err, "queue name 'Bad Queue' is not valid")
	require.Contains(t, oneLine(err), "hint:")
}

func TestCancelRetryAndJobs(t *testing.T) {
	c, pool := newCLI(t)
	_, err := c.run("enqueue", "sleep", `{"ms": 1}`)
	require.NoError(t, err)
	out, err := c.run("cancel", "1", "--reason", "operator said so")
	require.NoError(t, err)
	require.Equal(t, "job 1 cancelled (was queued)\n", out)
	_, err = c.run("cancel", "1")
	require.EqualError(t, err, "job 1 is cancelled, so it cannot be cancelled")

	out, err = c.run("jobs", "--state", "cancelled")
	require.NoError(t, err)
	require.Contains(t, out, "operator said so")

	out, err = c.run("retry", "1")
	require.NoError(t, err)
	require.Equal(t, "job 1 queued again\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.jobs where status = 'queued' and failures = 0`))
	_, err = c.run("retry", "1")
	require.EqualError(t, err, "job 1 is queued, so it cannot be queued again")

	_, err = c.run("cancel", "42")
	require.EqualError(t, err, "job 42 does not exist")
	_, err = c.run("job", "abc")
	require.EqualError(t, err, `job id "abc" is not a positive whole number`)
	_, err = c.run("jobs", "--state", "lost")
	require.ErrorContains(t, err, `--state "lost" is not one of`)
}

func TestStatusAndMigrateVersion(t *testing.T) {
	c, _ := newCLI(t)
	_, err := c.run("enqueue", "noop", "--queue", "reports")
	require.NoError(t, err)
	out, err := c.run("status")
	require.NoError(t, err)
	require.Contains(t, out, "reports")
	require.Contains(t, out, "(no workers registered)")
	out, err = c.run("status", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"queue": "reports"`)

	out, err = c.run("migrate", "version")
	require.NoError(t, err)
	latest := pgrun.LatestVersion()
	require.Equal(t, fmt.Sprintf("schema version %d (latest %d)\n", latest, latest), out)
	out, err = c.run("migrate", "up")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, fmt.Sprintf("schema pgrun at version %d (was %d)", latest, latest)), out)
}

func TestWorkRejectsBadQueueSpecs(t *testing.T) {
	c, _ := newCLI(t)
	for spec, want := range map[string]string{
		"default":       `--queues part "default" is not name=N`,
		"default=0":     `worker count "0" of queue default`,
		"Images=2":      `queue name "Images" is not valid`,
		"a=1,a=2":       "queue a is given twice",
		"default=eight": `worker count "eight"`,
	} {
		_, err := c.run("work", "--queues", spec)
		require.ErrorContains(t, err, want, spec)
	}
}

func TestUnknownCommandAndFlag(t *testing.T) {
	c, _ := newCLI(t)
	_, err := c.run("frobnicate")
	require.ErrorContains(t, err, `unknown command "frobnicate"`)
	_, err = c.run("status", "--colour")
	require.ErrorContains(t, err, "unknown flag: --colour")
	require.Equal(t, 1, run([]string{"job", "abc"}))
}

func TestWorkflowCommands(t *testing.T) {
	c, _ := newCLI(t)
	dir := t.TempDir()
	file := dir + "/ingest.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"nodes": [
		{"name": "fetch", "kind": "echo"},
		{"name": "approve", "input": true, "deps": ["fetch"]},
		{"name": "report", "kind": "echo", "deps": ["approve"]}]}`), 0o600))
	out, err := c.run("workflow", "define", file)
	require.NoError(t, err)
	require.Equal(t, "workflow ingest version 1\n", out)
	out, err = c.run("workflow", "start", "ingest", `{"url": "x"}`)
	require.NoError(t, err)
	require.Equal(t, "run 1 of ingest v1 running\n", out)
	out, err = c.run("workflow", "status", "1")
	require.NoError(t, err)
	require.Contains(t, out, "[ ] fetch")
	require.Contains(t, out, "pending (1 deps left)")
	require.Contains(t, out, "<- approve")
	out, err = c.run("workflow", "input", "1", "approve", `{"ok": true}`)
	require.NoError(t, err)
	require.Equal(t, "input kept: node approve of run 1 will take it when reached\n", out)
	out, err = c.run("workflow", "cancel", "1")
	require.NoError(t, err)
	require.Equal(t, "run 1 cancelled\n", out)
	_, err = c.run("workflow", "cancel", "1")
	require.EqualError(t, err, "run 1 already ended cancelled")
	_, err = c.run("workflow", "status", "7")
	require.EqualError(t, err, "run 7 does not exist")

	bad := dir + "/bad.json"
	require.NoError(t, os.WriteFile(bad, []byte(`{"nodes": [{"name": "a", "kind": "x", "deps": ["a"]}]}`), 0o600))
	_, err = c.run("workflow", "define", bad)
	require.ErrorContains(t, err, "node a is on a dependency cycle")
}

func TestOperationsCommands(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("schedule", "set", "tick", "@every 30s", "noop", `{"a": 1}`, "--queue", "cron")
	require.NoError(t, err)
	require.Contains(t, out, "schedule tick set; next fire")
	out, err = c.run("schedule", "list")
	require.NoError(t, err)
	require.Contains(t, out, "tick")
	require.Contains(t, out, "@every 30s")
	_, err = c.run("schedule", "set", "bad", "61 * * * *", "noop")
	require.ErrorContains(t, err, "cron minute field '61' is out of range")
	out, err = c.run("schedule", "rm", "tick")
	require.NoError(t, err)
	require.Equal(t, "schedule tick removed\n", out)
	_, err = c.run("schedule", "rm", "tick")
	require.ErrorContains(t, err, "schedule 'tick' does not exist")

	out, err = c.run("queue", "pause", "images")
	require.NoError(t, err)
	require.Equal(t, "queue images paused\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.queues where name = 'images' and paused`))
	out, err = c.run("queue", "resume", "images")
	require.NoError(t, err)
	require.Equal(t, "queue images running\n", out)

	out, err = c.run("control", "box-1", "*", "drain")
	require.NoError(t, err)
	require.Equal(t, "host box-1 queue *: drain\n", out)
	_, err = c.run("control", "box-1", "*", "sideways")
	require.ErrorContains(t, err, "worker control mode 'sideways' is not valid")

	for range 3 {
		_, err := c.run("enqueue", "resize", "--queue", "images", "--max-attempts", "1")
		require.NoError(t, err)
	}
	_, err = pool.Exec(context.Background(), `select pgrun.fail_job(id, attempt, '{"message": "x"}') from pgrun.claim_jobs('images', 'w', 10)`)
	require.NoError(t, err)
	out, err = c.run("retry", "--kind", "resize", "--queue", "images")
	require.NoError(t, err)
	require.Equal(t, "3 failed jobs queued again\n", out)
	_, err = c.run("retry")
	require.ErrorContains(t, err, "give a job ID, or --kind and/or --queue")
}
