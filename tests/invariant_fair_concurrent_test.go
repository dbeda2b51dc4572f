package tests

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// Claims of a queue with fairness alone run at once (pgrun.claim_exclusive): a runner
// keeps two claims in flight, and under the queue's row lock the second waited for the
// first's commit, so a fair queue's claims used one of the server's cores. Each claim's
// walk locks the jobs it finds (FOR UPDATE SKIP LOCKED), so two claims at once never
// take one job, and the second takes each key's next job. A queue with a limit keeps
// its claims one at a time: the limit must count every claim.

// claimInTx claims up to n jobs of queue in tx, returning their ids and concurrency
// keys in claim order.
func claimInTx(t *testing.T, ctx context.Context, tx pgx.Tx, queue, worker string, n int) (ids []int64, keys []string) {
	t.Helper()
	rows, err := tx.Query(ctx, `select id, coalesce(concurrency_key, '') from pgrun.claim_jobs($1, $2, $3)`, queue, worker, n)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var k string
		require.NoError(t, rows.Scan(&id, &k))
		ids, keys = append(ids, id), append(keys, k)
	}
	require.NoError(t, rows.Err())
	return ids, keys
}

// beginWithin begins a transaction on b's pool, rolled back at the test's end unless
// committed, whose lock waits end with an error after lockTimeout ("": none).
func beginWithin(t *testing.T, b *testkit.DB, lockTimeout string) pgx.Tx {
	t.Helper()
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a no-op after a commit
	if lockTimeout != "" {
		_, err = tx.Exec(b.Ctx, `select set_config('lock_timeout', $1, true)`, lockTimeout)
		require.NoError(t, err)
	}
	return tx
}

// Two claims of a fair queue, the first not yet committed: the second returns at once
// (a lock wait would run into its lock_timeout), takes no job of the first, and takes
// each key's next job, one a key, in the keys' turn; both commit, and every job is
// claimed once.
func TestFairClaimsInFlightTogetherTakeEachKeysNextJob(t *testing.T) {
	for _, by := range []string{"concurrency_key", "tenant"} {
		t.Run(by, func(t *testing.T) {
			b := testkit.Setup(t)
			testkit.ExecAll(t, b, `select pgrun.set_queue('fq', fair_by => '`+by+`')`,
				`insert into pgrun.jobs (kind, queue, concurrency_key, tenant, run_at)
				 select 'noop', 'fq', 'k' || (i % 5), 'k' || (i % 5), now() - interval '1 hour' + i * interval '1 second'
				 from generate_series(0, 49) i`)
			first := beginWithin(t, b, "")
			ids1, keys1 := claimInTx(t, b.Ctx, first, "fq", "w1", 5)
			require.Len(t, ids1, 5)

			second := beginWithin(t, b, "3s")
			ids2, keys2 := claimInTx(t, b.Ctx, second, "fq", "w2", 5)
			require.Len(t, ids2, 5, "the second claim in flight takes five jobs without waiting for the first")
			require.ElementsMatch(t, keys1, keys2, "one job of each key in each claim")
			for _, id := range ids2 {
				require.NotContains(t, ids1, id)
			}
			// Each key's jobs run in run_at order: the second claim's job of a key is
			// the one after the first's (ids here follow run_at within a key).
			for i, k := range keys2 {
				var want int64
				require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.jobs where queue = 'fq' and concurrency_key = $1
					order by run_at offset 1 limit 1`, k).Scan(&want))
				require.Equal(t, want, ids2[i], "key %s: its second job", k)
			}
			require.NoError(t, second.Commit(b.Ctx))
			require.NoError(t, first.Commit(b.Ctx))
			require.Equal(t, 10, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running'`))
			require.Equal(t, 10, countRowsTB(t, b, `select count(distinct claim_id) from pgrun.jobs where status = 'running'`))
		})
	}
}

