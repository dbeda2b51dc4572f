package runner_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A job that finishes brings another claim only where it may make room. In a queue
// without limits the claim after a finished job came back empty: at a trickle of
// jobs, every other claim. Under max_running the room is announced when the
// completion commits (pgrun.jobs_room_made); before, a claim sent as the job finished
// counted it as still running, came back empty, and the queue waited for the poll.
// With no poll, only notifications wake the runner here, so the claims counted are
// the ones the jobs and the finishes caused.
func TestFinishedJobsBringAClaimOnlyUnderALimit(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('limited', max_running => 1)`)
	require.NoError(t, err)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"trickle": {Workers: 4}, "limited": {Workers: 4}},
		PollInterval: time.Hour, MaintenanceInterval: -1,
	})
	testkit.StartRunner(t, r)

	// One job at a time into the queue without limits: a claim each.
	const n = 30
	for range n {
		j, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("trickle"))
		require.NoError(t, err)
		testkit.Eventually(t, 10*time.Second, "job to succeed", func() bool {
			return testkit.JobStatus(t, b, j.ID) == pgrun.StatusSucceeded
		})
	}
	st := r.Stats()
	require.EqualValues(t, n, st.Claimed)
	require.Less(t, st.ClaimCalls, int64(n+n/4), "claims for %d jobs enqueued one at a time (each finish asked again: about %d)", n, 2*n)

	// Under max_running 1, with no poll, the runner moves on only because its jobs
	// finish: five jobs enqueued at once, one notification, all run.
	runAll(t, b, "limited", 5, 20*time.Second)
}

// A rate-limited queue whose jobs are done before their window ends is asked again
// within the window's quarter, not at the next poll (here never): its window's end is
// announced by nothing. Five starts per 100 ms, twenty jobs enqueued at once, no poll.
func TestRateLimitedQueueMovesOnWithoutThePoll(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('rated', rate_limit => 5, rate_period => '100 milliseconds')`)
	require.NoError(t, err)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"rated": {Workers: 4}},
		PollInterval: time.Hour, MaintenanceInterval: -1,
	})
	// Enqueued before the runner starts: a claim that finds the queue empty opens a
	// window too, and one opened just before the jobs came would end soon after their
	// first starts, letting ten start within 100 ms of the first (a fixed window's
	// edge), which the first check below does not allow for.
	enqueueNoops(t, b, "rated", 20)
	testkit.StartRunner(t, r)
	waitSucceeded(t, b, "rated", 30*time.Second)
	// The limit held. Its windows begin at the first claim after the previous one
	// ended, so the first 100 ms hold at most five starts, and any 100 ms, which
	// touches at most two windows, at most ten.
	var first, most int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select
		(select count(*) from pgrun.jobs o where o.queue = 'rated'
		   and o.started_at < (select min(started_at) from pgrun.jobs where queue = 'rated') + interval '100 milliseconds'),
		(select max((select count(*) from pgrun.jobs o where o.queue = 'rated'
		   and o.started_at >= j.started_at and o.started_at < j.started_at + interval '100 milliseconds'))
		 from pgrun.jobs j where j.queue = 'rated')`).Scan(&first, &most))
	require.LessOrEqual(t, first, 5)
	require.LessOrEqual(t, most, 10)
}

// runAll enqueues n no-op jobs into queue in one statement (one notification) and
// waits up to within for all of them to succeed.
func runAll(t *testing.T, b *testkit.DB, queue string, n int, within time.Duration) {
	t.Helper()
	enqueueNoops(t, b, queue, n)
	waitSucceeded(t, b, queue, within)
}

// enqueueNoops enqueues n no-op jobs into queue in one statement.
func enqueueNoops(t *testing.T, b *testkit.DB, queue string, n int) {
	t.Helper()
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: queue}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
}

// waitSucceeded waits up to within for every job of queue to succeed.
func waitSucceeded(t *testing.T, b *testkit.DB, queue string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, "queue "+queue+"'s jobs to succeed", func() bool {
		var left int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = $1
			and status <> 'succeeded'`, queue).Scan(&left))
		return left == 0
	})
}

