package tests

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// runningJob enqueues a noop job and claims it for worker, as the test's owner.
func runningJob(t *testing.T, b *testkit.DB, worker string) testkit.Claim {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop', queue => 'roles')`)
	require.NoError(t, err)
	c := testkit.ClaimN(t, b.Pool, "roles", worker, 1, "30 seconds")
	require.Len(t, c, 1)
	return c[0]
}

// pgrun_enqueuer enqueues (functions and a plain INSERT of its own fields), starts
// runs and reads; it cannot claim, report, operate, forge engine-owned columns or
// attach children.
func TestEnqueuerRole(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "roles_wf", `{"nodes": [{"name": "a", "kind": "noop"}]}`)
	p := testkit.AsRole(t, b, "pgrun_enqueuer")
	testkit.Allowed(t, b, p, `select pgrun.enqueue_job('noop', '{"w": 1}', queue => 'roles', unique_key => 'k1', concurrency_key => 'c')`)
	testkit.Allowed(t, b, p, `select pgrun.enqueue_job('noop', '{"w": 2}', queue => 'roles', unique_key => 'k1', on_conflict => 'replace')`)
	testkit.Allowed(t, b, p, `select pgrun.enqueue_jobs('[{"kind": "noop"}, {"kind": "echo", "queue": "roles"}]')`)
	testkit.Allowed(t, b, p, `insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key, model, timeout, meta, concurrency_key)
		values ('noop', '{}', 'roles', 3, now(), 2, 'k2', 'm', '1 minute', '{}', 'c')`)
	testkit.Allowed(t, b, p, `select pgrun.start_run('roles_wf')`)
	testkit.Allowed(t, b, p, `select * from pgrun.queue_stats`)
	testkit.Allowed(t, b, p, `select id, status from pgrun.jobs`)
	job, err := pgrun.Enqueue(b.Ctx, p, "noop", map[string]int{"n": 1}, pgrun.Queue("roles"))
	require.NoError(t, err, "the Go client works as an enqueuer")
	require.Equal(t, pgrun.StatusQueued, job.Status)

	c := runningJob(t, b, "w1")
	testkit.Denied(t, b, p, `select pgrun.claim_jobs('roles', 'intruder', 10)`)
	testkit.Denied(t, b, p, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c.ID, c.Attempt)
	testkit.Denied(t, b, p, `select pgrun.cancel_job($1)`, c.ID)
	testkit.Denied(t, b, p, `select pgrun.maintain()`)
	testkit.Denied(t, b, p, `select pgrun.set_queue('roles', max_running => 0)`)
	testkit.Denied(t, b, p, `update pgrun.jobs set status = 'succeeded' where id = $1`, c.ID)
	testkit.Denied(t, b, p, `delete from pgrun.jobs where id = $1`, c.ID)
	testkit.Denied(t, b, p, `select * from pgrun.maintenance_leader for update`)
	testkit.Denied(t, b, p, `insert into pgrun.settings (name, value) values ('test_clock', 'true')`)
	// Forged engine-owned columns and children attached to someone's parent.
	for _, col := range []string{"status", "attempt", "dispatched_at", "children_failed", "run_id", "node", "claimed_by"} {
		val := map[string]string{"status": "'running'", "attempt": "3", "dispatched_at": "now()", "children_failed": "1",
			"run_id": "1", "node": "'a'", "claimed_by": "'w'"}[col]
		testkit.Denied(t, b, p, fmt.Sprintf(`insert into pgrun.jobs (kind, %s) values ('noop', %s)`, col, val))
	}
	testkit.Denied(t, b, p, `insert into pgrun.jobs (kind, parent_id) values ('noop', $1)`, c.ID)
	testkit.Denied(t, b, p, `select pgrun.enqueue_job('noop', parent_id => $1)`, c.ID)
	testkit.Denied(t, b, p, `select pgrun.enqueue_jobs(jsonb_build_array(jsonb_build_object('kind', 'noop', 'parent_id', $1::bigint)))`, c.ID)
}

