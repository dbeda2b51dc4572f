package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// These tests run pgrun through a real PgBouncer in transaction mode, started by
// scripts/ensure-pgbouncer.sh (which installs Debian's pgbouncer if it is missing) in
// front of the test server. Every per-test database is reachable through it (a
// wildcard database), as the same user.

// pgbouncer starts the pooler once per test process and returns its URL.
var pgbouncer = sync.OnceValues(func() (string, error) {
	cmd := exec.Command("../scripts/ensure-pgbouncer.sh", testdb.ServerURL())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/ensure-pgbouncer.sh: %v\n%s", err, stderr.String())
	}
	// "starting pgbouncer ...; files in DIR": this process started it (else it found
	// one running and reuses it), so it stops it when the tests end (stopPgBouncer).
	if _, dir, ok := strings.Cut(stderr.String(), "; files in "); ok {
		pgbouncerDir = strings.TrimSpace(strings.SplitN(dir, "\n", 2)[0])
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
})

// pgbouncerDir is the directory of the pooler this test process started, "" if none.
var pgbouncerDir string

// stopPgBouncer stops the pooler this test process started, so that a test run
// leaves no daemon behind (one it found running is left as it was).
func stopPgBouncer() {
	if pgbouncerDir == "" {
		return
	}
	pid, err := os.ReadFile(filepath.Join(pgbouncerDir, "pgbouncer.pid"))
	if err != nil {
		return
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
		_ = syscall.Kill(n, syscall.SIGTERM)
	}
}

// viaPgBouncer returns direct, a test database's URL, rewritten to go through the
// pooler; mode, when not empty, is put in as default_query_exec_mode.
func viaPgBouncer(t *testing.T, direct, mode string) string {
	t.Helper()
	p, err := pgbouncer()
	require.NoError(t, err)
	pu, err := url.Parse(p)
	require.NoError(t, err)
	u, err := url.Parse(direct)
	require.NoError(t, err)
	u.Host = pu.Host
	if mode != "" {
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// pooledBundle is a test database with a pool through the pooler (in
// pgrun.PoolerExecMode) next to the direct one.
type pooledBundle struct {
	*testkit.DB
	pooled    *pgxpool.Pool
	pooledURL string
}

func setupPooled(t *testing.T) *pooledBundle {
	t.Helper()
	b := testkit.Setup(t)
	u := viaPgBouncer(t, b.URL, "cache_describe")
	return &pooledBundle{DB: b, pooled: testdb.PoolFor(t, u), pooledURL: u}
}

// The test pooler is what the other tests need it to be: a pooler (pgrun sees it as
// one, and not the direct server), in transaction mode (two clients one after the
// other are served by the same backend), where pgx's default statement cache fails
// as the issue reported, and where pgrun.PoolerExecMode does not.
func TestPgBouncerIsATransactionModePoolerWherePoolerExecModeWorks(t *testing.T) {
	b := setupPooled(t)
	ctx := b.Ctx
	isPooled := func(pool *pgxpool.Pool) bool {
		pooled, err := pgrun.PoolThroughPooler(ctx, pool)
		require.NoError(t, err)
		return pooled
	}
	require.True(t, isPooled(b.pooled), "through PgBouncer")
	require.False(t, isPooled(b.Pool), "direct")

	// Two client connections, one after the other: in transaction mode the second
	// reuses the first's idle backend; in session mode each keeps its own.
	cached := viaPgBouncer(t, b.URL, "") // pgx's default: cache_statement
	c1, err := pgx.Connect(ctx, cached)
	require.NoError(t, err)
	defer c1.Close(ctx)
	c2, err := pgx.Connect(ctx, cached)
	require.NoError(t, err)
	defer c2.Close(ctx)
	var pid1, pid2 uint32
	require.NoError(t, c1.QueryRow(ctx, `select pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid1))
	require.NoError(t, c2.QueryRow(ctx, `select pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid2))
	require.Equal(t, pid1, pid2, "transaction mode: one idle backend serves both clients")

	// The failure the issue reported: each client prepares the same named statement on
	// the one backend.
	const q = `select count(*) from pgrun.jobs where queue = $1`
	var n int
	require.NoError(t, c1.QueryRow(ctx, q, "default").Scan(&n))
	err = c2.QueryRow(ctx, q, "default").Scan(&n)
	require.ErrorContains(t, err, "already exists", "pgx's statement cache through a transaction-mode pooler")

	for range 3 { // the same two-client pattern in pgrun.PoolerExecMode
		for _, u := range []string{b.pooledURL, b.pooledURL} {
			c, err := pgx.Connect(ctx, u)
			require.NoError(t, err)
			require.NoError(t, c.QueryRow(ctx, q, "default").Scan(&n))
			require.NoError(t, c.Close(ctx))
		}
	}
}

// logRecorder keeps the records a runner logs, for assertions on them.
type logRecorder struct {
	mu      sync.Mutex
	records []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { sb.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, sb.String())
	return nil
}

// matching returns the records that contain s.
func (l *logRecorder) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if strings.Contains(r, s) {
			out = append(out, r)
		}
	}
	return out
}