// A notification that comes while a claim is on its way sends a second claim at once
// where claims bring many jobs, instead of leaving the jobs it announces (possibly
// past the first claim's snapshot) to wait for that claim's round trip. The claims
// are held up here by a lock on a table each claim reads, so both are seen waiting
// on the server.
func TestWakeUpDuringAClaimSendsAnother(t *testing.T) {
	b := testkit.Setup(t)
	// The runner's own pool, with room for two claims beside its listener: the
	// test's pool holds the lock and watches. A claim asks for at most 50 of the 200
	// slots, so the first leaves room for a second.
	pool := testdb.PoolFor(t, b.URL+"&pool_max_conns=8")
	r := testkit.NewRunner(pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"q": {Workers: 200}, "default": {Workers: 1}},
		MaxClaim:     50,
		PollInterval: time.Hour, MaintenanceInterval: -1,
	})
	hears := testkit.CancelProbe(t, b, r)
	testkit.StartRunner(t, r)
	hears() // the listener is up: with no poll, only notifications wake the runner
	// Claims that bring many jobs: forty in one statement, one claim.
	runAll(t, b, "q", 40, 20*time.Second)

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	_, err = tx.Exec(b.Ctx, `lock table pgrun.worker_control in access exclusive mode`)
	require.NoError(t, err)
	// At least: a claim the finished jobs brought before the runner's first look at
	// its queues (a rate limit was not ruled out yet) may be held up too. Without a
	// backlog the runner used to keep one claim in flight, whatever woke it.
	waiting := func(want int) func() bool {
		return func() bool {
			var n int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_stat_activity
				where wait_event_type = 'Lock' and query like '%pgrun.claim_jobs(%' and datname = current_database()`).Scan(&n))
			return n >= want
		}
	}
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("q"))
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the first job's claim held up by the lock", waiting(1))
	second, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("q"))
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "a second claim sent for the second job", waiting(2))

	require.NoError(t, tx.Rollback(b.Ctx))
	for _, id := range []int64{first.ID, second.ID} {
		testkit.Eventually(t, 10*time.Second, "job to succeed", func() bool {
			return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded
		})
	}
}

// A queue's own MaxClaim caps each of its claims below the runner's: ten slots, a cap
// of three, forty jobs enqueued at once into a fair queue. Every claim carries one
// random half in its jobs' claim tokens, so the tokens count each claim's jobs. The
// other queue, without a cap of its own, claims as many as its slots free.
func TestQueueMaxClaimCapsEachClaim(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant')`,
		`insert into pgrun.jobs (kind, queue, tenant) select 'noop', q, 't' || (i % 4)
		 from generate_series(1, 40) i, unnest(array['fair', 'plain']) q`)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues: map[string]runner.QueueConfig{"fair": {Workers: 10, MaxClaim: 3}, "plain": {Workers: 10}},
	})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 20*time.Second, "every job to succeed", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'succeeded'`).Scan(&n))
		return n == 80
	})
	largest := func(queue string) int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(c) from (select count(*) as c from pgrun.jobs
			where queue = $1 group by left(replace(claim_id::text, '-', ''), 16)) x`, queue).Scan(&n))
		return n
	}
	require.LessOrEqual(t, largest("fair"), 3, "the largest claim of the queue capped at 3")
	require.Greater(t, largest("plain"), 3, "the largest claim of the queue without a cap")

	_, err := runner.New(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"fair": {Workers: 1, MaxClaim: -1}}})
	require.ErrorContains(t, err, "queue fair: max claim -1 is not valid")
}

// A fair queue that sets no cap of its own claims at most runner.FairMaxClaim jobs at a
// time from its first claim (the runner looks at its queues before it claims), where
// the same runner's claims of a plain queue are as large as its slots. Uncapped, the
// fair queue's 4,000 jobs go in claims of 600 or more.
func TestFairQueueClaimsAreCappedByDefault(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant')`,
		`insert into pgrun.jobs (kind, queue, tenant) select 'noop', 'fair', 't' || (i % 4) from generate_series(1, 4000) i`,
		`insert into pgrun.jobs (kind, queue) select 'noop', 'plain' from generate_series(1, 2000) i`)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues: map[string]runner.QueueConfig{"fair": {Workers: 600}, "plain": {Workers: 600}},
	})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 2*time.Minute, "every job to succeed", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'succeeded'`).Scan(&n))
		return n == 6000
	})
	sizes := func(queue string) (over, capped int) {
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) filter (where c > $2), count(*) filter (where c <= $2)
			from (select count(*) as c from pgrun.jobs where queue = $1
			      group by left(replace(claim_id::text, '-', ''), 16)) x`, queue, runner.FairMaxClaim).Scan(&over, &capped))
		return over, capped
	}
	over, capped := sizes("fair")
	require.Zero(t, over, "claims of the fair queue over %d jobs", runner.FairMaxClaim)
	require.GreaterOrEqual(t, capped, 4000/runner.FairMaxClaim, "claims of the fair queue within the cap")
	plainOver, _ := sizes("plain")
	require.Greater(t, plainOver, 0, "the plain queue's claims are not capped")
}

// A fair queue whose backlog spreads over more keys than a claim takes: every claim
// takes one job of each key it serves, so the cap grows past runner.FairMaxClaim and
// claims are as large as the plain queue's (claimCap).
func TestFairQueueOverManyKeysClaimsPastTheCap(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant')`,
		`insert into pgrun.jobs (kind, queue, tenant) select 'noop', 'fair', 't' || i from generate_series(1, 6000) i`)
	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"fair": {Workers: 600}}})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 2*time.Minute, "every job to succeed", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'succeeded'`).Scan(&n))
		return n == 6000
	})
	var largest int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(c) from (select count(*) as c from pgrun.jobs
		group by left(replace(claim_id::text, '-', ''), 16)) x`).Scan(&largest))
	require.Greater(t, largest, runner.FairMaxClaim, "the largest claim of a fair queue over 6,000 tenants")
}
