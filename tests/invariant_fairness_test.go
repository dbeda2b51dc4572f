package tests

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// The fair claim (fair_by, sql/functions/38_claim_keys.sql): round-robin across the keys
// of a queue's due jobs, so a key with thousands of queued jobs cannot starve one with
// a few; priorities still order the jobs of one key.

// claimStart is one claim of a job as recordClaims logs it, in the order the claims
// ran (seq).
type claimStart struct {
	Seq      int64     `db:"seq"`
	JobID    int64     `db:"job_id"`
	Key      *string   `db:"key"`
	Tenant   *string   `db:"tenant"`
	Priority int16     `db:"priority"`
	RunAt    time.Time `db:"run_at"`
	At       time.Time `db:"at"`
}

// recordClaims has the test's database log every claim of a job (status into running)
// and every end of one (out of running) in claim_log, in the order they happen: a
// row trigger on pgrun.jobs, so that claims made by any process, through any path,
// are recorded with the engine's clock (the claim's started_at) and their order. A
// test-only trigger: nothing of it is the engine's.
func recordClaims(t *testing.T, b *testkit.DB) {
	t.Helper()
	testkit.ExecAll(t, b,
		`create table public.claim_log (seq bigserial primary key, job_id bigint not null, queue text not null,
		   key text, tenant text, priority smallint not null, run_at timestamptz not null, at timestamptz not null,
		   ended boolean not null)`,
		`create function public.log_claims() returns trigger language plpgsql as $$
		 begin
		   insert into public.claim_log (job_id, queue, key, tenant, priority, run_at, at, ended)
		   values (new.id, new.queue, new.concurrency_key, new.tenant, new.priority, new.run_at,
		           case when new.status = 'running' then new.started_at else pgrun.clock() end,
		           new.status <> 'running');
		   return null;
		 end $$`,
		`create trigger log_claims after update of status on pgrun.jobs for each row
		 when ((new.status = 'running') <> (old.status = 'running')) execute function public.log_claims()`)
}

// claimLog returns the claims (not the ends) recorded of queue, in claim order.
func claimLog(t *testing.T, b *testkit.DB, queue string) []claimStart {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `select seq, job_id, key, tenant, priority, run_at, at from public.claim_log
		where queue = $1 and not ended order by seq`, queue)
	require.NoError(t, err)
	var out []claimStart
	for rows.Next() {
		var c claimStart
		require.NoError(t, rows.Scan(&c.Seq, &c.JobID, &c.Key, &c.Tenant, &c.Priority, &c.RunAt, &c.At))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	return out
}

// lastOf is the 1-based place, in claims, of the last claim whose key (or tenant)
// is key; 0 if none is.
func lastOf(claims []claimStart, key string, byTenant bool) int {
	last := 0
	for i, c := range claims {
		k := c.Key
		if byTenant {
			k = c.Tenant
		}
		if k != nil && *k == key {
			last = i + 1
		}
	}
	return last
}

// countOf counts the claims of key (nil: of jobs without one) among claims.
func countOf(claims []claimStart, key *string) int {
	n := 0
	for _, c := range claims {
		if (key == nil && c.Key == nil) || (key != nil && c.Key != nil && *c.Key == *key) {
			n++
		}
	}
	return n
}

// enqueueKeyed enqueues n noop jobs of queue with concurrency key key (empty: none),
// priorities cycling through prios, run_at ago before now.
func enqueueKeyed(t *testing.T, b *testkit.DB, queue, key string, n int, ago time.Duration, prios ...int) {
	t.Helper()
	if len(prios) == 0 {
		prios = []int{0}
	}
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
		  'kind', 'noop', 'queue', $1::text, 'concurrency_key', nullif($2, ''),
		  'priority', ($5::int[])[1 + i % cardinality($5::int[])],
		  'run_at', now() - $4::interval + i * interval '1 microsecond'))))
		from generate_series(1, $3) i`, queue, key, n, ago, prios)
	require.NoError(t, err)
}

// claimOneByOne makes n claims of one job each on queue and returns how many took one.
func claimOneByOne(t *testing.T, b *testkit.DB, queue string, n int) int {
	t.Helper()
	got := 0
	for range n {
		got += claimCount(t, b.Pool, queue, "w", 1)
	}
	return got
}

// A key with 5,000 queued jobs does not starve one with 20 enqueued after them: with
// fairness on, the small key's 20 all start within the first 40 claims, and the large
// key's jobs start in their own order (priority, run_at, id) between them. Without
// fairness, the same queue starts the large key's jobs first, all 40.
func TestFairClaimsStartASmallKeyAmongALargeOne(t *testing.T) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'concurrency_key')`, `select pgrun.set_queue('plain')`)
	for _, q := range []string{"fair", "plain"} {
		enqueueKeyed(t, b, q, "A", 5000, time.Hour, 0, 2, 1)
		enqueueKeyed(t, b, q, "B", 20, 0)
		require.Equal(t, 40, claimOneByOne(t, b, q, 40))
	}

	fair := claimLog(t, b, "fair")
	require.Len(t, fair, 40)
	require.Equal(t, 20, countOf(fair, new("B")), "B's 20 jobs start within the first 40 claims")
	var a []claimStart
	for _, c := range fair {
		if *c.Key == "A" {
			a = append(a, c)
		}
	}
	require.True(t, slices.IsSortedFunc(a, func(x, y claimStart) int {
		if x.Priority != y.Priority {
			return int(x.Priority) - int(y.Priority)
		}
		return x.RunAt.Compare(y.RunAt)
	}), "A's jobs start in priority, run_at order")
	require.Equal(t, int16(0), a[len(a)-1].Priority, "A's most urgent level first")

	require.Zero(t, countOf(claimLog(t, b, "plain"), new("B")), "one global order: A's older jobs first")
}

