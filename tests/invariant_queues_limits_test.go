package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// claimCount claims up to n jobs of queue for worker and returns how many it got.
func claimCount(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, queue, worker string, n int) int {
	t.Helper()
	var got int
	require.NoError(t, db.QueryRow(context.Background(), `select count(*) from pgrun.claim_jobs($1, $2, $3)`, queue, worker, n).Scan(&got))
	return got
}

// A paused queue hands out nothing; resumed, it does.
func TestPausedQueueIsNotClaimed(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("mail"))
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.pause_queue('mail')`)
	require.NoError(t, err)
	require.Zero(t, claimCount(t, b.Pool, "mail", "w", 10))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.resume_queue('mail')`)
	require.NoError(t, err)
	require.Equal(t, 1, claimCount(t, b.Pool, "mail", "w", 10))
}

// max_running holds across many concurrent claimers: at no moment do more jobs of the
// queue run than the limit.
func TestMaxRunningIsNeverExceeded(t *testing.T) {
	b := testkit.Setup(t)
	const limit = 5
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('limited', max_running => $1)`, limit)
	require.NoError(t, err)
	specs := make([]pgrun.JobSpec, 600)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "limited"}
	}
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)

	var peak atomic.Int64
	stop := make(chan struct{})
	monitor := make(chan struct{})
	go func() { // watch the running count while claimers race
		defer close(monitor)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'limited' and status = 'running'`).Scan(&n); err == nil && n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	var g errgroup.Group
	var done atomic.Int64
	for w := range 12 {
		g.Go(func() error {
			worker := fmt.Sprintf("w%d", w)
			for done.Load() < int64(len(specs)) {
				rows, err := b.Pool.Query(b.Ctx, `select id, attempt from pgrun.claim_jobs('limited', $1, 3)`, worker)
				if err != nil {
					return err
				}
				var ids []int64
				var attempts []int32
				var id int64
				var attempt int32
				if _, err := pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
					ids, attempts = append(ids, id), append(attempts, attempt)
					return nil
				}); err != nil {
					return err
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs($1, $2)`, ids, attempts); err != nil {
					return err
				}
				done.Add(int64(len(ids)))
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	close(stop)
	<-monitor
	require.Equal(t, len(specs), testkit.CountStatus(t, b, pgrun.StatusSucceeded))
	require.LessOrEqual(t, peak.Load(), int64(limit), "running jobs exceeded max_running")
	require.Positive(t, peak.Load())
}

// rate_limit allows at most N starts per period.
func TestRateLimitCapsStartsPerPeriod(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('api', rate_limit => 10, rate_period => '1 minute')`)
	c.Exec(`select pgrun.enqueue_jobs((select jsonb_agg(jsonb_build_object('kind', 'noop', 'queue', 'api', 'run_at', '2030-01-01T09:00:00Z')) from generate_series(1, 50)))`)
	require.Equal(t, 4, claimCount(t, c.Conn, "api", "w", 4))
	require.Equal(t, 6, claimCount(t, c.Conn, "api", "w", 100))
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100), "the window's 10 starts are spent")
	c.Set(now.Add(59 * time.Second))
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100))
	c.Set(now.Add(61 * time.Second))
	require.Equal(t, 10, claimCount(t, c.Conn, "api", "w", 100), "a new window")
}