// pgrun_worker claims, reports on the jobs it holds, renews, heartbeats and reports
// progress; it cannot enqueue, operate, report without naming itself, or report on
// a job another worker holds.
func TestWorkerRole(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "pgrun_worker")
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop', queue => 'roles') from generate_series(1, 3)`)
	require.NoError(t, err)
	var id int64
	var attempt int
	var claim string
	testkit.Allowed(t, b, p, `select pgrun.worker_heartbeat('w-mine', 'h', 1, array['roles'], kinds => array['noop'])`)
	require.NoError(t, p.QueryRow(b.Ctx, `select id, attempt, claim_id::text from pgrun.claim_jobs('roles', 'w-mine', 1, kinds => array['noop'])`).
		Scan(&id, &attempt, &claim))
	testkit.Allowed(t, b, p, `select pgrun.renew_leases('w-mine', array[$1::bigint])`, id)
	testkit.Allowed(t, b, p, `select pgrun.set_progress($1, 1, 2, 'w-mine', $2::uuid)`, id, claim)
	testkit.Allowed(t, b, p, `select pgrun.emit($1, 'note', worker => 'w-mine', claim_id => $2::uuid)`, id, claim)
	testkit.Denied(t, b, p, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
	testkit.Denied(t, b, p, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w-mine')`, id, attempt)

	other := runningJob(t, b, "w-other")
	var n int
	require.NoError(t, p.QueryRow(b.Ctx, `select count(*) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w-mine', array[$3::uuid])`,
		other.ID, other.Attempt, claim).Scan(&n))
	require.Zero(t, n, "a job another worker holds")
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other.ID))
	var failed *int64
	require.NoError(t, p.QueryRow(b.Ctx, `select (pgrun.fail_job($1, $2, '{"message": "x"}', false, 'w-mine', $3::uuid)).id`,
		other.ID, other.Attempt, claim).Scan(&failed))
	require.Nil(t, failed)
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other.ID))

	require.NoError(t, p.QueryRow(b.Ctx, `select count(*) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w-mine', array[$3::uuid])`,
		id, attempt, claim).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, id))
	// Handing back what it does not hold reaches only its own jobs.
	testkit.Allowed(t, b, p, `select pgrun.release_unheld('w-mine', '{}')`)
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other.ID))
	testkit.Denied(t, b, p, `select pgrun.note_server_epoch()`)

	testkit.Denied(t, b, p, `select pgrun.enqueue_job('noop')`)
	testkit.Denied(t, b, p, `insert into pgrun.jobs (kind) values ('noop')`)
	testkit.Denied(t, b, p, `select pgrun.cancel_job($1)`, other.ID)
	testkit.Denied(t, b, p, `select pgrun.maintain()`)
	testkit.Denied(t, b, p, `select pgrun.set_worker_control('h', '*', 'off')`)
	testkit.Denied(t, b, p, `update pgrun.jobs set status = 'queued' where id = $1`, other.ID)
	// The unguarded batch writes behind claim_jobs and complete_jobs are the engine's.
	testkit.Denied(t, b, p, `select pgrun.claim_locked(array[$1::bigint], 'w-mine', now(), '1 minute')`, other.ID)
	testkit.Denied(t, b, p, `select pgrun.succeed_running(array[$1::bigint], array[$2::int], null, null, 'w-other', 100, now())`,
		other.ID, other.Attempt)
	testkit.Denied(t, b, p, `select pgrun.delete_succeeded(array[$1::bigint], array[$2::int], null, null, 'w-other', 100)`,
		other.ID, other.Attempt)
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other.ID))
}

// pgrun_admin operates: queues, schedules, worker control, cancel, retry, maintain;
// it does not run jobs.
func TestAdminRole(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "pgrun_admin")
	c := runningJob(t, b, "w1")
	testkit.Allowed(t, b, p, `select pgrun.set_queue('roles', max_running => 5)`)
	testkit.Allowed(t, b, p, `select pgrun.pause_queue('roles')`)
	testkit.Allowed(t, b, p, `select pgrun.resume_queue('roles')`)
	testkit.Allowed(t, b, p, `select pgrun.set_schedule('nightly', '0 3 * * *', 'noop')`)
	testkit.Allowed(t, b, p, `select pgrun.pause_schedule('nightly')`)
	testkit.Allowed(t, b, p, `select pgrun.set_worker_control('h', '*', 'drain')`)
	testkit.Allowed(t, b, p, `select pgrun.maintain(leader => 'admin-1')`)
	testkit.Allowed(t, b, p, `select pgrun.cancel_job($1)`, c.ID)
	testkit.Allowed(t, b, p, `select pgrun.retry_job($1)`, c.ID)
	testkit.Allowed(t, b, p, `select * from pgrun.worker_status`)
	testkit.Allowed(t, b, p, `select * from pgrun.job_timeline($1)`, c.ID)
	testkit.Denied(t, b, p, `select pgrun.claim_jobs('roles', 'admin', 1)`)
	testkit.Denied(t, b, p, `insert into pgrun.jobs (kind) values ('noop')`)
	testkit.Denied(t, b, p, `delete from pgrun.jobs`)
}

// A role with CONNECT only can do nothing in schema pgrun.
func TestConnectOnlyRoleGetsNothing(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "")
	c := runningJob(t, b, "w1")
	for _, q := range []string{
		`select pgrun.enqueue_job('noop')`,
		`select pgrun.claim_jobs('roles', 'x', 1)`,
		`select pgrun.maintain()`,
		`select pgrun.clock()`,
		`select * from pgrun.jobs`,
		`select * from pgrun.queue_stats`,
		`insert into pgrun.jobs (kind) values ('noop')`,
	} {
		testkit.Denied(t, b, p, q)
	}
	testkit.Denied(t, b, p, `select pgrun.cancel_job($1)`, c.ID)
}

