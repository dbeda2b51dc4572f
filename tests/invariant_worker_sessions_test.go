package tests

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// A runner's liveness is tied to a database session it holds open (its LISTEN
// connection) through a session-level advisory lock (pgrun.bind_worker_session).
// When that session ends, maintenance (pgrun.reap_lost_sessions) flags the worker
// dead and hands its jobs back within a round or two, not a lease; where the
// session stays open (a frozen process, a network partition) the lease remains the
// bound.

// lostSessions is what the reap_lost_sessions step of a maintain() round did:
// {"workers": flagged dead, "rows": jobs handed back, "failed": of those, failed}.
func lostSessions(t *testing.T, did map[string]any) map[string]any {
	t.Helper()
	steps, ok := did["steps"].(map[string]any)
	require.True(t, ok, "no steps in %v", did)
	step, ok := steps["reap_lost_sessions"].(map[string]any)
	require.True(t, ok, "reap_lost_sessions did not run: %v", steps)
	return step
}

// sessionsEnded is how many workers a maintain() round found dead by their session.
func sessionsEnded(t *testing.T, did map[string]any) float64 {
	t.Helper()
	n, _ := lostSessions(t, did)["workers"].(float64)
	return n
}

// bindSession opens a connection of its own on b, binds worker to it and returns it:
// what a runner's listener does when it connects.
func bindSession(t *testing.T, b *testkit.DB, worker string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	var state string
	require.NoError(t, conn.QueryRow(b.Ctx, `select pgrun.bind_worker_session($1, $2)`, worker, int32(conn.PgConn().PID())).Scan(&state))
	require.Equal(t, "bound", state)
	return conn
}

// sessionGone waits until the server has seen conn's session, which the test closed,
// end: its backend exits a moment after the socket closes.
func sessionGone(t *testing.T, b *testkit.DB, worker string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the closed session's lock to go", func() bool {
		var gone bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.worker_session_gone($1)`, worker).Scan(&gone))
		return gone
	})
}

// The jobs of a worker whose session ended come back at once, long before their
// leases: the first round notes the session gone, a round at least
// session_confirm (500 ms) later flags the worker dead and requeues its jobs as the
// lease reaper would (an expiry counted, no attempt spent, job.lease_expired_requeue),
// with a worker.dead event on each. worker_status shows it dead. A worker that binds
// again is told it had been judged dead ('revived'), and is alive again.
func TestJobsOfAWorkerWhoseSessionEndedComeBackBeforeTheirLease(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Now().UTC().Truncate(time.Second) // leases are judged by the pinned clock
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}')`)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}]')`)
	var ids []int64
	c.QueryRow(`select array_agg(id) from pgrun.claim_jobs('default', 'w1', 2, '10 minutes')`, nil, &ids)
	require.Len(t, ids, 2)
	session := bindSession(t, b, "w1")

	c.Set(t0.Add(time.Second))
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "the session is open")
	require.NoError(t, session.Close(b.Ctx))
	sessionGone(t, b, "w1")

	c.Set(t0.Add(2 * time.Second))
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "first seen gone: noted")
	c.Set(t0.Add(2*time.Second + 400*time.Millisecond))
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "gone for less than session_confirm")
	require.Equal(t, 2, runningBy(t, b, ids))
	c.Set(t0.Add(2*time.Second + 600*time.Millisecond))
	did := kitMaintain(t, c, "")
	require.EqualValues(t, 1, sessionsEnded(t, did))
	require.EqualValues(t, 2, lostSessions(t, did)["rows"], "their jobs handed back")
	require.EqualValues(t, 0, did["lease_requeued"], "no lease had run out")

	for _, id := range ids {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 1, j.Attempt)
		require.Zero(t, j.Failures, "a dead worker is not the job's failure")
		require.Equal(t, 1, j.LeaseExpiries, "counted as a lost lease, as the reaper counts one")
		evs, err := pgrun.Events(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		var names []string
		for _, e := range evs {
			names = append(names, e.Event)
		}
		require.Contains(t, names, "worker.dead")
		require.Contains(t, names, "job.lease_expired_requeue")
	}
	var cause string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select fields ->> 'cause' from pgrun.job_events
		where event = 'job.lease_expired_requeue' and job_id = $1`, ids[0]).Scan(&cause))
	require.Equal(t, "session_ended", cause)
	var liveness string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select liveness from pgrun.worker_status where id = 'w1'`).Scan(&liveness))
	require.Equal(t, "dead", liveness)
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "judged once")

	// It was alive after all (its connection had been cut): binding again says so.
	again, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	defer again.Close(b.Ctx)
	var state string
	require.NoError(t, again.QueryRow(b.Ctx, `select pgrun.bind_worker_session('w1')`).Scan(&state))
	require.Equal(t, "revived", state)
	var flagged *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select flagged_dead_at from pgrun.workers where id = 'w1'`).Scan(&flagged))
	require.Nil(t, flagged)
}

// A session that is bound again before session_confirm has passed (a runner whose
// LISTEN connection broke reconnects at once) is not taken for a death.
func TestWorkerThatBindsAgainAtOnceIsNotJudgedDead(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}')`)
	c.Exec(`select pgrun.enqueue_job('a')`)
	id, _ := testkit.ClaimOne(t, c.Conn, "w1", "10 minutes")
	first := bindSession(t, b, "w1")
	require.NoError(t, first.Close(b.Ctx))
	sessionGone(t, b, "w1")
	c.Set(t0.Add(time.Second))
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "first seen gone")
	bindSession(t, b, "w1")
	c.Set(t0.Add(5 * time.Second))
	require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "bound again: alive")
	require.Equal(t, 1, runningBy(t, b, []int64{id}))
	var lost *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select session_lost_at from pgrun.workers where id = 'w1'`).Scan(&lost))
	require.Nil(t, lost)
}

// After a server start, a promotion or a gap in the rounds, every session was cut
// and the runners are still coming back: no worker is judged by its session within
// three of its heartbeat cadences of the epoch.
func TestLostSessionsAreNotJudgedWithinTheGraceAfterAnEpoch(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}', cadence => '10 seconds')`)
	c.Exec(`select pgrun.enqueue_job('a')`)
	id, _ := testkit.ClaimOne(t, c.Conn, "w1", "10 minutes")
	session := bindSession(t, b, "w1")
	require.NoError(t, session.Close(b.Ctx))
	sessionGone(t, b, "w1")
	back := t0.Add(time.Minute)
	setEpoch(c, back)
	for _, at := range []time.Duration{time.Second, 10 * time.Second, 29 * time.Second} {
		c.Set(back.Add(at))
		require.EqualValues(t, 0, sessionsEnded(t, kitMaintain(t, c, "")), "%s after the epoch", at)
	}
	require.Equal(t, 1, runningBy(t, b, []int64{id}))
	c.Set(back.Add(31 * time.Second))
	kitMaintain(t, c, "")
	c.Set(back.Add(32 * time.Second))
	require.EqualValues(t, 1, sessionsEnded(t, kitMaintain(t, c, "")), "past the grace")
}

