package tests

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// maintainOut runs sql (a maintain() call returning jsonb as text) on c and decodes it.
func maintainOut(t *testing.T, c *testkit.Clock, sql string, args ...any) map[string]any {
	t.Helper()
	var out string
	c.QueryRow(sql, args, &out)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	return m
}

// Leadership is a lease in a table: the holder renews it each round, a candidate is
// turned away while it is current, and takes over once it has lapsed; the old
// leader is then turned away in its turn.
func TestMaintenanceLeaseExpires(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	call := `select pgrun.maintain(leader => $1, leader_lease => '3 seconds')::text`

	require.NotContains(t, maintainOut(t, c, call, "a"), "skipped", "the first candidate leads")
	c.Set(t0.Add(time.Second))
	out := maintainOut(t, c, call, "b")
	require.Equal(t, true, out["skipped"])
	require.Equal(t, "a", out["leader"])
	c.Set(t0.Add(2 * time.Second))
	require.NotContains(t, maintainOut(t, c, call, "a"), "skipped", "the leader renews")
	c.Set(t0.Add(4500 * time.Millisecond))
	require.Equal(t, true, maintainOut(t, c, call, "b")["skipped"], "renewed at +2 s: current until +5 s")
	c.Set(t0.Add(5100 * time.Millisecond))
	require.NotContains(t, maintainOut(t, c, call, "b"), "skipped", "a lapsed lease is taken over")
	c.Set(t0.Add(5200 * time.Millisecond))
	out = maintainOut(t, c, call, "a")
	require.Equal(t, true, out["skipped"], "the old leader, back from a freeze, does not lead")
	require.Equal(t, "b", out["leader"])
}

// No lock a session can take stops maintenance: neither the advisory lock keys the
// engine used to lead with nor an open transaction that has seen the leader row.
// And a candidate never waits for the leader's round: while the leader's round is
// in flight it is turned away at once.
func TestNoSessionCanHoldUpMaintenance(t *testing.T) {
	b := testkit.Setup(t)
	blocker, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer blocker.Release()
	_, err = blocker.Exec(b.Ctx, `select pg_advisory_lock(hashtext('pgrun.maintain')), pg_advisory_lock($1)`, 0x7067726d)
	require.NoError(t, err)
	defer blocker.Exec(context.Background(), `select pg_advisory_unlock_all()`) //nolint:errcheck

	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop')`).Scan(&id))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('default', 'ghost', 1, '1 second')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set lease_expires_at = now() - interval '1 minute' where id = $1`, id)
	require.NoError(t, err)

	var out string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain(leader => 'a')::text`).Scan(&out))
	require.Contains(t, out, `"lease_requeued": 1`, "maintenance ran despite the session locks")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, id))

	// The leader's round is in flight (its transaction holds the leader row).
	leader, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer leader.Rollback(b.Ctx) //nolint:errcheck
	require.NoError(t, leader.QueryRow(b.Ctx, `select pgrun.maintain(leader => 'a')::text`).Scan(&out))
	require.NotContains(t, out, "skipped")
	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, b.Pool.QueryRow(ctx, `select pgrun.maintain(leader => 'b')::text`).Scan(&out))
	require.Contains(t, out, `"skipped": true`)
}

// One poisonous row does not stop maintenance: a job that the lease reaper's update
// cannot write (here a trigger of the test refuses it, as a row carrying a key too
// long for an index once did) makes the reaper's batch fail; the step is named, its
// rows are retried one by one, the poisonous job ends failed (class
// maintenance_error, naming the step), the other expired job is requeued, and the
// other steps still run that round.
func TestPoisonousRowDoesNotStopMaintenance(t *testing.T) {
	b := testkit.Setup(t)
	var poison, healthy int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', unique_key => 'poison')`).Scan(&poison))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop')`).Scan(&healthy))
	_, err := b.Pool.Exec(b.Ctx, `update pgrun.jobs set lease_expiries = 3 where id = $1`, poison)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `create function pgrun.test_poison() returns trigger language plpgsql as $$
		begin
		  if new.unique_key = 'poison' and new.status = 'failed' and new.error ->> 'class' <> 'maintenance_error' then
		    raise exception 'poisonous row' using errcode = '54000';
		  end if;
		  return new;
		end $$;
		create trigger test_poison before update on pgrun.jobs for each row execute function pgrun.test_poison()`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('default', 'ghost', 5, '1 second')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set lease_expires_at = now() - interval '1 minute' where id in ($1, $2)`, healthy, poison)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_schedule('tick', '@every 1s', 'noop')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.schedules set next_fire_at = now() - interval '1 second'`)
	require.NoError(t, err)

	var out string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain()::text`).Scan(&out))
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	require.Contains(t, m["errors"], "reap_expired_leases", out)
	require.EqualValues(t, 1, m["schedules_fired"], "the other steps ran: %s", out)

	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, healthy), "the healthy job was requeued")
	j, err := pgrun.GetJob(b.Ctx, b.Pool, poison)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Contains(t, string(j.Error), `"class": "maintenance_error"`)
	require.Contains(t, string(j.Error), `"step": "reap_expired_leases"`)

	// The next round is clean.
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain()::text`).Scan(&out))
	require.NotContains(t, out, "errors")
}