// executed finds what each EXECUTE runs.
var executed = regexp.MustCompile(`(?i)\bexecute\s+([^\s;(]+)`)

// PUBLIC has no privilege on any pgrun function, and every SECURITY DEFINER function
// pins its search_path with pg_temp last and builds no SQL from caller strings.
func TestSecurityDefinerFunctionsArePinned(t *testing.T) {
	b := testkit.Setup(t)
	var public []string
	rows, err := b.Pool.Query(b.Ctx, `select p.oid::regprocedure::text from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		where p.pronamespace = 'pgrun'::regnamespace and a.grantee = 0`)
	require.NoError(t, err)
	for rows.Next() {
		var f string
		require.NoError(t, rows.Scan(&f))
		public = append(public, f)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, public, "functions PUBLIC may execute")

	// Collected before asserting: a failed assertion must not leave a connection busy.
	type definer struct{ F, Config, Src string }
	rows, err = b.Pool.Query(b.Ctx, `select p.oid::regprocedure::text as f, coalesce(array_to_string(p.proconfig, ';'), '') as config, p.prosrc as src
		from pg_proc p where p.pronamespace = 'pgrun'::regnamespace and p.prosecdef`)
	require.NoError(t, err)
	definers, err := pgx.CollectRows(rows, pgx.RowToStructByName[definer])
	require.NoError(t, err)
	n := len(definers)
	for _, d := range definers {
		// The search_path is pinned, and is the only setting a definer carries.
		require.Equal(t, "search_path=pgrun, pg_catalog, pg_temp", d.Config, d.F)
		// EXECUTE runs constant text only: a literal, or a variable declared
		// constant with a literal, with the values as parameters.
		for _, m := range executed.FindAllStringSubmatch(d.Src, -1) {
			what := m[1]
			if strings.HasPrefix(what, "'") || strings.EqualFold(what, "function") || strings.EqualFold(what, "procedure") {
				continue // a literal, or a trigger's EXECUTE FUNCTION
			}
			constant := regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(what) + `\s+constant\s+text\s*:=\s*'`)
			require.Regexp(t, constant, d.Src, "%s executes %q, not constant text", d.F, what)
		}
		require.NotContains(t, strings.ToLower(d.Src), "execute format", "%s builds SQL", d.F)
	}
	require.Greater(t, n, 30, "the role API runs as the engine")
}

// The clock seam is closed by default: a session's SET pgrun.now changes nothing
// unless an administrator enabled the test clock in pgrun.settings, which callers
// cannot write.
func TestClockSeamIsClosedToCallers(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `delete from pgrun.settings where name = 'test_clock'`)
	require.NoError(t, err)
	for _, role := range []string{"pgrun_enqueuer", "pgrun_worker"} {
		p := testkit.AsRole(t, b, role)
		conn, err := p.Acquire(b.Ctx)
		require.NoError(t, err)
		_, err = conn.Exec(b.Ctx, `set pgrun.now = '2099-01-01 00:00Z'`)
		require.NoError(t, err)
		var drift time.Duration
		require.NoError(t, conn.QueryRow(b.Ctx, `select extract(epoch from pgrun.clock() - now()) * interval '1 second'`).Scan(&drift))
		require.Zero(t, drift, role)
		conn.Release()
	}
	// A worker cannot claim a job due in a month by moving its clock.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop', queue => 'later', run_at => now() + interval '30 days')`)
	require.NoError(t, err)
	p := testkit.AsRole(t, b, "pgrun_worker")
	testkit.Allowed(t, b, p, `select pgrun.worker_heartbeat('w', 'h', 1, array['later'])`)
	conn, err := p.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.Ctx, `set pgrun.now = '2099-01-01 00:00Z'`)
	require.NoError(t, err)
	var got int
	require.NoError(t, conn.QueryRow(context.Background(), `select count(*) from pgrun.claim_jobs('later', 'w', 1)`).Scan(&got))
	require.Zero(t, got)
}

