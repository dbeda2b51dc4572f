package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// pgrun.health (73_health.sql): each warning provoked in the test's own database,
// read in SQL, on the overview (JSON and HTML) and in `runner status`, and gone
// again once its cause is.

// healthRow is one row of pgrun.health.
type healthRow struct {
	Check    string         `db:"check_name" json:"check"`
	Severity string         `db:"severity" json:"severity"`
	Message  string         `db:"message" json:"message"`
	Hint     string         `db:"hint" json:"hint"`
	Fields   map[string]any `db:"fields" json:"fields"`
}

type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// health reads pgrun.health(args) on q: "" for the defaults, else the argument
// list as SQL ("xmin_after => '0'").
func health(t *testing.T, q querier, args string) []healthRow {
	t.Helper()
	rows, err := q.Query(context.Background(), fmt.Sprintf(`select check_name, severity, message, hint, fields from pgrun.health(%s)`, args))
	require.NoError(t, err)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[healthRow])
	require.NoError(t, err)
	return list
}

// withCheck keeps the rows of one check.
func withCheck(rows []healthRow, check string) []healthRow {
	var out []healthRow
	for _, r := range rows {
		if r.Check == check {
			out = append(out, r)
		}
	}
	return out
}

// ofServer reports whether r is about the server's own switches (autovacuum or
// track_counts off for the whole server), which a test database cannot change:
// this project's test server runs with autovacuum off.
func ofServer(r healthRow) bool {
	_, ok := r.Fields["setting"]
	return r.Check == "autovacuum_off" && ok
}

// serverRows are the rows health gives for the server's switches: one per switch
// that pg_settings shows off.
func serverRows(t *testing.T, b *testkit.DB) []healthRow {
	t.Helper()
	var off []string
	rows, err := b.Pool.Query(b.Ctx, `select name from pg_settings where name in ('autovacuum', 'track_counts') and setting = 'off' order by name`)
	require.NoError(t, err)
	off, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var out []healthRow
	for _, r := range health(t, b.Pool, "") {
		if ofServer(r) {
			out = append(out, r)
		}
	}
	require.Len(t, out, len(off), "one row per server switch that is off: %v", off)
	return out
}