// Through PgBouncer in transaction mode, with the pool in pgrun.PoolerExecMode and a
// direct URL to listen on: enqueue (one, many, inside a caller's transaction, and a
// rolled-back one that leaves nothing), a runner that completes, fails and retries,
// and runs jobs that operators cancel, turn off (worker control) and pause (queue ops),
// a workflow and a sequence (whose next jobs are handed over) through the pooler; and
// the runner logs no error or warning all along.
func TestPgBouncerCoreScenarios(t *testing.T) {
	b := setupPooled(t)
	ctx, db := b.Ctx, b.pooled
	_, err := db.Exec(ctx, `select pgrun.set_queue('default', backoff_base => '10 milliseconds', backoff_max => '20 milliseconds')`)
	require.NoError(t, err)

	host := fmt.Sprintf("pgb-%d", time.Now().UnixNano())
	logs := &logRecorder{}
	r := testkit.NewRunner(db, runner.Config{Host: host, ListenURL: b.URL, Logger: slog.New(logs)})
	testkit.StartRunner(t, r)

	waitStatus := func(id int64, want pgrun.JobStatus) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, fmt.Sprintf("job %d %s", id, want), func() bool {
			j, err := pgrun.GetJob(ctx, db, id)
			require.NoError(t, err)
			return j.Status == want
		})
	}

	// Enqueue: one, many, in a transaction, and a rolled-back one.
	one, err := pgrun.Enqueue(ctx, db, runner.KindEcho, map[string]any{"n": 1})
	require.NoError(t, err)
	many, err := pgrun.EnqueueMany(ctx, db, []pgrun.JobSpec{
		{Kind: runner.KindEcho, Args: map[string]any{"n": 2}},
		{Kind: runner.KindNoop},
		{Kind: runner.KindFail, Args: runner.FailArgs{Times: 2}},        // fails twice, then succeeds
		{Kind: runner.KindFail, Args: runner.FailArgs{Permanent: true}}, // fails for good
	})
	require.NoError(t, err)
	require.Len(t, many, 4)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	inTx, err := pgrun.Enqueue(ctx, tx, runner.KindEcho, map[string]any{"n": 3})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	tx, err = db.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := pgrun.Enqueue(ctx, tx, runner.KindEcho, map[string]any{"n": 4})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	for _, id := range []int64{one.ID, many[0].ID, many[1].ID, many[2].ID, inTx.ID} {
		waitStatus(id, pgrun.StatusSucceeded)
	}
	waitStatus(many[3].ID, pgrun.StatusFailed)
	j, err := pgrun.GetJob(ctx, db, one.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 1}`, string(j.Result))
	j, err = pgrun.GetJob(ctx, db, many[2].ID)
	require.NoError(t, err)
	require.Equal(t, 2, j.Failures, "failed twice, retried, then succeeded")
	_, err = pgrun.GetJob(ctx, db, rolledBack.ID)
	require.ErrorIs(t, err, pgrun.ErrNotFound, "a rolled-back enqueue leaves no job")
	events, err := pgrun.Events(ctx, db, many[2].ID)
	require.NoError(t, err)
	require.NotEmpty(t, events)

	// Worker control: off takes a running job back (its handler is stopped), on lets
	// it run again; then an operator cancels it.
	long, err := pgrun.Enqueue(ctx, db, runner.KindSleep, runner.SleepArgs{MS: 600_000})
	require.NoError(t, err)
	waitStatus(long.ID, pgrun.StatusRunning)
	_, err = db.Exec(ctx, `select pgrun.set_worker_control($1, 'default', 'off')`, host)
	require.NoError(t, err)
	waitStatus(long.ID, pgrun.StatusQueued)
	require.Never(t, func() bool { return testkit.JobStatus(t, b.DB, long.ID) != pgrun.StatusQueued },
		500*time.Millisecond, 50*time.Millisecond, "a runner turned off claims nothing")
	_, err = db.Exec(ctx, `select pgrun.set_worker_control($1, 'default', 'on')`, host)
	require.NoError(t, err)
	waitStatus(long.ID, pgrun.StatusRunning)
	j, err = pgrun.Cancel(ctx, db, long.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, j.Status)
	// Both stops reach the handler on the direct LISTEN connection (pgrun_cancel),
	// well before the lease renewal (every 10 s) would have found them.
	// (Each stop logs "job stopped remotely" when confirmed and "job stopped" when its
	// handler returns: count the returns.)
	testkit.Eventually(t, 5*time.Second, "both stopped handlers returned", func() bool {
		return len(logs.matching("job stopped cause=")) == 2
	})
	stops := logs.matching("job stopped cause=")
	require.Contains(t, stops[0], "lease lost", "worker control off takes the job back")
	require.Contains(t, stops[1], "cancelled", "then the operator's cancel")

	// Queue ops: a paused queue hands out nothing; resumed, its job runs.
	var paused bool
	require.NoError(t, db.QueryRow(ctx, `select paused from pgrun.pause_queue('default')`).Scan(&paused))
	require.True(t, paused)
	held, err := pgrun.Enqueue(ctx, db, runner.KindNoop, nil)
	require.NoError(t, err)
	require.Never(t, func() bool { return testkit.JobStatus(t, b.DB, held.ID) != pgrun.StatusQueued },
		500*time.Millisecond, 50*time.Millisecond, "a paused queue hands out nothing")
	require.NoError(t, db.QueryRow(ctx, `select paused from pgrun.resume_queue('default')`).Scan(&paused))
	require.False(t, paused)
	waitStatus(held.ID, pgrun.StatusSucceeded)

	// A workflow: its second node is readied by the first one's completion.
	_, err = pgrun.DefineWorkflow(ctx, db, "pooled", json.RawMessage(`{"nodes": [
		{"name": "a", "kind": "echo", "args": {"x": {"$from": "input.x"}}},
		{"name": "b", "kind": "echo", "deps": ["a"], "args": {"y": {"$from": "a.output.x"}}}]}`))
	require.NoError(t, err)
	run, err := pgrun.StartRun(ctx, db, "pooled", map[string]any{"x": 7}, "")
	require.NoError(t, err)
	testkit.Eventually(t, 20*time.Second, "the run succeeded", func() bool {
		got, err := pgrun.GetRun(ctx, db, run.ID)
		require.NoError(t, err)
		return got.Status == "succeeded"
	})

	// Observation through the pooler.
	var queued, succeeded int
	require.NoError(t, db.QueryRow(ctx, `select coalesce(sum(queued), 0), coalesce(sum(succeeded_1m), 0) from pgrun.queue_stats`).Scan(&queued, &succeeded))
	require.Equal(t, 0, queued)
	require.Equal(t, 8, succeeded)

	// A sequence: each completion hands the next job over (a pipelined complete_jobs and
	// handed_jobs, one transaction), through the pooler.
	_, err = db.Exec(ctx, `select pgrun.enqueue_job('noop', sequence_key => 'pooled') from generate_series(1, 3)`)
	require.NoError(t, err)
	testkit.Eventually(t, 20*time.Second, "the sequence ran", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `select count(*) from pgrun.jobs where sequence_key = 'pooled' and status = 'succeeded'`).Scan(&n))
		return n == 3
	})
	require.Positive(t, r.Stats().Handed, "a completion handed the next job of the sequence over")

	require.Empty(t, logs.matching("ERROR "), "the runner logged no error through the pooler")
	require.Empty(t, logs.matching("pooler"), "with a direct listen URL, nothing to say about the pooler")
}

// psqlEnqueueLatencies enqueues n noop jobs one at a time with psql through dbURL
// and returns, for each, how long it waited from its enqueue to its start by the
// database's own clock (created_at is the enqueuing transaction's start, so the
// figure includes psql's commit). Each job must have succeeded before the next goes.
func psqlEnqueueLatencies(t *testing.T, b *testkit.DB, dbURL string, n int, within time.Duration) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		cmd := exec.Command("psql", dbURL, "-XAtqc", `select id from pgrun.enqueue_job('noop')`)
		raw, err := cmd.CombinedOutput()
		require.NoError(t, err, "psql: %s", raw)
		id, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		require.NoError(t, err, "psql printed %q", raw)
		testkit.Eventually(t, within, fmt.Sprintf("job %d succeeded", id), func() bool { return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded })
		var us int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (extract(epoch from started_at - created_at) * 1e6)::bigint
			from pgrun.jobs where id = $1`, id).Scan(&us))
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	return out
}