// A claim of many jobs takes them round-robin in rounds: one per key, then more of
// each key that has more, so a claim of 10 from keys of 5,000, 3 and 2 jobs takes all
// of the small keys' and fills up from the large one; and claims in turn pass the key
// served last (the cursor), whichever claimer made them.
func TestFairClaimsGoRoundInRounds(t *testing.T) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'concurrency_key')`)
	enqueueKeyed(t, b, "fair", "A", 5000, time.Hour)
	enqueueKeyed(t, b, "fair", "B", 3, time.Minute)
	enqueueKeyed(t, b, "fair", "C", 2, 0)
	require.Equal(t, 10, claimCount(t, b.Pool, "fair", "w1", 10))
	claims := claimLog(t, b, "fair")
	require.Equal(t, 5, countOf(claims, new("A")))
	require.Equal(t, 3, countOf(claims, new("B")))
	require.Equal(t, 2, countOf(claims, new("C")))

	enqueueKeyed(t, b, "fair", "B", 5, 0)
	enqueueKeyed(t, b, "fair", "C", 5, 0)
	var cursor string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select key from pgrun.fair_cursors where queue = 'fair'`).Scan(&cursor))
	// One job a claim, from two claimers in turn: the keys after the cursor, around.
	var order []string
	for i := range 6 {
		var key string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select concurrency_key from pgrun.claim_jobs('fair', $1, 1)`,
			fmt.Sprintf("w%d", i%2)).Scan(&key))
		order = append(order, key)
	}
	// The walk's order is the keys' slots (their 64-bit hashes), not their names.
	var ring []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`select array_agg(k order by hashtextextended(k, 0)) from unnest(array['A', 'B', 'C']) k`).Scan(&ring))
	next := map[string]string{}
	for i, k := range ring {
		next[k] = ring[(i+1)%len(ring)]
	}
	want := []string{next[cursor]}
	for len(want) < 6 {
		want = append(want, next[want[len(want)-1]])
	}
	require.Equal(t, want, order, "round-robin from the key after the cursor (%s)", cursor)
}

// The walk goes round the keys in the order of their slots (hashtextextended(key, 0),
// the order of the key's index), whatever their names: 40 keys of two jobs each, 80
// claims of one job each, serve every key once in slot order and then again in the
// same order.
func TestFairClaimsGoRoundTheKeysInSlotOrder(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'concurrency_key')`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, run_at)
		 select 'noop', 'fair', 'key-' || (i % 40), now() - interval '1 minute' from generate_series(0, 79) i`)
	var ring []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(k order by hashtextextended(k, 0))
		from (select distinct concurrency_key as k from pgrun.jobs) k`).Scan(&ring))
	require.Len(t, ring, 40)
	var order []string
	for range 80 {
		var key string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select concurrency_key from pgrun.claim_jobs('fair', 'w', 1)`).Scan(&key))
		order = append(order, key)
	}
	require.Equal(t, append(slices.Clone(ring), ring...), order, "two rounds, each in slot order")
}

// Jobs without a key share one turn of their own, between the last key and the first:
// 20 of them behind 200 of a busy key all start within the first 60 one-job claims,
// beside another key's 20. (They are found by looking through the front of the
// queue's order, keyless_look jobs deep: docs/operations.md says so.)
func TestFairClaimsGiveJobsWithoutAKeyATurn(t *testing.T) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'concurrency_key')`)
	enqueueKeyed(t, b, "fair", "A", 200, time.Hour)
	enqueueKeyed(t, b, "fair", "", 20, time.Minute)
	enqueueKeyed(t, b, "fair", "B", 20, 0)
	require.Equal(t, 60, claimOneByOne(t, b, "fair", 60))
	claims := claimLog(t, b, "fair")
	require.Equal(t, 20, countOf(claims, nil), "the keyless jobs took a turn each round")
	require.Equal(t, 20, countOf(claims, new("B")))
	require.Equal(t, 20, countOf(claims, new("A")))
}

