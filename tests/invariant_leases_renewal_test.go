package tests

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// kitMaintain runs maintain(args) on c and decodes what it did.
func kitMaintain(t *testing.T, c *testkit.Clock, args string) map[string]any {
	t.Helper()
	var out string
	c.QueryRow(`select pgrun.maintain(`+args+`)::text`, nil, &out)
	var did map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &did))
	return did
}

// A renewed lease is judged by its new expiry: maintain() past the first expiry
// leaves the job running; past the renewed one it requeues it. renew_leases with ids
// NULL renews every running job of the worker and no one else's.
func TestRenewedLeaseOutlivesItsFirstExpiry(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}, {"kind": "c"}]')`)
	mine := testkit.ClaimN(t, c.Conn, "default", "w1", 2, "30 seconds")
	theirs := testkit.ClaimN(t, c.Conn, "default", "w2", 1, "30 seconds")
	require.Len(t, mine, 2)
	require.Len(t, theirs, 1)

	c.Set(t0.Add(20 * time.Second))
	var renewed []int64
	c.QueryRow(`select coalesce(array_agg(x order by x), '{}') from pgrun.renew_leases('w1', null, '30 seconds') x`, nil, &renewed)
	require.Equal(t, []int64{mine[0].ID, mine[1].ID}, renewed)
	var until time.Time
	c.QueryRow(`select lease_expires_at from pgrun.jobs where id = $1`, []any{theirs[0].ID}, &until)
	require.True(t, until.Equal(t0.Add(30*time.Second)), "w2's lease is not w1's to renew")

	c.Set(t0.Add(31 * time.Second))
	did := kitMaintain(t, c, "")
	require.EqualValues(t, 1, did["lease_requeued"], "only w2's unrenewed lease ran out")
	for _, m := range mine {
		require.Equal(t, "running", string(testkit.JobStatus(t, b, m.ID)))
	}

	c.Set(t0.Add(51 * time.Second))
	did = kitMaintain(t, c, "")
	require.EqualValues(t, 2, did["lease_requeued"])
	for _, m := range mine {
		require.Equal(t, "queued", string(testkit.JobStatus(t, b, m.ID)))
	}
}

// With lease_budget 0 the first expiry fails the job (class lease_expired).
func TestLeaseBudgetZeroFailsOnTheFirstExpiry(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('noop')`, nil, &id)
	testkit.ClaimN(t, c.Conn, "default", "gone", 1, "10 seconds")
	c.Set(t0.Add(11 * time.Second))
	did := kitMaintain(t, c, "lease_budget => 0")
	require.EqualValues(t, 1, did["lease_failed"])
	require.EqualValues(t, 0, did["lease_requeued"])
	var status, class string
	var finished *time.Time
	var expiries int
	c.QueryRow(`select status::text, error->>'class', finished_at, lease_expiries from pgrun.jobs where id = $1`,
		[]any{id}, &status, &class, &finished, &expiries)
	require.Equal(t, "failed", status)
	require.Equal(t, "lease_expired", class)
	require.NotNil(t, finished)
	require.True(t, finished.Equal(t0.Add(11*time.Second)))
	require.Equal(t, 1, expiries)
	ev := kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.lease_expired", ev.Event)
	require.Equal(t, "error", ev.Level)
	require.Equal(t, "gone", ev.Fields["worker"])
}

// Once a job's lease ran out and another worker claimed it, nothing the old holder
// sends changes it: no report under the old attempt, and no renewal.
func TestReclaimedJobIgnoresTheOldHolder(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('noop')`, nil, &id)
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, testkit.ClaimN(t, c.Conn, "default", "old", 1, "30 seconds"))
	c.Set(t0.Add(31 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["lease_requeued"])
	ev := kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.lease_expired_requeue", ev.Event)
	require.EqualValues(t, 1, ev.Fields["lease_expiries"])
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 2}}, testkit.ClaimN(t, c.Conn, "default", "new", 1, "30 seconds"))

	held := testkit.Snap(t, c.Conn, id)
	for _, tr := range kitTransitions {
		require.Nil(t, testkit.NullID(t, c.Conn, tr.sql, id, 1), "%s from the old holder", tr.name)
	}
	c.Set(t0.Add(40 * time.Second))
	var renewed []int64
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.renew_leases('old', array[$1::bigint], '5 minutes') x`,
		[]any{id}, &renewed)
	require.Empty(t, renewed, "the old holder is told the job is no longer its")
	require.Equal(t, held, testkit.Snap(t, c.Conn, id), "the old holder changed the job")

	require.NotNil(t, testkit.NullID(t, c.Conn, kitTransitions[0].sql, id, 2), "the new holder completes it")
	require.Equal(t, "succeeded", string(testkit.JobStatus(t, b, id)))
}

// On the last attempt a timed-out job fails for good (class timeout), and its worker
// is told on pgrun_cancel.
func TestTimeoutOnTheLastAttemptFailsAndTellsTheWorker(t *testing.T) {
	b := testkit.Setup(t)
	cancels := testkit.Listen(t, b, "pgrun_cancel")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('slow', max_attempts => 1, timeout => '10 seconds')`, nil, &id)
	testkit.ClaimN(t, c.Conn, "default", "w", 1, "1 hour")

	c.Set(t0.Add(59 * time.Second)) // past the timeout, silent for less than the stall window
	require.EqualValues(t, 0, kitMaintain(t, c, "stall_window => '1 minute'")["timed_out"])
	require.Equal(t, "running", string(testkit.JobStatus(t, b, id)))
	c.Set(t0.Add(61 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "stall_window => '1 minute'")["timed_out"])

	var status, class string
	var finished *time.Time
	c.QueryRow(`select status::text, coalesce(error->>'class', ''), finished_at from pgrun.jobs where id = $1`, []any{id}, &status, &class, &finished)
	require.Equal(t, "failed", status, "no attempts remain")
	require.Equal(t, "timeout", class)
	require.NotNil(t, finished)
	ev := kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.failed", ev.Event)
	require.Equal(t, true, ev.Fields["final"])
	n := testkit.NextNotification(t, cancels, 5*time.Second)
	require.NotNil(t, n, "the worker was not told to stop")
	require.Regexp(t, "^"+strconv.FormatInt(id, 10)+":[0-9]+$", n.Payload, "payload is id:attempt")
}

// Progress and events are signs of life too: a job past its timeout that reported
// progress or emitted an event within the stall window is spared; a silent one is not.
func TestProgressAndEventsCountAsSignsOfLife(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "silent", "timeout": "10 seconds"},
		{"kind": "progressing", "timeout": "10 seconds"}, {"kind": "chatty", "timeout": "10 seconds"}]')`)
	testkit.ClaimN(t, c.Conn, "default", "w", 3, "1 hour")
	ids := map[string]int64{}
	for _, k := range []string{"silent", "progressing", "chatty"} {
		var id int64
		c.QueryRow(`select id from pgrun.jobs where kind = $1`, []any{k}, &id)
		ids[k] = id
	}
	c.Set(t0.Add(50 * time.Second))
	c.Exec(`select pgrun.set_progress($1, 10, 100)`, ids["progressing"])
	c.Exec(`select pgrun.emit($1, 'batch.half')`, ids["chatty"])
	c.Set(t0.Add(70 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "stall_window => '1 minute'")["timed_out"])
	require.Equal(t, "queued", string(testkit.JobStatus(t, b, ids["silent"])), "timed out, retried")
	require.Equal(t, "running", string(testkit.JobStatus(t, b, ids["progressing"])))
	require.Equal(t, "running", string(testkit.JobStatus(t, b, ids["chatty"])))
}