// A notification is a hint, never an authority: a role with CONNECT only can NOTIFY
// pgrun_cancel, and the runner ignores it because the database shows the job still
// running under its claim. A real cancel sent after the forged one proves the
// forged one was read (notifications arrive in order).
func TestForgedCancelIsIgnored(t *testing.T) {
	b := testkit.Setup(t)
	stopped := make(chan int64, 4)
	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"roles": {Workers: 4}}, MaintenanceInterval: -1})
	testkit.Handle(t, r, "hold", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		<-ctx.Done()
		stopped <- j.ID
		return nil, ctx.Err()
	})
	testkit.StartRunner(t, r)
	victim, err := pgrun.Enqueue(b.Ctx, b.Pool, "hold", nil, pgrun.Queue("roles"))
	require.NoError(t, err)
	witness, err := pgrun.Enqueue(b.Ctx, b.Pool, "hold", nil, pgrun.Queue("roles"))
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "both running", func() bool {
		return testkit.JobStatus(t, b, victim.ID) == pgrun.StatusRunning && testkit.JobStatus(t, b, witness.ID) == pgrun.StatusRunning
	})
	p := testkit.AsRole(t, b, "")
	for _, payload := range []string{fmt.Sprintf("%d:1", victim.ID), fmt.Sprint(victim.ID)} {
		_, err = p.Exec(b.Ctx, `select pg_notify('pgrun_cancel', $1)`, payload)
		require.NoError(t, err, "NOTIFY needs no privilege: the runner must not trust it")
	}
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'real')`, witness.ID)
	require.NoError(t, err)
	select {
	case id := <-stopped:
		require.Equal(t, witness.ID, id, "the forged cancel stopped a job")
	case <-time.After(10 * time.Second):
		t.Fatal("the real cancel did not reach the runner")
	}
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, victim.ID))
	require.Empty(t, stopped)
}

// Channel payloads carry no job args, and the runner logs no args at info.
func TestNoArgsInPayloadsOrInfoLogs(t *testing.T) {
	b := testkit.Setup(t)
	const secret = "s3cr3t-payload-xyz"
	var logs testkit.Buffer
	r := testkit.NewRunner(b.Pool, runner.Config{
		Logger:            slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		TelemetryInterval: 50 * time.Millisecond,
	})
	testkit.Handle(t, r, "leaky", func(ctx context.Context, j *runner.Job[map[string]string]) (any, error) {
		return nil, fmt.Errorf("failed on purpose")
	})
	conns := map[string]*pgx.Conn{}
	for _, ch := range []string{"pgrun_jobs", "pgrun_cancel", "pgrun_control", "pgrun_hw"} {
		conns[ch] = testkit.Listen(t, b, ch)
	}
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "leaky", map[string]string{"token": secret}, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	held, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindSleep, map[string]any{"ms": 60000, "token": secret})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the job failed", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusFailed })
	testkit.Eventually(t, 10*time.Second, "the sleep runs", func() bool { return testkit.JobStatus(t, b, held.ID) == pgrun.StatusRunning })
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1), pgrun.set_worker_control('h', '*', 'drain')`, held.ID)
	require.NoError(t, err)
	for ch, conn := range conns {
		for range 20 { // telemetry notifies forever: read a bounded number
			n := testkit.NextNotification(t, conn, 300*time.Millisecond)
			if n == nil {
				break
			}
			require.NotContains(t, n.Payload, secret, ch)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the cancel was logged", func() bool { return strings.Contains(logs.String(), "job stopped") })
	require.NotContains(t, logs.String(), secret)
}

// A runner connected as a pgrun_worker member does the whole job: it waits for the
// schema, claims, runs, reports, renews, heartbeats and records telemetry; it leaves
// maintenance (pgrun_admin's) to someone else and says so. An enqueuer's job reaches
// it through the same database.
func TestRunnerAsWorkerRole(t *testing.T) {
	b := testkit.Setup(t)
	worker := testkit.AsRole(t, b, "pgrun_worker")
	app := testkit.AsRole(t, b, "pgrun_enqueuer")
	var logs testkit.Buffer
	r := testkit.NewRunner(worker, runner.Config{
		Logger:            slog.New(slog.NewTextHandler(&logs, nil)),
		TelemetryInterval: 50 * time.Millisecond,
	})
	testkit.StartRunner(t, r)
	ok, err := pgrun.Enqueue(b.Ctx, app, runner.KindEcho, map[string]int{"n": 1})
	require.NoError(t, err)
	bad, err := pgrun.Enqueue(b.Ctx, app, runner.KindFail, map[string]any{"permanent": true})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "both finished", func() bool {
		return testkit.JobStatus(t, b, ok.ID) == pgrun.StatusSucceeded && testkit.JobStatus(t, b, bad.ID) == pgrun.StatusFailed
	})
	testkit.Eventually(t, 10*time.Second, "heartbeat and telemetry", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (select count(*) from pgrun.workers where id = $1)
			+ (select least(count(*), 1) from pgrun.hw_metrics)`, r.WorkerID()).Scan(&n))
		return n == 2
	})
	testkit.Eventually(t, 10*time.Second, "the runner says maintenance is not its to do", func() bool {
		return strings.Contains(logs.String(), "maintenance needs the pgrun_admin role")
	})
}