// overviewHealth reads the overview's health list as JSON, and fails on any
// problem the page reports.
func overviewHealth(t *testing.T, base string) []healthRow {
	t.Helper()
	resp, body := get(t, base+"/?format=json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var doc struct {
		Data struct {
			Health []healthRow `json:"health"`
		} `json:"data"`
		Problems []string `json:"problems"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	require.Empty(t, doc.Problems)
	require.NotNil(t, doc.Data.Health, "health is [] when healthy, never missing: %s", body)
	return doc.Data.Health
}

// runnerStatus runs `runner status` on dbURL and returns what it printed.
func runnerStatus(t *testing.T, dbURL string) string {
	t.Helper()
	out, err := exec.Command(runnerBin, "status", "--database-url", dbURL).CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

// requireShown asserts that w is on the overview (in its JSON, and in its HTML
// with its hint) and in `runner status` (its message on a line, its hint on the
// next, once).
func requireShown(t *testing.T, base, dbURL string, w healthRow) {
	t.Helper()
	var found bool
	list := overviewHealth(t, base)
	for _, r := range list {
		// The words, not the numbers behind them, which can move between reads.
		found = found || r.Check == w.Check && r.Severity == w.Severity && r.Message == w.Message && r.Hint == w.Hint
	}
	require.True(t, found, "%+v not in %+v", w, list)
	_, page := get(t, base+"/")
	require.Contains(t, page, `<section class="health">`)
	require.Contains(t, page, html.EscapeString(w.Message))
	require.Contains(t, page, html.EscapeString(w.Hint))
	out := runnerStatus(t, dbURL)
	require.Equal(t, 1, strings.Count(out, "\n"+w.Message+"\n  hint: "+w.Hint+"\n"), out)
}

// requireGone asserts that no row of check is in health, on the overview or in
// `runner status`.
func requireGone(t *testing.T, b *testkit.DB, base string, check, message string) {
	t.Helper()
	require.Empty(t, withCheck(health(t, b.Pool, ""), check))
	require.Empty(t, withCheck(overviewHealth(t, base), check))
	require.NotContains(t, runnerStatus(t, b.URL), message)
}

// healthy makes b's database healthy: one maintenance round led by a runner.
func healthy(t *testing.T, b *testkit.DB) {
	t.Helper()
	testkit.ExecAll(t, b, `select pgrun.maintain(leader => 'health-test')`)
}

// A healthy database shows no warning: nothing but what the server's own settings
// say (autovacuum off on this project's test server), on the page and in status.
func TestHealthyDatabaseShowsNoWarning(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	testkit.ExecAll(t, b, `select pgrun.worker_heartbeat('w1', 'host-1', 1, array['default'])`)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	server := serverRows(t, b)
	require.ElementsMatch(t, server, health(t, b.Pool, ""))
	base := serveUI(t, b.Pool, ui.Options{})
	require.ElementsMatch(t, server, overviewHealth(t, base))
	_, page := get(t, base+"/")
	if len(server) == 0 {
		require.NotContains(t, page, `class="health"`)
	}
	out := runnerStatus(t, b.URL)
	require.Equal(t, len(server), strings.Count(out, "  hint: "), out)
	for _, w := range []string{"no maintenance round", "dead row versions beside", "xmin horizon", "no live worker serves",
		"autovacuum is off for table"} {
		require.NotContains(t, out, w)
		require.NotContains(t, page, w)
	}
}

// Autovacuum switched off for pgrun.jobs is a warning that says how to switch it
// back on; switched back on, the warning goes.
func TestHealthWarnsWhenAutovacuumIsOffForJobs(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	testkit.ExecAll(t, b, `alter table pgrun.jobs set (autovacuum_enabled = off)`)
	rows := withCheck(health(t, b.Pool, ""), "autovacuum_off")
	var table []healthRow
	for _, r := range rows {
		if !ofServer(r) {
			table = append(table, r)
		}
	}
	require.Len(t, table, 1, "%+v", rows)
	w := table[0]
	require.Equal(t, "warning", w.Severity)
	require.Equal(t, map[string]any{"table": "pgrun.jobs"}, w.Fields)
	require.Contains(t, w.Message, "autovacuum is off for table pgrun.jobs")
	require.Contains(t, w.Hint, "ALTER TABLE pgrun.jobs SET (autovacuum_enabled = on)")
	base := serveUI(t, b.Pool, ui.Options{})
	requireShown(t, base, b.URL, w)

	testkit.ExecAll(t, b, `alter table pgrun.jobs set (autovacuum_enabled = on)`)
	require.NotContains(t, health(t, b.Pool, ""), w)
	require.NotContains(t, overviewHealth(t, base), w)
	require.NotContains(t, runnerStatus(t, b.URL), w.Message)
}

// More dead row versions than live rows in pgrun.jobs (12,000 jobs inserted and
// deleted, with autovacuum off for the table so that it cannot reclaim them
// first) is a warning that says to vacuum; after a VACUUM it goes.
func TestHealthWarnsWhenDeadRowsExceedLive(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	testkit.ExecAll(t, b, `alter table pgrun.jobs set (autovacuum_enabled = off)`)
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	for _, stmt := range []string{
		`insert into pgrun.jobs (kind, queue) select 'noop', 'bloat' from generate_series(1, 12000)`,
		`delete from pgrun.jobs where queue = 'bloat'`,
		// The table's counters reach the shared statistics when this session is idle
		// next, at most once a second: ask for it now instead of in ten seconds.
		`select pg_stat_force_next_flush()`,
	} {
		_, err := conn.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
	conn.Release()
	var w healthRow
	testkit.Eventually(t, 30*time.Second, "the dead rows of pgrun.jobs in health()", func() bool {
		for _, r := range withCheck(health(t, b.Pool, ""), "dead_rows") {
			if r.Fields["table"] == "pgrun.jobs" {
				w = r
				return true
			}
		}
		return false
	})
	require.Equal(t, "warning", w.Severity)
	require.GreaterOrEqual(t, w.Fields["dead"], 12000.0)
	require.Less(t, w.Fields["live"], w.Fields["dead"])
	require.Contains(t, w.Message, "table pgrun.jobs holds")
	require.Contains(t, w.Hint, "VACUUM (VERBOSE) pgrun.jobs")
	base := serveUI(t, b.Pool, ui.Options{})
	requireShown(t, base, b.URL, w)

	testkit.ExecAll(t, b, `vacuum pgrun.jobs`)
	testkit.Eventually(t, 30*time.Second, "the dead rows warning to go after VACUUM", func() bool {
		return !containsTable(withCheck(health(t, b.Pool, ""), "dead_rows"), "pgrun.jobs")
	})
	require.False(t, containsTable(withCheck(overviewHealth(t, base), "dead_rows"), "pgrun.jobs"))
}

// containsTable reports whether a row of rows is about table.
func containsTable(rows []healthRow, table string) bool {
	for _, r := range rows {
		if r.Fields["table"] == table {
			return true
		}
	}
	return false
}

// holdSnapshot opens a REPEATABLE READ transaction on a connection of its own and
// takes its snapshot, which holds the xmin horizon until the test ends. It returns
// the holding session's pid.
func holdSnapshot(t *testing.T, p *pgxpool.Pool) uint32 {
	t.Helper()
	conn, err := p.Acquire(context.Background())
	require.NoError(t, err)
	tx, err := conn.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `select count(*) from pgrun.queues`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		conn.Release()
	})
	return conn.Conn().PgConn().PID()
}

// lowerXminDefault re-creates pgrun.health in the test's own database with
// xmin_after defaulting to zero, the body untouched: the overview and `runner
// status` pass no threshold, and a test cannot wait five minutes.
func lowerXminDefault(t *testing.T, b *testkit.DB) {
	t.Helper()
	var def string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pg_get_functiondef('pgrun.health(interval, interval)'::regprocedure)`).Scan(&def))
	lowered := strings.Replace(def, `xmin_after interval DEFAULT '00:05:00'::interval`, `xmin_after interval DEFAULT '00:00:00'::interval`, 1)
	require.NotEqual(t, def, lowered, "the default of xmin_after is five minutes")
	_, err := b.Pool.Exec(b.Ctx, lowered)
	require.NoError(t, err)
}

// A session that holds a snapshot is named by pid, with its age, once it has held
// it for xmin_after; with the default of five minutes a snapshot a moment old is
// not reported.
func TestHealthNamesTheSessionHoldingTheXminHorizon(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	pid := holdSnapshot(t, b.Pool)
	require.Empty(t, withCheck(health(t, b.Pool, ""), "xmin_held"), "held for less than five minutes")

	rows := withCheck(health(t, b.Pool, `xmin_after => '0'`), "xmin_held")
	require.Len(t, rows, 1, "%+v", rows)
	w := rows[0]
	require.Equal(t, "warning", w.Severity)
	require.Equal(t, float64(pid), w.Fields["pid"])
	require.Equal(t, true, w.Fields["timed"])
	require.Equal(t, "idle in transaction", w.Fields["state"])
	require.GreaterOrEqual(t, w.Fields["held_seconds"], 0.0)
	require.Contains(t, w.Message, fmt.Sprintf("pid %d (", pid))
	require.Contains(t, w.Message, "has held the xmin horizon for ")
	require.Contains(t, w.Hint, fmt.Sprintf("WHERE pid = %d", pid))
	require.Contains(t, w.Hint, fmt.Sprintf("pg_terminate_backend(%d)", pid))

	lowerXminDefault(t, b)
	base := serveUI(t, b.Pool, ui.Options{})
	page := overviewHealth(t, base)
	found := false
	for _, r := range withCheck(page, "xmin_held") {
		found = found || r.Fields["pid"] == float64(pid)
	}
	require.True(t, found, "%+v", page)
	_, html := get(t, base+"/")
	require.Contains(t, html, fmt.Sprintf("pid %d (", pid))
	require.Contains(t, html, fmt.Sprintf("pg_terminate_backend(%d)", pid))
	out := runnerStatus(t, b.URL)
	require.Contains(t, out, fmt.Sprintf("\npid %d (", pid))
	require.Contains(t, out, fmt.Sprintf("pg_terminate_backend(%d)", pid))
}

// Run as a role that may not read other roles' sessions (health's owner without
// pg_read_all_stats), health cannot time a snapshot held by another role; it
// judges it by its age in transactions instead, and says so and what to grant.
func TestHealthDegradesWithoutReadAllStats(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	owner, _ := testkit.NewRole(t, b, "pgrun_admin")
	var me string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select current_user`).Scan(&me))
	admin := testkit.AsServerUser(t, b.URL)
	for _, stmt := range []string{
		fmt.Sprintf(`alter function pgrun.health(interval, interval) owner to %q`, owner),
		// The test's role called it as its owner; now it needs the grant.
		fmt.Sprintf(`grant execute on function pgrun.health(interval, interval) to %q`, me),
	} {
		_, err := admin.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
	pid := holdSnapshot(t, b.Pool) // the test's own role, another than owner
	require.Empty(t, withCheck(health(t, b.Pool, `xmin_after => '0'`), "xmin_held"),
		"a snapshot whose age the owner cannot read and only a few transactions old is not reported")

	// unseen_xid_age() transactions later, it is.
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `set synchronous_commit = off`)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `do $$ begin for i in 1 .. pgrun.unseen_xid_age() loop perform txid_current(); commit; end loop; end $$`,
		pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	_, err = conn.Exec(b.Ctx, `reset synchronous_commit`)
	require.NoError(t, err)
	conn.Release()

	rows := withCheck(health(t, b.Pool, ""), "xmin_held")
	require.Len(t, rows, 1, "%+v", rows)
	w := rows[0]
	require.Equal(t, float64(pid), w.Fields["pid"])
	require.Equal(t, false, w.Fields["timed"])
	require.Nil(t, w.Fields["held_seconds"])
	require.GreaterOrEqual(t, w.Fields["xid_age"], 10000.0)
	require.Contains(t, w.Message, fmt.Sprintf("pid %d (", pid))
	require.Contains(t, w.Message, "cannot be read")
	require.Contains(t, w.Message, owner)
	require.Contains(t, w.Hint, fmt.Sprintf("GRANT pg_read_all_stats TO %s", owner))
	base := serveUI(t, b.Pool, ui.Options{})
	requireShown(t, base, b.URL, w)
}