// Fairness by tenant: in the tenant mode, a tenant with 5,000 queued jobs does not
// starve one with 20, whatever their concurrency keys.
func TestFairClaimsByTenant(t *testing.T) {
	k := newTenantKit(t)
	recordClaims(t, k.DB)
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.set_queue('fair', fair_by => 'tenant')`)
	testkit.Allowed(t, k.DB, k.acme, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'noop',
		'queue', 'fair', 'concurrency_key', 'k' || (i % 7), 'run_at', now() - interval '1 hour'))) from generate_series(1, 5000) i`)
	testkit.Allowed(t, k.DB, k.globex, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'noop',
		'queue', 'fair'))) from generate_series(1, 20) i`)
	require.Equal(t, 40, claimOneByOne(t, k.DB, "fair", 40))
	claims := claimLog(t, k.DB, "fair")
	n := 0
	for _, c := range claims {
		if *c.Tenant == "globex" {
			n++
		}
	}
	require.Equal(t, 20, n, "globex's 20 start within the first 40 claims")
}

// Real runners: two `runner work` processes burn a fair queue in which tenant A holds
// 5,000 jobs and tenant B 20 enqueued after them; B's 20 all start within the first
// 100 jobs claimed, by the order the engine made them (the claim log), not by wall
// time: without fairness they come after A's 5,000. One claim at a time would make it
// 40 (each claim takes A's and B's next in turn), but the runners' claims run at once:
// a claim beside one that holds B's last jobs (SKIP LOCKED) takes A's only, as it
// should, and each runner keeps up to two claims of up to 8 jobs in flight. Measured
// 41-74 with a bound of 40, which failed a third of the runs on a quiet machine.
func TestFairQueueUnderRunnersStartsTheSmallTenantEarly(t *testing.T) {
	b := testkit.Setup(t)
	recordClaims(t, b)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant')`,
		`insert into pgrun.jobs (kind, queue, tenant, args, run_at)
		 select 'sleep', 'fair', 'A', '{"ms": 5}', now() - interval '1 hour' from generate_series(1, 5000)`,
		`insert into pgrun.jobs (kind, queue, tenant, args)
		 select 'sleep', 'fair', 'B', '{"ms": 5}' from generate_series(1, 20)`)
	for range 2 {
		startWorker(t, b, "--queues", "fair=4")
	}
	testkit.Eventually(t, time.Minute, "B's jobs done", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where tenant = 'B' and status = 'succeeded'`).Scan(&n))
		return n == 20
	})
	claims := claimLog(t, b, "fair")
	last := lastOf(claims, "B", true)
	require.Positive(t, last)
	require.LessOrEqual(t, claimedBefore(claims, last), 100, "jobs claimed before the claim of B's last")
}

// claimedBefore counts the jobs that claims before the one of claims[last-1] took. A
// runner claims ahead of its free slots (it buffers what it starts next), so one claim
// may hold a small key's jobs and many of a large key's, all claimed at the claim's
// instant: what says whether the small key waited is how many jobs earlier claims
// took, not its place in the log.
func claimedBefore(claims []claimStart, last int) int {
	n := 0
	for _, c := range claims[:last] {
		if c.At.Before(claims[last-1].At) {
			n++
		}
	}
	return n
}

// Fairness by tenant with a per-key limit on concurrency keys: a tenant whose most
// urgent job waits on its concurrency key (at its limit) gives its turn to its next
// job whose key has room, and a tenant with nothing that may start passes its turn.
func TestFairByTenantPassesOverKeysAtTheirLimit(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'tenant', concurrency_limit => 1)`,
		`insert into pgrun.jobs (kind, queue, tenant, concurrency_key, run_at)
		 select 'noop', 'fair', 't1', k, now() - interval '1 hour' + i * interval '1 second'
		 from unnest(array['x', 'x', 'x', 'y']) with ordinality u(k, i)`,
		`insert into pgrun.jobs (kind, queue, tenant, concurrency_key) values ('noop', 'fair', 't2', 'x')`)
	claim := func(n int) []string {
		rows, err := b.Pool.Query(b.Ctx, `select tenant || ':' || concurrency_key from pgrun.claim_jobs('fair', 'w', $1)`, n)
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			got = append(got, s)
		}
		require.NoError(t, rows.Err())
		return got
	}
	// The walk starts at the first tenant in slot order (their 64-bit hashes): its x
	// takes key x's one place; then t1's next x (or first, if t2 went first) waits on
	// the key, t1's y goes, and t2's x (if still queued) waits too.
	var first string
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`select k from unnest(array['t1', 't2']) k order by hashtextextended(k, 0) limit 1`).Scan(&first))
	require.Equal(t, []string{first + ":x"}, claim(1))
	require.Equal(t, []string{"t1:y"}, claim(10), "t1's x waits on its key; its y goes, t2's x waits too")
	require.Empty(t, claim(10), "every tenant's jobs wait on keys at their limit")
}