// A rate window opens with the first claim that takes a job, not with a claim that
// found nothing: an idle worker's empty claim must not start a window that ends just
// after the first jobs arrive and lets the limit through twice in one period.
func TestRateWindowOpensOnAStart(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('api', rate_limit => 10, rate_period => '1 minute')`)
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100), "an idle queue")
	var start *time.Time
	c.QueryRow(`select rate_window_start from pgrun.queues where name = 'api'`, nil, &start)
	require.Nil(t, start, "no window opened by an empty claim")

	c.Set(now.Add(50 * time.Second))
	c.Exec(`select pgrun.enqueue_jobs((select jsonb_agg(jsonb_build_object('kind', 'noop', 'queue', 'api', 'run_at', '2030-01-01T09:00:00Z')) from generate_series(1, 50)))`)
	require.Equal(t, 10, claimCount(t, c.Conn, "api", "w", 100))
	c.Set(now.Add(61 * time.Second))
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100), "the window opened at the first start, 50 s in")
	c.Set(now.Add(111 * time.Second))
	require.Equal(t, 10, claimCount(t, c.Conn, "api", "w", 100), "a new window")
}

// concurrency_limit bounds running jobs per concurrency_key (per-tenant fairness);
// jobs without a key are not limited.
func TestConcurrencyKeyLimitsRunningPerKey(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('tenants', concurrency_limit => 2)`)
	require.NoError(t, err)
	var specs []pgrun.JobSpec
	for i := range 10 {
		specs = append(specs, pgrun.JobSpec{Kind: "noop", Queue: "tenants", ConcurrencyKey: "acme"},
			pgrun.JobSpec{Kind: "noop", Queue: "tenants", ConcurrencyKey: "globex"})
		if i < 3 {
			specs = append(specs, pgrun.JobSpec{Kind: "noop", Queue: "tenants"})
		}
	}
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	require.Equal(t, 7, claimCount(t, b.Pool, "tenants", "w", 100)) // 2 + 2 + 3 unkeyed
	require.Zero(t, claimCount(t, b.Pool, "tenants", "w", 100))
	var id int64
	var attempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt from pgrun.jobs where concurrency_key = 'acme' and status = 'running' limit 1`).Scan(&id, &attempt))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
	require.NoError(t, err)
	var key string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select concurrency_key from pgrun.claim_jobs('tenants', 'w', 100)`).Scan(&key))
	require.Equal(t, "acme", key, "the freed slot goes to the same tenant")
}