// No maintenance round for maintenance_after (or ever) is a warning that says how
// to get one: start an admin runner or call maintain() from pg_cron.
func TestHealthWarnsWhenMaintenanceHasNotRun(t *testing.T) {
	b := testkit.Setup(t)
	rows := withCheck(health(t, b.Pool, ""), "maintenance_stale")
	require.Len(t, rows, 1, "a fresh database has never been maintained")
	w := rows[0]
	require.Equal(t, "warning", w.Severity)
	require.Contains(t, w.Message, "no maintenance round has ever run")
	require.Contains(t, w.Hint, "pgrun_admin")
	require.Contains(t, w.Hint, "pgrun.maintain()")
	base := serveUI(t, b.Pool, ui.Options{})
	requireShown(t, base, b.URL, w)

	healthy(t, b)
	requireGone(t, b, base, "maintenance_stale", "no maintenance round")

	// Ten minutes later by the engine's clock, the last round is too old; a
	// round without a leader (pg_cron's) counts as well as a leader's.
	clock := testkit.PinClock(t, b, time.Now().Add(10*time.Minute))
	rows = withCheck(health(t, clock.Conn, ""), "maintenance_stale")
	require.Len(t, rows, 1)
	require.Contains(t, rows[0].Message, "no maintenance round has run for 00:")
	require.Greater(t, rows[0].Fields["seconds"], 300.0)
	require.Equal(t, "health-test", rows[0].Fields["leader"])
	require.Empty(t, withCheck(health(t, clock.Conn, `maintenance_after => '15 minutes'`), "maintenance_stale"))
	clock.Exec(`select pgrun.maintain()`)
	require.Empty(t, withCheck(health(t, clock.Conn, ""), "maintenance_stale"))
}

