package tests

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The hot paths keep their index plans on a table of realistic size: every statement
// the engine runs inside claim_jobs, complete_jobs, renew_leases, maintain,
// enqueue_batch, enqueue_job and queue_stats is planned (auto_explain, nested
// statements, sent to this session as notices) and none may read pgrun.jobs with a
// sequential scan. A plan check, not a timing: it fails when a change to a query,
// an index or the statistics sends the planner to read the whole table. The suite
// checks a table of 100,000 rows; BenchmarkHotPathPlansAtAMillion checks a million.
func TestHotPathsUseIndexes(t *testing.T) {
	checkHotPathPlans(t, testkit.Setup(t), 100000)
}

// BenchmarkHotPathPlansAtAMillion is TestHotPathsUseIndexes on a table of a million
// queued rows (ten thousand of them finished), for `go test -bench`: it fails, as the
// test does, on a hot path that reads pgrun.jobs sequentially. It takes about 10 s,
// most of it seeding; the time it reports is not the point.
func BenchmarkHotPathPlansAtAMillion(b *testing.B) {
	checkHotPathPlans(b, testkit.NewDB(b), 1_000_000)
}

// checkHotPathPlans fills a queue of rows jobs, finishes ten thousand, analyzes, and
// fails if a hot path's plan reads pgrun.jobs sequentially.
func checkHotPathPlans(t testing.TB, b *testkit.DB, rows int) {
	t.Helper()
	seedHot(t, b, rows)
	enqueueBatchOn(t, b.Ctx, b.Pool, "cold", 10) // a small queue: queue_stats counts it exactly
	_, err := b.Pool.Exec(b.Ctx, `analyze pgrun.jobs`)
	require.NoError(t, err)

	conn, plans := explainSession(t, b)
	var id int64
	var attempt int32
	calls := []string{
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 100)`,
		`with c as (select id, attempt from pgrun.claim_jobs('hot', 'w2', 500))
		 select count(*) from pgrun.complete_jobs((select array_agg(id) from c), (select array_agg(attempt) from c), null, 'w2')`,
		`select id, attempt from pgrun.claim_jobs('hot', 'w1', 1, after_priority => 0::smallint, after_run_at => now() - interval '1 hour', after_id => 1)`,
		`select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w1')`,
		`select count(*) from pgrun.renew_leases('w1')`,
		`select pgrun.maintain(leader => 'plan-check')`,
		`select count(*) from pgrun.enqueue_batch(array['noop', 'noop'], queues => array['hot', 'hot'], unique_keys => array['k1', null])`,
		`select pgrun.enqueue_job('noop', queue => 'hot', unique_key => 'k2')`,
		`select count(*) from pgrun.queue_stats`,
	}
	for _, c := range calls {
		var err error
		switch {
		case strings.Contains(c, "after_id"):
			err = conn.QueryRow(b.Ctx, c).Scan(&id, &attempt)
		case strings.Contains(c, "$1"): // the job the resumed claim took
			_, err = conn.Exec(b.Ctx, c, id, attempt)
		default:
			_, err = conn.Exec(b.Ctx, c)
		}
		require.NoError(t, err, c)
	}
	requireNoSeqScan(t, plans(), 20, "a hot path")
}