// A fair claim whose walk passes the last key and goes on from the first locks only
// the jobs it takes: a claim beside it skips whatever it holds (SKIP LOCKED), so a job
// held and left would wait for its commit, and a runner took the short claim for a
// drained queue. Thirty keys of two jobs each; a first claim takes twenty keys' first
// jobs, so the second (fifteen) walks the last ten keys and then five from the start.
// It asked the walk for twice what it still needed there, and held five jobs it left.
func TestAFairClaimHoldsOnlyTheJobsItTakes(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fq', fair_by => 'concurrency_key')`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, run_at)
		 select 'noop', 'fq', 'k' || lpad((i % 30)::text, 2, '0'), now() - interval '1 hour' + i * interval '1 second'
		 from generate_series(0, 59) i`,
		`select count(*) from pgrun.claim_jobs('fq', 'w1', 20)`)
	tx := beginWithin(t, b, "")
	ids, _ := claimInTx(t, b.Ctx, tx, "fq", "w2", 15)
	require.Len(t, ids, 15)
	// Seen from another session, the claim's jobs are still queued (uncommitted) and
	// locked, as is any job it holds and did not take.
	queued := countRowsTB(t, b, `select count(*) from pgrun.jobs where queue = 'fq' and status = 'queued'`)
	free := countRowsTB(t, b, `select count(*) from (select id from pgrun.jobs where queue = 'fq' and status = 'queued'
		for update skip locked) s`)
	require.Equal(t, 40, queued)
	require.Equal(t, 15, queued-free, "jobs the claim holds: the fifteen it took and no more")
}

// A fair queue with a per-key concurrency limit keeps its claims one at a time: the
// second claim waits on the first (here into its lock_timeout), because the first's
// jobs, not yet committed, must count against their keys' limits.
func TestFairClaimsWithALimitRunOneAtATime(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fq', fair_by => 'concurrency_key', concurrency_limit => 1)`,
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'noop', 'fq', 'k' || (i % 5) from generate_series(0, 49) i`)
	first := beginWithin(t, b, "")
	ids1, _ := claimInTx(t, b.Ctx, first, "fq", "w1", 5)
	require.Len(t, ids1, 5)

	second := beginWithin(t, b, "200ms")
	_, err := second.Exec(b.Ctx, `select count(*) from pgrun.claim_jobs('fq', 'w2', 5)`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the second claim waits for the first: %v", err)
	require.Equal(t, "55P03", pgErr.Code)
	require.NoError(t, first.Commit(b.Ctx))
	require.Equal(t, 0, claimCount(t, b.Pool, "fq", "w2", 5), "every key is at its limit of one")
}

// Three `runner work` processes burn a fair queue (by tenant: A with 600 jobs, four
// small tenants with 10 each, all due at once) and one is killed with SIGKILL while it
// holds jobs: every job succeeds; a job runs again only if the killed runner held it
// (attempt 2, at most as many as it held); and the small tenants' jobs are all first
// claimed before a third of A's are, claims of the three runners at once
// notwithstanding.
func TestFairQueueAcrossRunnersAndAKill(t *testing.T) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant')`,
		`insert into pgrun.jobs (kind, queue, tenant, args, run_at)
		 select 'sleep', 'fair', 'A', '{"ms": 20}', now() - interval '1 hour' from generate_series(1, 600)`,
		`insert into pgrun.jobs (kind, queue, tenant, args)
		 select 'sleep', 'fair', 't' || (i % 4), '{"ms": 20}' from generate_series(1, 40) i`)
	var procs []*testkit.Proc
	for i := range 3 {
		procs = append(procs, startWorker(t, b, "--queues", "fair=4", "--lease", "2s", "--worker-id", fmt.Sprintf("fair-%d", i)))
	}
	_, held := stopHolding(t, b, procs[:1], []string{"fair-0"}, 1, time.Minute)
	require.NoError(t, procs[0].Cmd.Process.Signal(syscall.SIGKILL))
	procs[0].Wait(t, 10*time.Second)
	testkit.Eventually(t, 2*time.Minute, "every job succeeded", func() bool {
		return countRowsTB(t, b, `select count(*) from pgrun.jobs where queue = 'fair' and status = 'succeeded'`) == 640
	})
	again := countRowsTB(t, b, `select count(*) from pgrun.jobs where attempt > 1`)
	require.LessOrEqual(t, again, held, "jobs run again: only those the killed runner held")
	require.Equal(t, 0, countRowsTB(t, b, `select count(*) from pgrun.jobs where attempt > 2`))
	require.Equal(t, 640+again, len(claimLog(t, b, "fair")), "one claim a job, and one more of each job run again")

	// First claims only: a job the killed runner held is claimed again when its lease
	// has run out, after the burn-down.
	var claims []claimStart
	seen := map[int64]bool{}
	for _, c := range claimLog(t, b, "fair") {
		if !seen[c.JobID] {
			seen[c.JobID] = true
			claims = append(claims, c)
		}
	}
	lastSmall := 0
	for _, k := range []string{"t0", "t1", "t2", "t3"} {
		lastSmall = max(lastSmall, lastOf(claims, k, true))
	}
	require.Positive(t, lastSmall)
	aBefore := 0
	for _, c := range claims[:lastSmall] {
		if c.Tenant != nil && *c.Tenant == "A" {
			aBefore++
		}
	}
	require.Less(t, aBefore, 200, "A's jobs claimed before the small tenants' last")
}
