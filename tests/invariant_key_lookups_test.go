package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// What a lookup of one key's jobs reads (docs/architecture.md): a keyed claim's keys
// (sql/functions/38_claim_keys.sql, 39_claim_keyed.sql), a sequence's next job
// (36_sequences.sql), a debounce key's latest job (22_debounce.sql), never the whole
// queue or table. These statements are planned once per session (generic plans), so a
// plan chosen in a database whose statistics saw one big key must still read a small
// key by its index. Each test counts what the calls read (pg_stat_user_indexes,
// pg_stat_user_tables, flushed by the calling session), which does not depend on the
// machine's speed.

// statCount reads one count from the statistics views of b's database, as flushed so
// far (each read is a transaction of its own, and the views' cache lasts one
// transaction, so it sees the latest flush).
func statCount(t *testing.T, b *testkit.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, query, args...).Scan(&n))
	return n
}

// indexReads returns how many index tuples scans of index have read.
func indexReads(t *testing.T, b *testkit.DB, index string) int64 {
	t.Helper()
	return statCount(t, b, `select coalesce(sum(idx_tup_read), 0)::bigint from pg_stat_user_indexes
		where schemaname = 'pgrun' and indexrelname = $1`, index)
}

// seqScans returns how many sequential scans of pgrun.jobs have run.
func seqScans(t *testing.T, b *testkit.DB) int64 {
	t.Helper()
	return statCount(t, b, `select seq_scan from pg_stat_user_tables where schemaname = 'pgrun' and relname = 'jobs'`)
}

// onOneSession runs stmts on one connection (so that their plans are that session's
// generic ones) and flushes its statistics before it goes back to the pool.
func onOneSession(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, s := range stmts {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	_, err = conn.Exec(ctx, `select pg_stat_force_next_flush()`)
	require.NoError(t, err)
	// The flush happens when the session next goes idle after a statement.
	_, err = conn.Exec(ctx, `select 1`)
	require.NoError(t, err)
}

// A fair queue whose statistics saw one key alone (20,000 jobs of A): claims that take
// key B's few jobs in their rounds read B's and A's jobs by the key's index, not the
// queue's claim index filtered by key (which read all of A's jobs, 85,000 rows, 56 ms
// a claim, behind a 200,000-job tenant). B's jobs are in the claim after their
// enqueue. By tenant and by concurrency key, with aging and without (each reads a
// key's jobs with a statement of its own).
func TestFairClaimsReadASmallKeyByItsIndex(t *testing.T) {
	for _, c := range []struct{ by, column, aging string }{
		{"tenant", "tenant", "null"}, {"tenant", "tenant", "'1 minute'"},
		{"concurrency_key", "concurrency_key", "null"}, {"concurrency_key", "concurrency_key", "'1 minute'"},
	} {
		t.Run(c.by+"/aging="+c.aging, func(t *testing.T) {
			b := testkit.Setup(t)
			enqueue := func(key string, n int) string {
				return fmt.Sprintf(`insert into pgrun.jobs (kind, queue, %s) select 'work', 'fair', '%s' from generate_series(1, %d)`,
					c.column, key, n)
			}
			testkit.ExecAll(t, b,
				fmt.Sprintf(`select pgrun.set_queue('fair', fair_by => '%s', priority_aging => %s)`, c.by, c.aging),
				enqueue("A", 20000), `vacuum analyze pgrun.jobs`, enqueue("B", 3))
			before := indexReads(t, b, "jobs_claim_idx")
			claim := `select count(*) from pgrun.claim_jobs('fair', 'w', 100)`
			onOneSession(t, b.Pool, claim, enqueue("B", 3), claim, enqueue("B", 3), claim)
			read := indexReads(t, b, "jobs_claim_idx") - before
			// The keyless turn looks through 256 due jobs of the queue's order a claim, with
			// aging from the queue's start, stepping over the entries of the jobs the
			// claims before took (up to 100 each): a thousand or two, against the 60,000
			// and more that reading the small key through this index took.
			require.LessOrEqual(t, read, int64(5000), "the claims read %d entries of the queue's claim index", read)
			require.Equal(t, 0, countRowsTB(t, b, fmt.Sprintf(`select count(*) from pgrun.jobs where %s = 'B' and status = 'queued'`, c.column)),
				"every B job was claimed in the claim after its enqueue")
			require.Equal(t, 300, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running'`))
		})
	}
}

// A per-key rate over 1,000 keys: a claim of 100 reads each key's window by its
// primary key, not every window of the queue (1,000 a claim, 3.7 ms), whatever the
// windows' statistics say: none (the table was never analyzed), or an empty table
// (analyzed before the first claim, as autovacuum may on a new queue). Analyzed
// empty, the generic plan read each key's window through the index of window starts
// (the queue's every window for each key: 25 ms a claim of 600), until the index was
// made one that lookup cannot use (0029).
func TestKeyRateClaimsReadTheirKeysWindowsOnly(t *testing.T) {
	for _, stats := range []string{"never analyzed", "analyzed empty"} {
		t.Run(stats, func(t *testing.T) { keyRateClaimsReadTheirKeysWindowsOnly(t, stats == "analyzed empty") })
	}
}

func keyRateClaimsReadTheirKeysWindowsOnly(t *testing.T, analyzeEmpty bool) {
	b := testkit.Setup(t)
	if analyzeEmpty {
		testkit.ExecAll(t, b, `analyze pgrun.key_rate_windows`)
	}
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('rated', key_rate_limit => 1000000, key_rate_period => '1 hour')`,
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'work', 'rated', 'k' || i from generate_series(1, 1000) i`,
		`select count(*) from pgrun.claim_jobs('rated', 'w', 1000)`, // every key's window
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'work', 'rated', 'k' || i from generate_series(1, 1000) i`)
	require.Equal(t, 1000, countRowsTB(t, b, `select count(*) from pgrun.key_rate_windows`))
	before := indexReads(t, b, "key_rate_windows_start_idx") + indexReads(t, b, "key_rate_windows_pkey")
	onOneSession(t, b.Pool,
		`select count(*) from pgrun.claim_jobs('rated', 'w', 100)`,
		`select count(*) from pgrun.claim_jobs('rated', 'w', 100)`,
		`select count(*) from pgrun.claim_jobs('rated', 'w', 100)`)
	read := indexReads(t, b, "key_rate_windows_start_idx") + indexReads(t, b, "key_rate_windows_pkey") - before
	// Three claims of 100 keys: a look and a count for each key, about 600 reads.
	require.LessOrEqual(t, read, int64(3*100*3), "the claims read %d window index entries", read)
	require.Equal(t, 1300, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running'`))
	require.Equal(t, 1300, countRowsTB(t, b, `select sum(count)::int from pgrun.key_rate_windows`),
		"every claimed job counted in its key's window")
}

