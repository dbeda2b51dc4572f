package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/runner"
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
	out, err := c.run("job", "enqueue", "echo", `{"hello": "world"}`, "--queue", "images", "--priority", "3")
	require.NoError(t, err)
	require.Equal(t, "job 1 queued (echo, queue images)\n", out)
	out, err = c.run("job", "get", "1")
	require.NoError(t, err)
	require.Contains(t, out, "queued")
	require.Contains(t, out, `{"hello":"world"}`)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.jobs where queue = 'images' and priority = 3`))

	out, err = c.run("job", "enqueue", "noop", "--count", "5")
	require.NoError(t, err)
	require.Equal(t, "5 jobs enqueued (ids 2..6, queue default)\n", out)
}

func TestBadInputWritesNothing(t *testing.T) {
	c, pool := newCLI(t)
	for _, args := range [][]string{
		{"job", "enqueue", "echo", `[1, 2]`},
		{"job", "enqueue", "echo", `{"broken": `},
		{"job", "enqueue", "echo", "--queue", "Bad Queue"},
		{"job", "enqueue", "echo", "--priority", "-1"},
		{"job", "enqueue", "echo", "--delay", "-5s"},
		{"job", "enqueue", "echo", "--run-at", "tomorrow"},
	} {
		_, err := c.run(args...)
		require.Error(t, err, "%v", args)
		require.NotContains(t, oneLine(err), "\n")
	}
	require.Zero(t, count(t, pool, `select count(*) from pgrun.jobs`))
	_, err := c.run("job", "enqueue", "echo", "--queue", "Bad Queue")
	require.ErrorContains(t, err, "queue name 'Bad Queue' is not valid")
	require.Contains(t, oneLine(err), "hint:")
}

func TestCancelRetryAndJobs(t *testing.T) {
	c, pool := newCLI(t)
	_, err := c.run("job", "enqueue", "sleep", `{"ms": 1}`)
	require.NoError(t, err)
	out, err := c.run("job", "cancel", "1", "--reason", "operator said so")
	require.NoError(t, err)
	require.Equal(t, "job 1 cancelled (was queued)\n", out)
	_, err = c.run("job", "cancel", "1")
	require.EqualError(t, err, "job 1 is cancelled, so it cannot be cancelled")

	out, err = c.run("job", "list", "--state", "cancelled")
	require.NoError(t, err)
	require.Contains(t, out, "operator said so")

	out, err = c.run("job", "retry", "1")
	require.NoError(t, err)
	require.Equal(t, "job 1 queued again\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.jobs where status = 'queued' and failures = 0`))
	_, err = c.run("job", "retry", "1")
	require.EqualError(t, err, "job 1 is queued, so it cannot be queued again")

	_, err = c.run("job", "cancel", "42")
	require.EqualError(t, err, "job 42 does not exist")
	_, err = c.run("job", "get", "abc")
	require.EqualError(t, err, `job id "abc" is not a positive whole number`)
	_, err = c.run("job", "list", "--state", "lost")
	require.ErrorContains(t, err, `--state "lost" is not one of`)
}