// waitListening waits until a session of the test database is LISTENing (its last
// statement was a LISTEN and it is idle, waiting for notifications).
func waitListening(t *testing.T, b *testkit.DB) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the runner LISTENs", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and state = 'idle' and query ilike 'listen %'`).Scan(&n))
		return n > 0
	})
}

// A psql enqueue through the pooler wakes a `runner work` whose --database-url goes
// through the pooler (without an exec mode: the CLI picks the one that works there)
// and whose --listen-url is direct: with a 30 s poll, each job starts within a
// fraction of a second, so it was woken, not polled.
func TestPgBouncerPsqlEnqueueWakesRunnerListeningDirect(t *testing.T) {
	b := testkit.Setup(t)
	pooled := viaPgBouncer(t, b.URL, "")
	const poll = 30 * time.Second
	p := startWorkerURL(t, pooled, "--listen-url", b.URL, "--poll-interval", poll.String(), "--queues", "default=2")
	waitListening(t, b)
	lat := psqlEnqueueLatencies(t, b, pooled, 5, poll/2)
	t.Logf("enqueue-to-start through PgBouncer, woken on the direct listen URL: %v", lat)
	for _, l := range lat {
		require.Less(t, l, 2*time.Second, "woken, not polled (poll interval %s)", poll)
	}
	require.NotContains(t, p.Output(), "not listening")
	require.NotContains(t, p.Output(), "level=ERROR")
	require.NotContains(t, p.Output(), "prepared statement")
}