// A queue whose statistics saw one long sequence (20,000 jobs of A): enqueueing into a
// short sequence and releasing its next job read the held jobs' index, not the whole
// table (each was a sequential scan, 26-46 ms at each enqueue, 10 ms at each release).
func TestShortSequencesAreReadByTheirIndex(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'work', 'queue', 'sq', 'sequence_key', 'A')))
		 from generate_series(1, 20000)`,
		`analyze pgrun.jobs`)
	before := seqScans(t, b)
	onOneSession(t, b.Pool,
		`select pgrun.enqueue_job('work', queue => 'sq', sequence_key => 'B')`,
		`select pgrun.enqueue_job('work', queue => 'sq', sequence_key => 'B')`,
		`select pgrun.enqueue_job('work', queue => 'sq', sequence_key => 'C')`,
		`select pgrun.complete_jobs(array_agg(id), array_agg(attempt), null, 'w', array_agg(claim_id))
		 from pgrun.claim_jobs('sq', 'w', 10)`)
	require.Equal(t, before, seqScans(t, b), "sequential scans of pgrun.jobs by the enqueues and the release")
	require.Equal(t, 1, countRowsTB(t, b, `select count(*) from pgrun.jobs where sequence_key = 'B' and status = 'queued'`),
		"B's second job released when its head succeeded")
	require.Equal(t, 1, countRowsTB(t, b, `select count(*) from pgrun.jobs where sequence_key = 'A' and status = 'queued'`))
}

// A table whose statistics saw one busy debounce key (5,000 jobs of X, each cancelled
// before the next): a debounced enqueue of a rare key finds the key's latest job by
// the debounce index, not a sequential scan (22 ms an enqueue at 20,000 jobs), and
// folds as documented.
func TestRareDebounceKeysAreReadByTheirIndex(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`do $$ declare j bigint; begin
		   for i in 1..5000 loop
		     select id into j from pgrun.enqueue_job('work', queue => 'dq', debounce_key => 'X', debounce => '1 second');
		     perform pgrun.cancel_job(j);
		   end loop;
		 end $$`,
		`analyze pgrun.jobs`)
	before := seqScans(t, b)
	onOneSession(t, b.Pool,
		`select pgrun.enqueue_job('work', queue => 'dq', debounce_key => 'Y', debounce => '1 hour')`,
		`select pgrun.enqueue_job('work', queue => 'dq', debounce_key => 'Y', debounce => '1 hour')`)
	require.Equal(t, before, seqScans(t, b), "sequential scans of pgrun.jobs by the debounced enqueues")
	require.Equal(t, 1, countRowsTB(t, b, `select count(*) from pgrun.jobs where debounce_key = 'Y'`),
		"the second enqueue folded into the first")
}

// The dashboard's queue page lists the keys in use (pgrun.queue_keys) with the jobs
// each still has queued: in a queue whose statistics saw one big key, counted by the
// key's index, not a sequential scan a key (100 ms for 20 keys at 20,000 jobs).
func TestQueueKeysCountEachKeyByItsIndex(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('kq', concurrency_limit => 1)`,
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'work', 'kq', 'A' from generate_series(1, 20000)`,
		`analyze pgrun.jobs`,
		`insert into pgrun.jobs (kind, queue, concurrency_key) select 'work', 'kq', 'k' || (i % 20) from generate_series(1, 40) i`)
	before := seqScans(t, b)
	onOneSession(t, b.Pool,
		`select count(*) from pgrun.claim_jobs('kq', 'w', 50)`,
		`select count(*) from pgrun.queue_keys('kq', max_rows => 100)`)
	require.Equal(t, before, seqScans(t, b), "sequential scans of pgrun.jobs by a claim and queue_keys")
	require.Equal(t, 20, countRowsTB(t, b, `select count(*) from pgrun.queue_keys('kq', max_rows => 100) where queued = 1`),
		"each small key has one job still queued")
}