// seedHot fills queue "hot" with rows jobs and finishes the first ten thousand of
// them, so that the plan checks run beside a backlog and a history.
func seedHot(t testing.TB, b *testkit.DB, rows int) {
	t.Helper()
	enqueueBatchOn(t, b.Ctx, b.Pool, "hot", rows)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array_agg(id), array_agg(attempt))
		from pgrun.claim_jobs('hot', 'seed', 10000)`)
	require.NoError(t, err)
}

// analyzeSession is explainSession with the plans carrying what each node did
// (auto_explain.log_analyze): rows, loops and rows removed by filters.
func analyzeSession(t testing.TB, b *testkit.DB) (conn *pgx.Conn, plans func() []string) {
	t.Helper()
	conn, plans = explainSession(t, b)
	_, err := conn.Exec(b.Ctx, `set auto_explain.log_analyze = on`)
	require.NoError(t, err)
	return conn, plans
}

// explainSession opens a superuser session on the test's database (LOAD needs it)
// that has auto_explain plan every statement, nested ones included, and send each
// plan to the session as a notice; plans returns those received so far. It skips the
// test where auto_explain is not installed.
func explainSession(t testing.TB, b *testkit.DB) (conn *pgx.Conn, plans func() []string) {
	t.Helper()
	testURL, err := url.Parse(b.URL)
	require.NoError(t, err)
	admin, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	admin.Path = testURL.Path
	cfg, err := pgx.ParseConfig(admin.String())
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n.Message)
	}
	conn, err = pgx.ConnectConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(b.Ctx, `load 'auto_explain'`); testkit.SQLState(err) == "58P01" {
		t.Skip("auto_explain is not installed on this server (PostgreSQL's contrib modules)")
	}
	for _, s := range []string{`load 'auto_explain'`, `set auto_explain.log_min_duration = 0`,
		`set auto_explain.log_nested_statements = on`, `set auto_explain.log_level = notice`} {
		_, err := conn.Exec(b.Ctx, s)
		require.NoError(t, err, s)
	}
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// requireNoSeqScan fails on a plan that reads pgrun.jobs sequentially, and unless
// auto_explain reported more than least plans (the nested statements are there).
func requireNoSeqScan(t testing.TB, plans []string, least int, what string) {
	t.Helper()
	require.Greater(t, len(plans), least, "auto_explain reported the nested statements")
	seq := regexp.MustCompile(`Seq Scan on jobs\b`)
	for _, p := range plans {
		require.False(t, seq.MatchString(p), "%s reads pgrun.jobs sequentially:\n%s", what, p)
	}
}

// requireNoWideFilter fails on a plan (auto_explain with log_analyze) whose filter
// threw away a thousand rows or more: a statement that reads the rows it has nothing
// to do with, as an index that does not lead to its rows makes it. It also fails
// unless auto_explain reported more than least plans.
func requireNoWideFilter(t testing.TB, plans []string, least int, what string) {
	t.Helper()
	require.Greater(t, len(plans), least, "auto_explain reported the nested statements")
	removed := regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
	for _, p := range plans {
		for _, m := range removed.FindAllStringSubmatch(p, -1) {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			require.Less(t, n, 1000, "%s read rows it had nothing to do with:\n%s", what, p)
		}
	}
}

// A session that first claimed while pgrun.jobs was small keeps index plans once the
// table has grown, before any ANALYZE: a plan cached from the small table (a generic
// plan forced, or chosen by PostgreSQL after five calls) would read the whole table
// on every claim and report for the rest of the session. Forcing generic plans in
// claim_jobs did exactly that (386 jobs/s instead of 9,000 in the steady-state bench).
func TestHotPathsKeepIndexesAsTheTableGrows(t *testing.T) {
	b := testkit.Setup(t)
	conn, plans := explainSession(t, b)
	var ids []int64
	var attempts []int32
	for range 8 { // past the five custom plans after which PostgreSQL may go generic
		enqueueBatchOn(t, b.Ctx, conn, "hot", 3)
		require.NoError(t, conn.QueryRow(b.Ctx, `select array_agg(id), array_agg(attempt) from pgrun.claim_jobs('hot', 'w1', 3)`).
			Scan(&ids, &attempts))
		_, err := conn.Exec(b.Ctx, `select count(*) from pgrun.renew_leases('w1', $1)`, ids)
		require.NoError(t, err)
		_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.complete_jobs($1, $2, null, 'w1')`, ids, attempts)
		require.NoError(t, err)
		_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.enqueue_batch(array['noop', 'noop'], queues => array['hot', 'hot'],
			unique_keys => array[gen_random_uuid()::text, null])`)
		require.NoError(t, err)
	}
	// Grown by another session; no ANALYZE (and no autovacuum on the test server).
	enqueueBatchOn(t, b.Ctx, b.Pool, "hot", 100000)
	before := len(plans())
	require.NoError(t, conn.QueryRow(b.Ctx, `select array_agg(id), array_agg(attempt) from pgrun.claim_jobs('hot', 'w1', 100)`).
		Scan(&ids, &attempts))
	require.Len(t, ids, 100)
	_, err := conn.Exec(b.Ctx, `select count(*) from pgrun.renew_leases('w1', $1)`, ids)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.complete_jobs($1, $2, null, 'w1')`, ids, attempts)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.enqueue_batch(array['noop', 'noop'], queues => array['hot', 'hot'],
		unique_keys => array['grown', null])`)
	require.NoError(t, err)
	requireNoSeqScan(t, plans()[before:], 10, "a hot path of a session older than the table's growth")
}

// The same for the other statements a long-lived session repeats: maintain() rounds
// (a runner leads them every second from its start), claims that resume after a key,
// and queue_stats (the metrics scrape and the dashboard).
func TestMaintenanceKeepsIndexesAsTheTableGrows(t *testing.T) {
	b := testkit.Setup(t)
	conn, plans := explainSession(t, b)
	var id int64
	var attempt int32
	for range 8 {
		enqueueBatchOn(t, b.Ctx, conn, "hot", 3)
		require.NoError(t, conn.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs('hot', 'w1', 1,
			after_priority => 0::smallint, after_run_at => now() - interval '1 hour', after_id => 1)`).Scan(&id, &attempt))
		_, err := conn.Exec(b.Ctx, `select pgrun.maintain(leader => 'plan-check')`)
		require.NoError(t, err)
		_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.queue_stats`)
		require.NoError(t, err)
	}
	enqueueBatchOn(t, b.Ctx, b.Pool, "hot", 100000)
	_, err := b.Pool.Exec(b.Ctx, `select count(*) from pgrun.claim_jobs('hot', 'seed', 10000)`)
	require.NoError(t, err)
	before := len(plans())
	require.NoError(t, conn.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs('hot', 'w1', 1,
		after_priority => 0::smallint, after_run_at => now() - interval '1 hour', after_id => $1)`, id).Scan(&id, &attempt))
	_, err = conn.Exec(b.Ctx, `select pgrun.maintain(leader => 'plan-check')`)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.queue_stats`)
	require.NoError(t, err)
	requireNoSeqScan(t, plans()[before:], 10, "maintenance of a session older than the table's growth")
}

// enqueueBatchOn enqueues n noop jobs into queue with one enqueue_batch call made on
// db: the pool, or the session whose cached plans a test examines.
func enqueueBatchOn(t testing.TB, ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, queue string, n int) {
	t.Helper()
	_, err := db.Exec(ctx, `select count(*) from pgrun.enqueue_batch(array_fill('noop'::text, array[$2::int]),
		queues => array_fill($1::text, array[$2::int]))`, queue, n)
	require.NoError(t, err)
}

// A batch of completions reads pgrun.jobs once, whatever the statistics say of the
// running rows: never analyzed (a new database, autovacuum not yet round), analyzed
// while every job was queued (claimed_by all NULL, so "claimed_by = worker" looks like
// no row at all), or vacuumed while the table was nearly empty but kept its pages (a
// purge, an ephemeral queue that deleted its jobs, a vacuum that could not truncate),
// so that the planner reckons the table at a handful of rows however many jobs came
// since. Planned from any of them, complete_jobs read the jobs first and matched each
// against the whole unnested batch (a nested loop with the batch inside, every pair
// compared): 1.3 s for 1,000 completions on a table of 12,000 rows, a fan-in of 10,000
// children at 2,500/s instead of over 20,000, and over 20 s a batch once two million
// jobs had come after the vacuum. A hash of the whole table, a fair plan on 12,000
// rows, is the same plan that reads two million, so each batch must read only its own
// rows.
func TestCompletionsGoByKeyWhateverTheStatistics(t *testing.T) {
	for _, stats := range []string{"never analyzed", "analyzed while all were queued", "vacuumed while nearly empty"} {
		t.Run(stats, func(t *testing.T) {
			b := testkit.Setup(t)
			if stats == "vacuumed while nearly empty" {
				vacuumNearlyEmpty(t, b)
			}
			enqueueBatchOn(t, b.Ctx, b.Pool, "mid", 12000)
			// An ephemeral queue, so that complete_jobs runs its DELETE as well.
			_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('fleeting', ephemeral => true)`)
			require.NoError(t, err)
			if stats == "analyzed while all were queued" {
				_, err := b.Pool.Exec(b.Ctx, `analyze pgrun.jobs`)
				require.NoError(t, err)
			}
			var ids []int64
			var attempts []int32
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(id), array_agg(attempt) from pgrun.claim_jobs('mid', 'w1', 1000)`).
				Scan(&ids, &attempts))
			require.Len(t, ids, 1000)
			conn, plans := analyzeSession(t, b)
			var done int
			require.NoError(t, conn.QueryRow(b.Ctx, `select count(*) from pgrun.complete_jobs($1, $2, null, 'w1')`, ids, attempts).Scan(&done))
			require.Equal(t, 1000, done)
			requireNoPairwiseJoin(t, plans(), 2, "complete_jobs")
			requireBatchReadsItsJobsOnly(t, plans(), len(ids), "complete_jobs")
		})
	}
}

// vacuumNearlyEmpty grows pgrun.jobs, empties it but for its last row (so that vacuum
// cannot truncate it) and vacuums it: pg_class then holds one live row over all those
// pages, and the planner reckons whatever comes next at a handful of rows.
func vacuumNearlyEmpty(t testing.TB, b *testkit.DB) {
	t.Helper()
	enqueueBatchOn(t, b.Ctx, b.Pool, "gone", 12000)
	enqueueBatchOn(t, b.Ctx, b.Pool, "last", 1)
	testkit.ExecAll(t, b, `delete from pgrun.jobs where queue = 'gone'`, `vacuum analyze pgrun.jobs`)
	var tuples float64
	var pages int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select reltuples, relpages from pg_class
		where oid = 'pgrun.jobs'::regclass`).Scan(&tuples, &pages))
	require.Equal(t, 1.0, tuples, "vacuum counted the one job left")
	require.Greater(t, pages, 100, "vacuum kept the table's pages")
}