// A queue with due jobs and no live worker serving it is a warning that names the
// queue and the runner to start; a live worker for it, a paused queue or jobs not
// yet due are not.
func TestHealthWarnsOfAQueueNoLiveWorkerServes(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	for range 2 {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("orphan"))
		require.NoError(t, err)
	}
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("later"), pgrun.RunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("held"))
	require.NoError(t, err)
	testkit.ExecAll(t, b, `select pgrun.pause_queue('held')`)

	rows := withCheck(health(t, b.Pool, ""), "queue_unserved")
	require.Len(t, rows, 1, "%+v", rows)
	w := rows[0]
	require.Equal(t, "warning", w.Severity)
	require.Equal(t, "orphan: 2 queued jobs and no live worker serves this queue", w.Message)
	require.Contains(t, w.Hint, "runner work --queues orphan=8")
	require.Equal(t, map[string]any{"queue": "orphan", "queued": 2.0, "more": false}, w.Fields)
	base := serveUI(t, b.Pool, ui.Options{})
	requireShown(t, base, b.URL, w) // once: status' own flag of the queue is the same line

	testkit.ExecAll(t, b, `select pgrun.worker_heartbeat('w1', 'host-1', 1, array['orphan'])`)
	requireGone(t, b, base, "queue_unserved", "orphan:")
}