// bind_worker_session binds nothing it cannot stand behind: a session whose backend
// is not the one the client was given (a pooler in between), an id not registered
// yet, and a lock another session holds, which also unbinds the worker so that it is
// judged by its leases rather than by a session it does not hold.
func TestBindWorkerSessionRefusesWhatItCannotHold(t *testing.T) {
	b := testkit.Setup(t)
	conn, err := pgx.Connect(b.Ctx, b.URL)
	require.NoError(t, err)
	defer conn.Close(b.Ctx)
	bind := func(worker string, pid int32) string {
		var state string
		require.NoError(t, conn.QueryRow(b.Ctx, `select pgrun.bind_worker_session($1, $2)`, worker, pid).Scan(&state))
		return state
	}
	require.Equal(t, "unregistered", bind("w1", int32(conn.PgConn().PID())))
	testkit.ExecAll(t, b, `select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}')`)
	require.Equal(t, "pooled", bind("w1", int32(conn.PgConn().PID())+1))
	bindSession(t, b, "w1")
	require.Equal(t, "held", bind("w1", int32(conn.PgConn().PID())))
	var pid *int32
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select session_pid from pgrun.workers where id = 'w1'`).Scan(&pid))
	require.Nil(t, pid, "a worker whose lock another session holds is judged by its leases")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.bind_worker_session($1)`, strings.Repeat("w", 201))
	require.Equal(t, "22023", testkit.SQLState(err), "a worker id over 200 characters")
}