// requireBatchReadsItsJobsOnly fails unless each UPDATE or DELETE of pgrun.jobs (j) in
// plans (auto_explain with log_analyze) read at most batch rows of the table: a batch
// that finds its jobs by key reads as many rows as it holds, one that scans the table
// (a whole index or the heap, hashed or compared pair by pair) reads all of them.
func requireBatchReadsItsJobsOnly(t testing.TB, plans []string, batch int, what string) {
	t.Helper()
	scan := regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Tid Scan)( using \S+)? on jobs j .*actual time=\S+ rows=(\d+) loops=(\d+)`)
	checked := 0
	for _, p := range plans {
		if !strings.Contains(p, "Update on jobs j") && !strings.Contains(p, "Delete on jobs j") {
			continue
		}
		for _, m := range scan.FindAllStringSubmatch(p, -1) {
			rows, err := strconv.Atoi(m[3])
			require.NoError(t, err)
			loops, err := strconv.Atoi(m[4])
			require.NoError(t, err)
			require.LessOrEqual(t, rows*loops, batch, "%s read more of pgrun.jobs than its batch of %d:\n%s", what, batch, p)
			checked++
		}
	}
	require.Positive(t, checked, "%s: auto_explain reported no scan of pgrun.jobs under an UPDATE or DELETE", what)
}

// requireNoPairwiseJoin fails on a plan that joins a batch (r) to pgrun.jobs (j) by
// a nested loop that compares the ids of every pair (its join filter holds the ids'
// equality: no index or hash does the matching), and unless auto_explain reported
// more than least plans.
func requireNoPairwiseJoin(t *testing.T, plans []string, least int, what string) {
	t.Helper()
	require.Greater(t, len(plans), least, "auto_explain reported the nested statements")
	pairwise := regexp.MustCompile(`Join Filter: .*\b(j\.id = r\.id|r\.id = j\.id)\b`)
	for _, p := range plans {
		inLoop := false // reading the properties of a nested loop, before its first child
		for _, line := range strings.Split(p, "\n") {
			switch {
			case strings.Contains(line, "Nested Loop"):
				inLoop = true
			case strings.Contains(line, "->"):
				inLoop = false
			case inLoop && pairwise.MatchString(line):
				require.Fail(t, what+" compares every pair of a batch and pgrun.jobs", "%s", p)
			}
		}
	}
}

// The batch writes planned once (claim_locked, succeed_running, delete_succeeded:
// 30_claim.sql) pin the
// planner, and every trigger an UPDATE of pgrun.jobs fires, which runs under those
// settings, sets the planner's own choices back: planned under the writes' pins, a
// trigger's statement would keep a generic plan with no sequential scan or nested
// loop for the rest of the session, whoever fired it next.
func TestPlannedOnceWritesPinThePlannerAndTriggersUnpinIt(t *testing.T) {
	b := testkit.Setup(t)
	config := func(q string) map[string]string {
		t.Helper()
		rows, err := b.Pool.Query(b.Ctx, q)
		require.NoError(t, err)
		got := map[string]string{}
		for rows.Next() {
			var name, conf string
			require.NoError(t, rows.Scan(&name, &conf))
			got[name] = conf
		}
		require.NoError(t, rows.Err())
		return got
	}
	writes := config(`select p.proname::text, array_to_string(p.proconfig, ';') from pg_proc p
		where p.pronamespace = 'pgrun'::regnamespace and p.proname in ('claim_locked', 'succeed_running', 'delete_succeeded')`)
	require.Len(t, writes, 3)
	for f, conf := range writes {
		for _, pin := range []string{"plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_nestloop=off", "jit=off"} {
			require.Contains(t, strings.Split(conf, ";"), pin, f)
		}
	}
	// Triggers on pgrun.jobs that fire on UPDATE (tgtype bit 16).
	triggers := config(`select distinct p.proname::text, coalesce(array_to_string(p.proconfig, ';'), '')
		from pg_trigger g join pg_proc p on p.oid = g.tgfoid
		where g.tgrelid = 'pgrun.jobs'::regclass and not g.tgisinternal and g.tgtype & 16 <> 0`)
	require.Contains(t, triggers, "jobs_dispatch")
	for f, conf := range triggers {
		if f == "jobs_mark_dispatched" {
			continue // sets a column of its row; its one call (clock) reads a setting by key
		}
		for _, pin := range []string{"plan_cache_mode=auto", "enable_seqscan=on", "enable_nestloop=on"} {
			require.Contains(t, strings.Split(conf, ";"), pin, "trigger function %s", f)
		}
	}
}