// queue_unserved counts a queue's due jobs exactly up to stats_exact_limit(), at
// every priority, and past it says "more than" the limit (queue_stats has the
// estimate); jobs not yet due are not counted, however many come first in the
// claim order.
func TestHealthCountsAnUnservedQueueUpToTheLimit(t *testing.T) {
	b := testkit.Setup(t)
	healthy(t, b)
	var limit int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.stats_exact_limit()`).Scan(&limit))
	testkit.ExecAll(t, b,
		// Ahead in the claim order (priority 0) but not due; then 3 due at priority 5.
		`insert into pgrun.jobs (kind, queue, priority, run_at) select 'noop', 'later', 0, now() + interval '1 hour'
		 from generate_series(1, 20000)`,
		`insert into pgrun.jobs (kind, queue, priority) select 'noop', 'later', 5 from generate_series(1, 3)`,
		`insert into pgrun.jobs (kind, queue, priority) select 'noop', 'flood', i % 3 from generate_series(1, `+
			fmt.Sprint(limit+1)+`) i`,
		`insert into pgrun.jobs (kind, queue, priority) select 'noop', 'full', i % 2 from generate_series(1, `+
			fmt.Sprint(limit)+`) i`)
	rows := withCheck(health(t, b.Pool, ""), "queue_unserved")
	require.Len(t, rows, 3, "%+v", rows)
	require.Equal(t, fmt.Sprintf("flood: more than %d queued jobs and no live worker serves this queue", limit), rows[0].Message)
	require.Equal(t, map[string]any{"queue": "flood", "queued": float64(limit), "more": true}, rows[0].Fields)
	require.Equal(t, fmt.Sprintf("full: %d queued jobs and no live worker serves this queue", limit), rows[1].Message)
	require.Equal(t, map[string]any{"queue": "full", "queued": float64(limit), "more": false}, rows[1].Fields)
	require.Equal(t, "later: 3 queued jobs and no live worker serves this queue", rows[2].Message)
}

// Bad thresholds are refused with 22023 and a hint; pgrun_admin may call health,
// a role with CONNECT only may not.
func TestHealthArgumentsAndPrivileges(t *testing.T) {
	b := testkit.Setup(t)
	for _, args := range []string{`xmin_after => null`, `xmin_after => '-1 second'`, `maintenance_after => null`,
		`maintenance_after => '-1 minute'`} {
		_, err := b.Pool.Exec(b.Ctx, `select * from pgrun.health(`+args+`)`)
		pe := testkit.PgError(t, err, args)
		require.Equal(t, "22023", pe.Code, args)
		require.NotEmpty(t, pe.Hint, args)
	}
	testkit.Allowed(t, b, testkit.AsRole(t, b, "pgrun_admin"), `select * from pgrun.health()`)
	testkit.Denied(t, b, testkit.AsRole(t, b, "pgrun_worker"), `select * from pgrun.health()`)
	testkit.Denied(t, b, testkit.AsRole(t, b, ""), `select * from pgrun.health()`)
}

// ui.TunePool turns JIT and parallel query off for every connection of a pool, and
// leaves a setting the pool chose itself alone.
func TestUITunePoolTurnsJITAndParallelQueryOffPerConnection(t *testing.T) {
	b := testkit.Setup(t)
	show := func(cfg *pgxpool.Config) string {
		p, err := pgxpool.NewWithConfig(b.Ctx, cfg)
		require.NoError(t, err)
		defer p.Close()
		var v string
		require.NoError(t, p.QueryRow(b.Ctx, `show jit`).Scan(&v))
		return v
	}
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	ui.TunePool(cfg)
	require.Equal(t, "off", show(cfg))
	p, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	var workers string
	require.NoError(t, p.QueryRow(b.Ctx, `show max_parallel_workers_per_gather`).Scan(&workers))
	p.Close()
	require.Equal(t, "0", workers)

	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("jit", "on")
	u.RawQuery = q.Encode()
	cfg, err = pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	ui.TunePool(cfg)
	require.Equal(t, "on", show(cfg))
}

// BenchmarkUIOverviewNewConnection times the overview's first request on new
// connections, with the server's JIT setting and with ui.TunePool, against the
// database PGRUN_UI_BENCH_URL names (scripts/ui-bench.sh fills one with 5 million
// jobs). Each iteration builds a new pool and dashboard, untimed, and times the one
// request; ns/op is the page's time.
func BenchmarkUIOverviewNewConnection(b *testing.B) {
	dbURL := os.Getenv("PGRUN_UI_BENCH_URL")
	if dbURL == "" {
		b.Skip("set PGRUN_UI_BENCH_URL to a database filled by scripts/ui-bench.sh")
	}
	ctx := context.Background()
	for _, jit := range []bool{true, false} {
		b.Run(fmt.Sprintf("jit=%t", jit), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cfg, err := pgxpool.ParseConfig(dbURL)
				require.NoError(b, err)
				if !jit {
					ui.TunePool(cfg)
				}
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				require.NoError(b, err)
				h, err := ui.New(pool, ui.Options{Logger: testkit.QuietLogger()})
				require.NoError(b, err)
				srv := httptest.NewServer(h)
				b.StartTimer()
				resp, err := http.Get(srv.URL + "/")
				require.NoError(b, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				b.StopTimer()
				require.Equal(b, http.StatusOK, resp.StatusCode)
				h.Close()
				srv.Close()
				pool.Close()
				b.StartTimer()
			}
		})
	}
}