// A `runner work` with only the pooled URL does not LISTEN (it would never hear),
// says why once, and still runs every job, found by its poll: each within the poll
// interval (plus the claim and the commit). A running job cancelled through the
// pooler reaches its handler at the next lease renewal (lease/3).
func TestPgBouncerRunnerWithoutDirectURLPolls(t *testing.T) {
	b := testkit.Setup(t)
	pooled := viaPgBouncer(t, b.URL, "")
	const poll, lease = time.Second, 3 * time.Second
	p := startWorkerURL(t, pooled, "--poll-interval", poll.String(), "--lease", lease.String(), "--queues", "default=2")
	testkit.Eventually(t, 20*time.Second, "the runner says it does not listen", func() bool {
		return strings.Contains(p.Output(), "not listening: the pool goes through a connection pooler")
	})
	lat := psqlEnqueueLatencies(t, b, pooled, 5, 10*time.Second)
	t.Logf("enqueue-to-start through PgBouncer, polled every %s: %v", poll, lat)
	for _, l := range lat {
		require.Less(t, l, poll+time.Second, "found by the poll")
	}

	out, err := exec.Command("psql", pooled, "-XAtqc", `select id from pgrun.enqueue_job('sleep', '{"ms": 600000}')`).CombinedOutput()
	require.NoError(t, err, "psql: %s", out)
	id, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the sleep job runs", func() bool { return testkit.JobStatus(t, b, id) == pgrun.StatusRunning })
	out, err = exec.Command("psql", pooled, "-XAtqc", fmt.Sprintf(`select status from pgrun.cancel_job(%d, 'not needed')`, id)).CombinedOutput()
	require.NoError(t, err, "psql: %s", out)
	require.Equal(t, "cancelled", strings.TrimSpace(string(out)))
	testkit.Eventually(t, lease, "the handler stopped at the next lease renewal", func() bool {
		return strings.Contains(p.Output(), `msg="job stopped"`)
	})

	require.Equal(t, 1, strings.Count(p.Output(), "not listening"), "said once")
	require.NotContains(t, p.Output(), "level=ERROR")
	require.NotContains(t, p.Output(), "prepared statement")
	var listening int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and query ilike 'listen %'`).Scan(&listening))
	require.Zero(t, listening, "no LISTEN went through the pooler")
}

// A listen URL pgx cannot read is a configuration error, reported before anything
// connects, not a listener that silently never starts.
func TestRunnerConfigRejectsABadListenURL(t *testing.T) {
	err := runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1}},
		ListenURL: "postgres://x@127.0.0.1/db?sslmode=sometimes"}.Validate()
	require.ErrorContains(t, err, "runner: listen URL")
	require.NoError(t, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1}},
		ListenURL: "postgres://x@127.0.0.1/db"}.Validate())
}

// The pooler ensure-pgbouncer.sh starts keeps none of its caller's descriptors: a
// file the caller held open (here a lock file, as `flock make test` holds one) is not
// among the daemon's open files, so the daemon cannot keep a lock or a pipe alive
// after its caller is gone.
func TestPgBouncerDaemonKeepsNoInheritedDescriptor(t *testing.T) {
	dir := t.TempDir()
	held, err := os.Create(filepath.Join(dir, "held.lock"))
	require.NoError(t, err)
	defer held.Close()
	// A directory of its own that user postgres can reach (the daemon runs as it).
	parent, err := os.MkdirTemp("", "pgrun-pooler-fds-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	poolDir := filepath.Join(parent, "pooler")
	cmd := exec.Command("../scripts/ensure-pgbouncer.sh", testdb.ServerURL())
	cmd.Env = append(os.Environ(), "PGRUN_PGBOUNCER_DIR="+poolDir, "PGRUN_PGBOUNCER_PORT=17532")
	cmd.ExtraFiles = []*os.File{held} // fd 3 in the script
	var stderr strings.Builder
	cmd.Stderr = &stderr
	_, err = cmd.Output()
	require.NoError(t, err, "ensure-pgbouncer.sh: %s", stderr.String())
	pidText, err := os.ReadFile(filepath.Join(poolDir, "pgbouncer.pid"))
	require.NoError(t, err)
	pid := strings.TrimSpace(string(pidText))
	t.Cleanup(func() { _ = exec.Command("kill", pid).Run() })
	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	require.NoError(t, err)
	require.NotEmpty(t, fds)
	for _, fd := range fds {
		target, err := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		if err != nil {
			continue // closed meanwhile
		}
		require.NotEqual(t, held.Name(), target, "pgbouncer kept its caller's fd %s", fd.Name())
	}
}