// Queue defaults fill what a job leaves unset; the queue's backoff shapes retries.
func TestQueueDefaultsAndBackoff(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('slow', default_max_attempts => 3, default_timeout => '2 minutes', backoff_base => '1 minute')`)
	var maxAttempts int
	var timeout time.Duration
	c.QueryRow(`select max_attempts, timeout from pgrun.enqueue_job('noop', queue => 'slow')`, nil, &maxAttempts, &timeout)
	require.Equal(t, 3, maxAttempts)
	require.Equal(t, 2*time.Minute, timeout)
	c.QueryRow(`select max_attempts from pgrun.enqueue_job('noop', queue => 'slow', max_attempts => 9)`, nil, &maxAttempts)
	require.Equal(t, 9, maxAttempts, "the job's own setting wins")
	var id int64
	var attempt int
	c.QueryRow(`select id, attempt from pgrun.claim_jobs('slow', 'w', 1)`, nil, &id, &attempt)
	var runAt time.Time
	c.QueryRow(`select run_at from pgrun.fail_job($1, $2, '{"message": "x"}')`, []any{id, attempt}, &runAt)
	require.GreaterOrEqual(t, runAt.Sub(now), 30*time.Second)
	require.LessOrEqual(t, runAt.Sub(now), time.Minute)

	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('slow', reset => array['bogus'])`)
	require.ErrorContains(t, err, "setting 'bogus' cannot be reset")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_queue('slow', max_running => -1)`)
	require.Equal(t, "22023", testkit.SQLState(err))
	var mr *int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max_running from pgrun.set_queue('slow', max_running => 4)`).Scan(&mr))
	require.Equal(t, 4, *mr)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max_running from pgrun.set_queue('slow', reset => array['max_running'])`).Scan(&mr))
	require.Nil(t, mr)
}

// A claim without a lease takes the queue's default_lease; renewals too.
func TestQueueDefaultLease(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('long', default_lease => '5 minutes')`)
	c.Exec(`select pgrun.enqueue_job('noop', queue => 'long')`)
	var until time.Time
	c.QueryRow(`select lease_expires_at from pgrun.claim_jobs('long', 'w', 1)`, nil, &until)
	require.Equal(t, now.Add(5*time.Minute), until.UTC())
	c.Set(now.Add(time.Minute))
	c.Exec(`select pgrun.renew_leases('w')`)
	c.QueryRow(`select lease_expires_at from pgrun.jobs where queue = 'long'`, nil, &until)
	require.Equal(t, now.Add(6*time.Minute), until.UTC())
	c.Exec(`select pgrun.enqueue_job('noop')`)
	c.QueryRow(`select lease_expires_at from pgrun.claim_jobs('default', 'w', 1)`, nil, &until)
	require.Equal(t, now.Add(time.Minute+30*time.Second), until.UTC(), "no queue default: 30 seconds")
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('long', default_lease => '5 seconds')`)
	require.ErrorContains(t, err, "too short")
}

// When jobs of a queue with max_running or concurrency_limit leave running, the
// queue's claimers are woken once the statement that made the room commits (a claim
// before that would still count the jobs): a completion, a failure sent back to the
// queue, an ephemeral queue's completion, which deletes. A queue without such a limit
// wakes nobody when its jobs finish, and neither does a claim, a lease renewal or a
// completion rolled back; an ephemeral queue's completion wakes its own queue only, not
// every ephemeral queue with a limit.
func TestRoomUnderALimitWakesTheQueuesClaimers(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('plain')`,
		`select pgrun.set_queue('limited', max_running => 1)`,
		`select pgrun.set_queue('keyed', concurrency_limit => 1)`,
		`select pgrun.set_queue('gone', max_running => 1, ephemeral => true)`,
		`select pgrun.set_queue('also_gone', max_running => 1, ephemeral => true)`)
	claimed := map[string]*pgrun.Job{}
	for _, q := range []string{"plain", "limited", "keyed", "gone"} {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue(q), pgrun.ConcurrencyKey("key-of-"+q))
		require.NoError(t, err)
		var j pgrun.Job
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs($1, 'w', 1)`, q).Scan(&j.ID, &j.Attempt), q)
		claimed[q] = &j
	}
	l := listener(t, b) // from here on: the enqueues' wake-ups were sent before it listened
	woken := func(what string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		defer cancel()
		n, err := l.WaitForNotification(ctx)
		require.NoError(t, err, what)
		return n.Payload
	}
	complete := `select count(*) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w')`

	_, err := b.Pool.Exec(b.Ctx, `select pgrun.renew_leases('w')`)
	require.NoError(t, err)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.Ctx, complete, claimed["limited"].ID, claimed["limited"].Attempt)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	_, err = b.Pool.Exec(b.Ctx, complete, claimed["plain"].ID, claimed["plain"].Attempt)
	require.NoError(t, err)
	require.True(t, quietFor(t, l, 300*time.Millisecond),
		"a lease renewal, a completion rolled back or one in a queue without limits woke a claimer")

	_, err = b.Pool.Exec(b.Ctx, complete, claimed["limited"].ID, claimed["limited"].Attempt)
	require.NoError(t, err)
	require.Equal(t, "limited", woken("a completion under max_running"))

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.fail_job($1, $2, '{"message": "again"}', true, 'w')`,
		claimed["keyed"].ID, claimed["keyed"].Attempt)
	require.NoError(t, err)
	require.Equal(t, "keyed", woken("a failure sent back under concurrency_limit"))

	_, err = b.Pool.Exec(b.Ctx, complete, claimed["gone"].ID, claimed["gone"].Attempt)
	require.NoError(t, err)
	require.Equal(t, "gone", woken("an ephemeral queue's completion under max_running"))
	var left int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'gone'`).Scan(&left))
	require.Zero(t, left, "the ephemeral job was deleted")
	require.True(t, quietFor(t, l, 300*time.Millisecond), "one wake-up per queue and statement")
}
