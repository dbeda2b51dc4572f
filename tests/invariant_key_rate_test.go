package tests

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun/internal/testkit"
)

// Per-key limits (sql/functions/38_claim_keys.sql): key_rate_limit claims per
// concurrency_key per key_rate_period and concurrency_limit running jobs per key, exact
// across claimers (the claim holds the queue's row lock); a key at its limit never
// holds up the keys behind it.

// key_rate_limit caps the claims of each key per window: the window opens with the
// key's first claim and ends a period later, whatever the other keys do; a key's
// blocked job says so (job_blocker) until the window ends.
func TestKeyRateLimitCapsClaimsPerKeyAndWindow(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('api', key_rate_limit => 3, key_rate_period => '1 minute')`)
	c.Exec(`select pgrun.worker_heartbeat('w', 'h', 1, array['api'])`) // a live worker serves the queue
	c.Exec(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'noop', 'queue', 'api',
		'concurrency_key', case when i <= 10 then 'x' else 'y' end, 'run_at', '2030-01-01T09:00:00Z')))
		from generate_series(1, 20) i`)
	require.Equal(t, 6, claimCount(t, c.Conn, "api", "w", 100), "three of each key")
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100), "both windows are full")
	var why string
	c.QueryRow(`select pgrun.job_blocker(min(id)) from pgrun.jobs where status = 'queued' and concurrency_key = 'x'`, nil, &why)
	require.Equal(t, "the rate window of key x is full (3/3) until 2030-01-01 10:01:00+00", why)

	c.Set(now.Add(59 * time.Second))
	require.Zero(t, claimCount(t, c.Conn, "api", "w", 100))
	c.Set(now.Add(61 * time.Second))
	require.Equal(t, 6, claimCount(t, c.Conn, "api", "w", 100), "new windows")
	var windows int
	c.QueryRow(`select count(*) from pgrun.key_rate_windows where queue = 'api' and count = 3`, nil, &windows)
	require.Equal(t, 2, windows)
}

// A key at its limit at the front of the queue does not starve the keys behind it:
// 2,000 due jobs of key x come first in the queue's order (further than the claim's
// look-ahead), x reaches its limit, and key y's jobs behind them are claimed as y's
// own limit allows. So with concurrency_limit, with key_rate_limit, and with fairness.
func TestAKeyAtItsLimitDoesNotHoldUpTheKeysBehindIt(t *testing.T) {
	for _, tc := range []struct {
		setting string
		first   []string       // a claim of 2
		then    map[string]int // then a claim of 100
	}{
		{"concurrency_limit => 2", []string{"x", "x"}, map[string]int{"y": 2}},
		{"key_rate_limit => 2, key_rate_period => '1 hour'", []string{"x", "x"}, map[string]int{"y": 2}},
		{"concurrency_limit => 2, fair_by => 'concurrency_key'", []string{"x", "y"}, map[string]int{"x": 1, "y": 1}},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			b := testkit.Setup(t)
			testkit.ExecAll(t, b, `select pgrun.set_queue('keys', `+tc.setting+`)`)
			enqueueKeyed(t, b, "keys", "x", 2000, time.Hour)
			enqueueKeyed(t, b, "keys", "y", 5, 0)
			claimKeys := func(n int) []string {
				rows, err := b.Pool.Query(b.Ctx, `select concurrency_key from pgrun.claim_jobs('keys', 'w', $1)`, n)
				require.NoError(t, err)
				var keys []string
				for rows.Next() {
					var k string
					require.NoError(t, rows.Scan(&k))
					keys = append(keys, k)
				}
				require.NoError(t, rows.Err())
				return keys
			}
			require.ElementsMatch(t, tc.first, claimKeys(2))
			counts := map[string]int{}
			for _, k := range claimKeys(100) {
				counts[k]++
			}
			require.Equal(t, tc.then, counts, "x is at its limit; y, behind it, is claimed")
			require.Empty(t, claimKeys(100), "every key at its limit")
		})
	}
}