func TestStatusAndMigrateVersion(t *testing.T) {
	c, _ := newCLI(t)
	_, err := c.run("job", "enqueue", "noop", "--queue", "reports")
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
	require.Equal(t, 1, run([]string{"job", "get", "abc"}))
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
	out, err = c.run("workflow", "retry", "1")
	require.NoError(t, err)
	require.Equal(t, "run 1 running again\n", out)
	_, err = c.run("workflow", "retry", "1")
	require.EqualError(t, err, "run 1 is running: only failed and cancelled runs can be retried")
	_, err = c.run("workflow", "retry", "7")
	require.EqualError(t, err, "run 7 does not exist")
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
	require.Error(t, err)
	require.Contains(t, oneLine(err), "schedule 'tick' does not exist")
	require.Contains(t, oneLine(err), "(hint: list schedules with `runner schedule list`)", "the hint names a runner command, not SQL")

	// A queue no job has used yet does not exist: pausing it fails and creates nothing.
	_, err = c.run("queue", "pause", "images")
	require.Error(t, err)
	require.Contains(t, oneLine(err), "queue 'images' does not exist")
	require.Contains(t, oneLine(err), "`runner queue set NAME`")
	require.NotContains(t, oneLine(err), "SELECT")
	require.Zero(t, count(t, pool, `select count(*) from pgrun.queues where name = 'images'`))
	_, err = c.run("job", "enqueue", "noop", "--queue", "images")
	require.NoError(t, err)
	out, err = c.run("queue", "pause", "images")
	require.NoError(t, err)
	require.Equal(t, "queue images paused\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.queues where name = 'images' and paused`))
	out, err = c.run("queue", "resume", "images")
	require.NoError(t, err)
	require.Equal(t, "queue images running\n", out)

	out, err = c.run("worker", "control", "box-1", "*", "drain")
	require.NoError(t, err)
	require.Equal(t, "host box-1 queue *: drain\n", out)
	_, err = c.run("worker", "control", "box-1", "*", "sideways")
	require.ErrorContains(t, err, "worker control mode 'sideways' is not valid")

	_, err = pool.Exec(context.Background(), `delete from pgrun.jobs where queue = 'images'`)
	require.NoError(t, err)
	for range 3 {
		_, err := c.run("job", "enqueue", "resize", "--queue", "images", "--max-attempts", "1")
		require.NoError(t, err)
	}
	_, err = pool.Exec(context.Background(), `select pgrun.fail_job(id, attempt, '{"message": "x"}') from pgrun.claim_jobs('images', 'w', 10)`)
	require.NoError(t, err)
	out, err = c.run("job", "retry", "--kind", "resize", "--queue", "images")
	require.NoError(t, err)
	require.Equal(t, "3 failed jobs queued again\n", out)
	_, err = c.run("job", "retry")
	require.ErrorContains(t, err, "give a job ID, or --kind and/or --queue and/or --since")
}

// stderrOf runs the command line as main does and returns its exit code and stderr.
func stderrOf(args ...string) (int, string) {
	var stderr bytes.Buffer
	code := runWithStderr(args, &stderr)
	return code, stderr.String()
}

// requireOneLineError checks that a failed command exited 1 with exactly one line on
// stderr, containing each of want.
func requireOneLineError(t *testing.T, code int, stderr string, want ...string) {
	t.Helper()
	require.Equal(t, 1, code, stderr)
	require.True(t, strings.HasPrefix(stderr, "runner: "), stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	require.True(t, strings.HasSuffix(stderr, "\n"), stderr)
	for _, w := range want {
		require.Contains(t, stderr, w)
	}
}

func TestSchedulePauseAndResumeKeepSettings(t *testing.T) {
	c, pool := newCLI(t)
	_, err := c.run("schedule", "set", "nightly", "0 2 * * *", "report", `{"kind": "daily"}`,
		"--queue", "reports", "--timezone", "Europe/Berlin")
	require.NoError(t, err)
	out, err := c.run("schedule", "pause", "nightly")
	require.NoError(t, err)
	require.Equal(t, "schedule nightly paused\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.schedules where name = 'nightly' and not enabled
		and cron = '0 2 * * *' and kind = 'report' and args = '{"kind": "daily"}' and queue = 'reports'
		and timezone = 'Europe/Berlin'`))
	out, err = c.run("schedule", "list")
	require.NoError(t, err)
	require.Regexp(t, `nightly +0 2 \* \* \* +report +reports +Europe/Berlin +false`, out)

	out, err = c.run("schedule", "resume", "nightly")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "schedule nightly resumed; next fire "), out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.schedules where name = 'nightly' and enabled
		and args = '{"kind": "daily"}' and queue = 'reports' and timezone = 'Europe/Berlin' and next_fire_at > now()`))

	for _, verb := range []string{"pause", "resume"} {
		code, stderr := stderrOf("schedule", verb, "nigthly", "--database-url", c.url)
		requireOneLineError(t, code, stderr, "schedule 'nigthly' does not exist", "(hint: list schedules with `runner schedule list`)")
	}
}

func TestQueuePauseOfUnknownQueueFails(t *testing.T) {
	c, pool := newCLI(t)
	_, err := c.run("job", "enqueue", "noop", "--queue", "images")
	require.NoError(t, err)
	for _, verb := range []string{"pause", "resume"} {
		code, stderr := stderrOf("queue", verb, "imagse", "--database-url", c.url)
		requireOneLineError(t, code, stderr, "runner: queue 'imagse' does not exist",
			"(hint: list queues with `runner queue list`; create one with `runner queue set NAME`)")
	}
	require.Zero(t, count(t, pool, `select count(*) from pgrun.queues where name = 'imagse' or paused`))
	code, stderr := stderrOf("queue", "pause", "images", "--database-url", c.url)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.queues where name = 'images' and paused`))
}

// Every flag of work is checked before connecting: the database here does not
// exist, so each error can only come from validation.
func TestWorkRejectsBadFlagsBeforeConnecting(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", 3000)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--lease", "1ns"}, []string{"--lease 1ns is too short", "1s or more"}},
		{[]string{"--lease", "999ms"}, []string{"--lease 999ms is too short"}},
		{[]string{"--lease", "-1s"}, []string{"--lease -1s is negative"}},
		{[]string{"--grace", "-5s"}, []string{"--grace -5s is negative"}},
		{[]string{"--poll-interval", "1ms"}, []string{"--poll-interval 1ms is too short", "10ms or more"}},
		{[]string{"--poll-interval", "0s"}, []string{"--poll-interval 0s is too short"}},
		{[]string{"--complete-linger", "2s"}, []string{"--complete-linger 2s is not valid", "0 (record every success with the next call) to 1s"}},
		{[]string{"--complete-linger", "-1ms"}, []string{"--complete-linger -1ms is not valid"}},
		{[]string{"--queues", "default=99999999999"}, []string{"--queues: worker count 99999999999 of queue default is over the limit of 10000"}},
		{[]string{"--queues", "default=10001"}, []string{"--queues: worker count 10001 of queue default is over the limit of 10000"}},
		{[]string{"--queues", "default=99999999999999999999999"}, []string{`--queues: worker count "99999999999999999999999" of queue default is out of range: give 1 to 10000`}},
		{[]string{"--queues", "default=-3"}, []string{`--queues: worker count "-3" of queue default is not a whole number of at least 1`}},
		{[]string{"--queues", "gpu=gpu,gpu=2"}, []string{"--queues: queue gpu is given twice"}},
		{[]string{"--queues", "fair=8:0"}, []string{`--queues: claim cap "0" of queue fair is not a whole number of at least 1`}},
		{[]string{"--queues", "fair=8:10001"}, []string{"--queues: claim cap 10001 of queue fair is over the limit of 10000"}},
		{[]string{"--queues", "fair=8:"}, []string{`--queues: claim cap "" of queue fair is not a whole number of at least 1`}},
		{[]string{"--queues", "fair=x:5"}, []string{`--queues: worker count "x" of queue fair is not a whole number of at least 1`}},
		{[]string{"--queues", "Images=2"}, []string{`--queues: queue name "Images" is not valid`}},
		{[]string{"--queues", "a" + strings.Repeat("b", 63) + "=1"}, []string{"--queues: queue name", "is not valid"}},
		{[]string{"--queues", ""}, []string{`--queues part "" is not name=N`}},
		{[]string{"--worker-id", long}, []string{`--worker-id "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"... is 3000 characters, over the limit of 200`}},
		{[]string{"--worker-id", ""}, []string{`--worker-id "" is empty`}},
		{[]string{"--worker-id", "box\nfake log line"}, []string{`--worker-id "box\nfake log line" contains a control character`}},
		{[]string{"--log-level", "loud"}, []string{`--log-level "loud" is not one of debug, info, warn, error`}},
		{[]string{"--log-format", "xml"}, []string{`--log-format "xml" is not one of text, json`}},
		{[]string{"--metrics-addr", "9090"}, []string{`--metrics-addr "9090" is not host:port (such as :9090 or 127.0.0.1:9090)`}},
		{[]string{"--listen-url", "postgres://x@127.0.0.1/db?sslmode=sometimes"}, []string{"--listen-url is not a PostgreSQL URL", "sslmode"}},
		{[]string{"--lease", "soon"}, []string{`invalid argument "soon" for "--lease" flag`}},
		{[]string{"extra"}, []string{`unknown command "extra" for "runner work"`}},
	} {
		args := append([]string{"work", "--database-url", "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=1"}, c.args...)
		code, stderr := stderrOf(args...)
		requireOneLineError(t, code, stderr, c.want...)
		require.NotContains(t, stderr, "connect", "%v: validation comes before connecting", c.args)
	}
}

// The flags at their bounds are accepted and reach the runner's configuration.
func TestWorkFlagsAtTheirBounds(t *testing.T) {
	t.Parallel()
	f := &workFlags{queues: "default=10000,images=1,gpu=gpu,fair=50:250,gpus=gpu:1,edge=1:10000", workerID: strings.Repeat("é", 200),
		logLevel: "debug", lease: time.Second, poll: 10 * time.Millisecond, linger: time.Second}
	cfg, level, err := f.config(func(string) bool { return true })
	require.NoError(t, err)
	require.Equal(t, slog.LevelDebug, level)
	require.Equal(t, map[string]runner.QueueConfig{"default": {Workers: 10000}, "images": {Workers: 1}, "gpu": {GPU: true},
		"fair": {Workers: 50, MaxClaim: 250}, "gpus": {GPU: true, MaxClaim: 1}, "edge": {Workers: 1, MaxClaim: 10000}}, cfg.Queues)
	require.Equal(t, time.Second, cfg.Lease)
	require.Equal(t, 10*time.Millisecond, cfg.PollInterval)
	require.Equal(t, time.Nanosecond, cfg.ShutdownGrace, "--grace 0 means no grace, not the runner's default")
	require.Equal(t, time.Second, cfg.CompleteLinger)

	f = &workFlags{queues: "default=8", logLevel: "info", grace: 3 * time.Second, poll: time.Second}
	cfg, _, err = f.config(func(string) bool { return false })
	require.NoError(t, err)
	require.Zero(t, cfg.Lease, "0 leaves the lease to each queue's default_lease")
	require.Empty(t, cfg.WorkerID, "no --worker-id: the runner picks host:pid:random")
	require.Equal(t, 3*time.Second, cfg.ShutdownGrace)
	require.Negative(t, cfg.CompleteLinger, "--complete-linger 0 means none, not the runner's default")
}

// A command that only groups others fails on an unknown or missing subcommand
// instead of printing help and exiting 0.
func TestUnknownSubcommandFails(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"migrate bogus":  `unknown command "bogus" for "runner migrate": use one of down, grants, sql, up, version`,
		"migrate upp":    `unknown command "upp" for "runner migrate": did you mean up?`,
		"schedule bogus": `unknown command "bogus" for "runner schedule"`,
		"queue bogus":    `unknown command "bogus" for "runner queue"`,
		"worker bogus":   `unknown command "bogus" for "runner worker"`,
		"job lsit":       `unknown command "lsit" for "runner job": did you mean list?`,
		"job":            `"runner job" needs a subcommand: one of cancel, enqueue, get, list, retry`,
		"migrate":        `"runner migrate" needs a subcommand: one of down, grants, sql, up, version`,
		"bogus":          `unknown command "bogus" for "runner"`,
	} {
		code, stderr := stderrOf(strings.Fields(args)...)
		requireOneLineError(t, code, stderr, want)
	}
	code, stderr := stderrOf("migrate", "--help")
	require.Equal(t, 0, code, stderr)
}

func TestStatusWarnsAboutUnhandledJobs(t *testing.T) {
	require.Equal(t, []string{
		"images: 12 queued jobs of kinds no live worker handles",
		"mail: 1 queued job of a kind no live worker handles",
	}, unhandledLines([]queueRow{{Queue: "default"}, {Queue: "images", Unhandled: 12}, {Queue: "mail", Unhandled: 1}}))

	c, pool := newCLI(t)
	if count(t, pool, `select count(*) from information_schema.columns
		where table_schema = 'pgrun' and table_name = 'queue_stats' and column_name = 'unhandled'`) == 0 {
		t.Skip("pgrun.queue_stats has no column unhandled yet")
	}
	for range 2 {
		_, err := c.run("job", "enqueue", "resize", "--queue", "images")
		require.NoError(t, err)
	}
	_, err := c.run("job", "enqueue", "noop", "--queue", "later", "--delay", "1h")
	require.NoError(t, err)
	// No worker is registered, so no live worker handles resize.
	n := count(t, pool, `select unhandled from pgrun.queue_stats where queue = 'images'`)
	require.Positive(t, n)
	out, err := c.run("status")
	require.NoError(t, err)
	// No worker at all: the flag says so, rather than naming the kinds.
	require.Contains(t, out, fmt.Sprintf("\nimages: %d queued jobs and no live worker serves this queue\n", n))
	require.NotContains(t, out, "later:", "a job not yet due is not reported")
	out, err = c.run("status", "--json")
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf(`"unhandled": %d`, n))
}

// `migrate up --no-create-roles` with roles a DBA has not created yet grants nothing
// and says so; `migrate grants` prints the statements for the DBA, with the prefix.
func TestMigrateRolesForADBA(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("migrate", "up", "--role-prefix", "acme_", "--no-create-roles")
	require.NoError(t, err)
	require.Contains(t, out, "roles not created")
	require.Zero(t, count(t, pool, `select count(*) from pg_roles where rolname like 'acme\_%'`))
	out, err = c.run("migrate", "grants", "--role-prefix", "acme_")
	require.NoError(t, err)
	for _, want := range []string{`create role "acme_enqueuer" nologin`, `to acme_worker`, `grant usage on schema pgrun to acme_enqueuer, acme_worker, acme_admin`,
		"grant execute on function pgrun.claim_jobs("} {
		require.Contains(t, out, want)
	}
	// Without --no-create-roles, a role that may not create roles is told what to do.
	_, err = c.run("migrate", "up", "--role-prefix", "acme_")
	require.ErrorContains(t, err, "runner migrate grants")
}