// A step that fails is reported by name and the others still run: a schedule row
// that cannot be evaluated (written around set_schedule) fails fire_schedules, while
// the lease reaper requeues an expired job in the same round.
func TestFailingStepIsNamedAndOthersRun(t *testing.T) {
	b := testkit.Setup(t)
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop')`).Scan(&id))
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('default', 'ghost', 1, '1 second')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set lease_expires_at = now() - interval '1 minute' where id = $1`, id)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.schedules (name, cron, kind, next_fire_at)
		values ('broken', 'not a cron', 'noop', now() - interval '1 minute')`)
	require.NoError(t, err)

	var out string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain()::text`).Scan(&out))
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	errs, ok := m["errors"].(map[string]any)
	require.True(t, ok, out)
	require.Contains(t, errs["fire_schedules"], "five fields", out)
	require.EqualValues(t, 1, m["lease_requeued"], out)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, id))
}

// Keys are indexed, so they are bounded at enqueue: a key that could not enter its
// index (and would fail every later write of its row, or every claim of its queue)
// is refused with an error naming the limit, and nothing is written.
func TestLongKeysAreRefusedAtEnqueue(t *testing.T) {
	b := testkit.Setup(t)
	before := testkit.Counts(t, b.Pool)
	long := strings.Repeat("k", 3000)
	for _, sql := range []string{
		`select pgrun.enqueue_job('noop', unique_key => $1)`,
		`select pgrun.enqueue_job('noop', concurrency_key => $1)`,
		`insert into pgrun.jobs (kind, unique_key) values ('noop', $1)`,
		`select pgrun.enqueue_jobs(jsonb_build_array(jsonb_build_object('kind', 'noop', 'concurrency_key', $1::text)))`,
	} {
		_, err := b.Pool.Exec(b.Ctx, sql, long)
		pe := testkit.PgError(t, err, sql)
		require.Equal(t, "22023", pe.Code, sql)
		require.Contains(t, pe.Message, "over the limit of 512 bytes", sql)
		require.NotEmpty(t, pe.Hint, sql)
	}
	require.Equal(t, before, testkit.Counts(t, b.Pool))
}

// A frozen leader loses maintenance within three rounds: SIGSTOP the runner that
// leads (a GC pause, a stuck VM, a partition that keeps its TCP session open), and
// another runner takes the lease over and reaps the jobs of a dead worker.
func TestFrozenLeaderLosesMaintenance(t *testing.T) {
	b := testkit.Setup(t)
	leader := func() string {
		var h string
		err := b.Pool.QueryRow(b.Ctx, `select holder from pgrun.maintenance_leader where name = 'maintain'`).Scan(&h)
		if err != nil {
			return ""
		}
		return h
	}
	a := startWorker(t, b, "--worker-id", "frozen-a", "--queues", "default=2")
	testkit.Eventually(t, 20*time.Second, "a leads", func() bool { return leader() == "frozen-a" })
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = a.Cmd.Process.Signal(syscall.SIGCONT) })
	stopped := time.Now()

	// A worker died holding a job of a queue nobody else serves.
	var orphan int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', queue => 'orphans')`).Scan(&orphan))
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('orphans', 'dead-worker', 1, '1 second')`)
	require.NoError(t, err)

	startWorker(t, b, "--worker-id", "live-b", "--queues", "default=2")
	testkit.Eventually(t, 20*time.Second, "b took over and reaped the dead worker's job", func() bool {
		return leader() == "live-b" && testkit.JobStatus(t, b, orphan) == pgrun.StatusQueued
	})
	t.Logf("takeover %s after SIGSTOP (lease: three 1 s rounds)", time.Since(stopped).Round(100*time.Millisecond))
}