// Windows of keys that went quiet (ended a minute ago or more) are deleted by a claim
// of the queue at most once a second, oldest first and at most 1,000 at once; a window
// that ended more recently stays for its key's next claim to reset in place; and all
// of them go when the limit is reset.
func TestKeyRateWindowsArePruned(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('api', key_rate_limit => 1, key_rate_period => '1 minute')`)
	c.Exec(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'noop', 'queue', 'api',
		'concurrency_key', 'k' || i, 'run_at', '2030-01-01T09:00:00Z'))) from generate_series(1, 1200) i`)
	require.Equal(t, 1200, claimCount(t, c.Conn, "api", "w", 1200))
	windows := func() int {
		var n int
		c.QueryRow(`select count(*) from pgrun.key_rate_windows where queue = 'api'`, nil, &n)
		return n
	}
	claimZ := func(key string) {
		c.Exec(`select pgrun.enqueue_job('noop', queue => 'api', concurrency_key => $1)`, key)
		require.Equal(t, 1, claimCount(t, c.Conn, "api", "w", 10))
	}
	require.Equal(t, 1200, windows())
	c.Set(now.Add(90 * time.Second)) // ended 30 s ago: not quiet yet
	claimZ("z1")
	require.Equal(t, 1201, windows(), "windows that ended less than a minute ago stay")
	c.Set(now.Add(150 * time.Second)) // ended 90 s ago
	claimZ("z2")
	require.Equal(t, 202, windows(), "the 1,000 oldest quiet windows pruned, z2's opened")
	c.Set(now.Add(150*time.Second + 500*time.Millisecond))
	claimZ("z3")
	require.Equal(t, 203, windows(), "within a second of the last prune, none")
	c.Set(now.Add(152 * time.Second))
	claimZ("z4")
	require.Equal(t, 4, windows(), "the other 200 pruned; the z keys' windows are open")
	c.Exec(`select pgrun.set_queue('api', reset => array['key_rate_limit'])`)
	require.Zero(t, windows())
}

// Under concurrency: three `runner work` processes burn a queue with a per-key rate
// (4 claims per key per second) and a per-key concurrency limit (2), one of them
// killed with SIGKILL in the middle (its jobs come back when their leases run out).
// Each job sleeps 300 ms, so the killed runner still holds the jobs it was seen
// holding (at 40 ms it could finish and report them between the look and the kill).
// Every claim is logged by the database (recordClaims) with the engine's clock; after
// the burn-down, per key: no window (replayed by the engine's rule, in claim order)
// holds more than 4 claims, and no claim found 2 jobs of its key running already. And
// with the per-key rate alone: no window holds more than 4.
func TestKeyRateAndConcurrencyHoldAcrossRunnersAndAKill(t *testing.T) {
	t.Run("rate and concurrency", func(t *testing.T) { keyLimitsHoldAcrossRunnersAndAKill(t, true) })
	t.Run("rate alone", func(t *testing.T) { keyLimitsHoldAcrossRunnersAndAKill(t, false) })
}

func keyLimitsHoldAcrossRunnersAndAKill(t *testing.T, withConcurrency bool) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	const keys, perKey, rate, conc = 8, 16, 4, 2
	concurrency := "null"
	if withConcurrency {
		concurrency = "2"
	}
	testkit.ExecAll(t, b, `select pgrun.set_queue('api', key_rate_limit => 4, key_rate_period => '1 second',
		concurrency_limit => `+concurrency+`)`,
		`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'sleep', 'queue', 'api', 'args', '{"ms": 300}'::jsonb,
		   'concurrency_key', 'key' || (i % 8)))) from generate_series(1, 128) i`)
	var procs []*testkit.Proc
	for i := range 3 {
		procs = append(procs, startWorker(t, b, "--queues", "api=6", "--lease", "2s", "--worker-id", fmt.Sprintf("kr-%d", i)))
	}
	testkit.Eventually(t, time.Minute, "the first runner holds jobs, 20 claims in", func() bool {
		var held int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'running' and claimed_by = 'kr-0'`).Scan(&held))
		return held > 0 && len(claimLog(t, b, "api")) >= 20
	})
	require.NoError(t, procs[0].Cmd.Process.Signal(syscall.SIGKILL))
	procs[0].Wait(t, 10*time.Second)
	testkit.Eventually(t, 2*time.Minute, "every job succeeded", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'api' and status = 'succeeded'`).Scan(&n))
		return n == keys*perKey
	})

	// The rate, replayed per key by the engine's rule, claim by claim in the order they
	// ran (a claim's jobs share its instant): each claim first drops the windows that
	// ended by its instant (as it prunes them), then counts its jobs into its keys'
	// windows, opening one at its instant where none is open. (A claim's instant is its
	// transaction's start, so one that waited for the queue's lock may be earlier than
	// the claim before it: replaying the engine's own steps keeps that exact.)
	type window struct {
		start time.Time
		n     int
	}
	windows := map[string]*window{}
	claims := claimLog(t, b, "api")
	require.GreaterOrEqual(t, len(claims), keys*perKey)
	for i, c := range claims {
		if i == 0 || !c.At.Equal(claims[i-1].At) {
			for k, w := range windows {
				if !c.At.Before(w.start.Add(time.Second)) {
					delete(windows, k)
				}
			}
		}
		w := windows[*c.Key]
		if w == nil {
			w = &window{start: c.At}
			windows[*c.Key] = w
		}
		w.n++
		require.LessOrEqual(t, w.n, rate, "key %s: more than %d claims in the window from %s", *c.Key, rate, w.start)
	}

	requeued := countRowsTB(t, b, `select count(*) from pgrun.jobs where queue = 'api' and lease_expiries > 0`)
	require.Positive(t, requeued, "the killed runner's jobs came back through their leases")
	if !withConcurrency {
		return
	}
	// The concurrency, replayed per key in the order claims and ends were logged: an
	// end logged before a claim may have committed after it (the replay then counts
	// fewer running than the claim did), never the other way round.
	rows, err := b.Pool.Query(b.Ctx, `select key, ended from public.claim_log where queue = 'api' order by seq`)
	require.NoError(t, err)
	running := map[string]int{}
	for rows.Next() {
		var key string
		var ended bool
		require.NoError(t, rows.Scan(&key, &ended))
		if ended {
			running[key]--
			continue
		}
		running[key]++
		require.LessOrEqual(t, running[key], conc, "key %s: more than %d running", key, conc)
	}
	require.NoError(t, rows.Err())
}