// A maintenance leader whose session is seen gone loses the lease at once, so that
// the round that hands its jobs back is not three rounds away.
func TestLeaderWhoseSessionEndedLosesMaintenanceAtOnce(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}')`)
	session := bindSession(t, b, "w1")
	take := func(who string) bool {
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.take_maintenance($1, '1 hour')`, who).Scan(&ok))
		return ok
	}
	require.True(t, take("w1"))
	require.False(t, take("w2"), "w1 leads and lives")
	require.NoError(t, session.Close(b.Ctx))
	sessionGone(t, b, "w1")
	require.True(t, take("w2"), "w1's session ended")
}

// The real binary: a runner killed with SIGKILL while it holds jobs has them running
// again on the other runner within a few maintenance rounds, long before their
// 30 s leases run out, and is shown dead.
func TestKilledRunnerJobsRunElsewhereBeforeTheirLease(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueSleeps(t, b, 3, 600_000)
	victim := startWorker(t, b, "--worker-id", "victim", "--queues", "default=3")
	testkit.Eventually(t, 20*time.Second, "the victim holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })
	testkit.Eventually(t, 10*time.Second, "the victim's session to be bound", func() bool {
		var bound bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select session_pid is not null from pgrun.workers where id = 'victim'`).Scan(&bound))
		return bound
	})
	startWorker(t, b, "--worker-id", "survivor", "--queues", "default=3")
	testkit.Eventually(t, 20*time.Second, "the survivor to register", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.workers where id = 'survivor'`).Scan(&n))
		return n == 1
	})
	var leaseEnds time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(lease_expires_at) from pgrun.jobs where id = any($1)`, ids).Scan(&leaseEnds))

	require.NoError(t, victim.Cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, 128+int(syscall.SIGKILL), victim.Wait(t, 10*time.Second))
	killed := time.Now()
	testkit.Eventually(t, 15*time.Second, "the victim's jobs to run on the survivor", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs
			where id = any($1) and status = 'running' and claimed_by = 'survivor'`, ids).Scan(&n))
		return n == len(ids)
	})
	t.Logf("the killed runner's jobs ran elsewhere %s after the kill", time.Since(killed).Round(time.Millisecond))
	var requeuedAt time.Time
	var causes []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(at), array_agg(distinct fields ->> 'cause') from pgrun.job_events
		where job_id = any($1) and event = 'job.lease_expired_requeue'`, ids).Scan(&requeuedAt, &causes))
	require.Equal(t, []string{"session_ended"}, causes)
	require.True(t, requeuedAt.Before(leaseEnds), "requeued at %s, before the leases ran out at %s", requeuedAt, leaseEnds)
	var liveness string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select liveness from pgrun.worker_status where id = 'victim'`).Scan(&liveness))
	require.Equal(t, "dead", liveness)
}

// A frozen runner (SIGSTOP) keeps its session open, as a partitioned one would: the
// database cannot tell it from a live one, so its jobs come back only when their
// leases run out, never before.
func TestFrozenRunnerJobsWaitForTheirLease(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueSleeps(t, b, 2, 600_000)
	frozen := startWorker(t, b, "--worker-id", "frozen", "--queues", "default=2", "--lease", "3s")
	testkit.Eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })
	testkit.Eventually(t, 10*time.Second, "its session to be bound", func() bool {
		var bound bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select session_pid is not null from pgrun.workers where id = 'frozen'`).Scan(&bound))
		return bound
	})
	startWorker(t, b, "--worker-id", "survivor", "--queues", "default=2")
	require.NoError(t, frozen.Cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	t.Cleanup(func() { _ = frozen.Cmd.Process.Signal(syscall.SIGCONT) })
	testkit.Eventually(t, 30*time.Second, "the frozen runner's jobs to run elsewhere", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs
			where id = any($1) and status = 'running' and claimed_by = 'survivor'`, ids).Scan(&n))
		return n == len(ids)
	})
	t.Logf("the frozen runner's jobs ran elsewhere %s after it stopped", time.Since(stopped).Round(time.Millisecond))
	rows, err := b.Pool.Query(b.Ctx, `select e.at, e.fields from pgrun.job_events e
		where e.job_id = any($1) and e.event = 'job.lease_expired_requeue'`, ids)
	require.NoError(t, err)
	type requeue struct {
		At     time.Time
		Fields json.RawMessage
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[requeue])
	require.NoError(t, err)
	require.Len(t, got, len(ids))
	for _, r := range got {
		require.NotContains(t, string(r.Fields), "session_ended", "its session never ended")
		require.GreaterOrEqual(t, r.At.Sub(stopped), 2*time.Second, "not before a lease could run out")
	}
	var sessionLost *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select session_lost_at from pgrun.workers where id = 'frozen'`).Scan(&sessionLost))
	require.Nil(t, sessionLost, "its session is open")
}