// Many claims at once of a queue with a per-key rate, over keys that fill up and keys
// seen for the first time, with claims of every size: none fails (two claims that
// waited on each other in a cycle would: PostgreSQL aborts one, 40P01; a design whose
// claims ran at once, each locking its keys' windows, did, and was dropped), and each
// key ends with exactly its limit claimed in the window, and its window counting
// exactly that.
func TestKeyRateClaimsAtOnceNeverFailAndStayExact(t *testing.T) {
	b := testkit.Setup(t)
	const keys, perKey, limit, claimers, rounds = 40, 12, 5, 8, 40
	testkit.ExecAll(t, b, `select pgrun.set_queue('rated', key_rate_limit => 5, key_rate_period => '1 hour')`,
		fmt.Sprintf(`insert into pgrun.jobs (kind, queue, concurrency_key)
			select 'work', 'rated', 'k' || (i %% %d) from generate_series(1, %d) i order by random()`, keys, keys*perKey))
	var g errgroup.Group
	for c := range claimers {
		g.Go(func() error {
			for r := range rounds {
				n := 1 + (c*rounds+r)%37
				rows, err := b.Pool.Query(b.Ctx, `select id from pgrun.claim_jobs('rated', $1, $2)`, fmt.Sprintf("w%d", c), n)
				if err == nil {
					_, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				}
				if err != nil {
					return fmt.Errorf("claimer %d, round %d: %w", c, r, err)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, 0, countRowsTB(t, b, fmt.Sprintf(`select count(*) from (select concurrency_key from pgrun.jobs
		where status = 'running' group by 1 having count(*) <> %d) x`, limit)), "every key has exactly its limit claimed")
	require.Equal(t, keys, countRowsTB(t, b, fmt.Sprintf(`select count(*) from pgrun.key_rate_windows where count = %d`, limit)))
	require.Equal(t, keys*limit, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running'`))
}

// A queue with a per-key rate alone chooses and claims its jobs at once with other
// claims, and counts them under the queue's lock (claim_optimistic, key_rate_take). A
// claim that saw room another claim took before it counted is undone and made again
// under the lock: here the second claim chose key k's second job while the first
// claim (its window's count not yet committed) held the lock: it is undone (that job
// stays as it was) and made again, and takes the first job that fits. (The first
// claim's look locked the 16 jobs after its own, which the second passed over: the
// key's second job comes after them.)
func TestKeyRateClaimThatNoLongerFitsIsUndone(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('rated', key_rate_limit => 1, key_rate_period => '1 hour')`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, priority) values ('work', 'rated', 'k', 0)`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, priority)
			select 'work', 'rated', 'f' || i, 1 from generate_series(1, 16) i`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, priority) values ('work', 'rated', 'k', 2)`)
	first, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer first.Rollback(b.Ctx) //nolint:errcheck
	var firstID int64
	require.NoError(t, first.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('rated', 'w1', 1)`).Scan(&firstID))
	// The second claim has claimed the other job and waits for the queue's lock.
	got := claimBehind(t, b, first, `select id from pgrun.claim_jobs('rated', 'w2', 1)`)
	require.NoError(t, first.Commit(b.Ctx))
	second := <-got
	require.Len(t, second, 1, "made again under the lock, the second claim takes the first job that fits")
	require.Equal(t, 1, countRowsTB(t, b, fmt.Sprintf(`select count(*) from pgrun.jobs where id = %d
		and concurrency_key = 'f1' and status = 'running'`, second[0])), "a job of another key: k's window is full")

	var status string
	var attempt int
	var claimedBy *string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status::text, attempt, claimed_by from pgrun.jobs
		where concurrency_key = 'k' and id <> $1`, firstID).Scan(&status, &attempt, &claimedBy))
	require.Equal(t, "queued", status)
	require.Zero(t, attempt, "the undone claim left no attempt")
	require.Nil(t, claimedBy)
	require.Equal(t, 1, countRowsTB(t, b, `select count from pgrun.key_rate_windows where queue = 'rated' and key = 'k'`))
	require.Equal(t, 2, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running'`))
}

// A queue paused while a claim of a per-key rate alone waited for the queue's lock to
// count: the claim sees the queue changed, is undone and made again under the lock,
// and takes nothing; its jobs stay queued as they were.
func TestKeyRateClaimWaitingOnAPauseTakesNothing(t *testing.T) {
	b, pause := fiveRatedJobsBehind(t, `select pgrun.pause_queue('rated')`)
	// The claim has claimed its jobs and waits for the queue's lock to count them.
	got := claimBehind(t, b, pause, `select id from pgrun.claim_jobs('rated', 'w', 5)`)
	require.NoError(t, pause.Commit(b.Ctx))
	require.Empty(t, <-got, "the queue is paused")
	require.Equal(t, 5, countRowsTB(t, b, `select count(*) from pgrun.jobs
		where status = 'queued' and attempt = 0 and claimed_by is null`))
	require.Zero(t, countRowsTB(t, b, `select count(*) from pgrun.key_rate_windows`))
}

// set_queue beside a per-key rate's claim that holds the fairness cursor's row (its
// claims write it as they choose) and waits for the queue's row, which set_queue holds:
// set_queue leaves the cursor's row alone, even when it changes the key to be fair by
// (it deleted the row then, and waited for the claim that waited for it: a deadlock,
// one of the two ended by the server). The claim then sees the queue changed and
// claims under the new settings.
func TestSetQueueBesideAKeyRateClaimDoesNotDeadlock(t *testing.T) {
	b, tx := fiveRatedJobsBehind(t, `select pgrun.set_queue('rated', default_lease => '1 minute')`)
	got := claimBehind(t, b, tx, `select id from pgrun.claim_jobs('rated', 'w', 5)`)
	_, err := tx.Exec(b.Ctx, `select pgrun.set_queue('rated', fair_by => 'concurrency_key')`)
	require.NoError(t, err, "set_queue beside the claim")
	require.NoError(t, tx.Commit(b.Ctx))
	require.Len(t, <-got, 5, "the claim, made again under the new settings, takes every key's job")
	require.Equal(t, 5, countRowsTB(t, b, `select count(*) from pgrun.key_rate_windows where queue = 'rated' and count = 1`))
	require.Equal(t, 1, countRowsTB(t, b, `select count(*) from pgrun.fair_cursors where queue = 'rated'`))
}

// fiveRatedJobsBehind makes queue rated, whose only limit is a per-key rate (10 an
// hour), with one job of each of five keys, and a transaction that has run hold (which
// takes the queue's row) for a claim to wait behind (claimBehind); the transaction is
// rolled back at the test's end unless the test commits it.
func fiveRatedJobsBehind(t *testing.T, hold string) (*testkit.DB, pgx.Tx) {
	t.Helper()
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('rated', key_rate_limit => 10, key_rate_period => '1 hour')`,
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'work', 'rated', 'k' || i from generate_series(1, 5) i`)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
	_, err = tx.Exec(b.Ctx, hold)
	require.NoError(t, err)
	return b, tx
}

// claimBehind runs claim (a query of job ids) in the background once tx holds what it
// will wait for, returns when the claim waits for tx's backend, and sends the ids it
// returns (nil, the test failed, if it fails) on the channel returned.
func claimBehind(t *testing.T, b *testkit.DB, tx pgx.Tx, claim string) <-chan []int64 {
	t.Helper()
	var pid int
	require.NoError(t, tx.QueryRow(b.Ctx, `select pg_backend_pid()`).Scan(&pid))
	got := make(chan []int64, 1)
	go func() {
		rows, err := b.Pool.Query(b.Ctx, claim)
		if err == nil {
			var ids []int64
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err == nil {
				got <- ids
				return
			}
		}
		t.Errorf("%s: %v", claim, err)
		got <- nil
	}()
	testkit.Eventually(t, 10*time.Second, "the claim waits for the transaction", func() bool {
		return countRowsTB(t, b, fmt.Sprintf(`select count(*) from pg_stat_activity
			where %d = any (pg_blocking_pids(pid))`, pid)) == 1
	})
	return got
}
