package tests

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// queue_stats counts the running jobs of every queue in one pass, not one pass per
// queue: with 20,000 jobs running in one queue and twenty other queues, two of its
// jobs running in one of them, its statements (auto_explain with log_analyze) throw
// away no thousand rows, and the small counts are exact. The running index is not by
// queue, so each queue's count used to walk every running job of every queue: 22
// queues beside 40,000 running jobs took 320-400 ms a call, on the metrics scrape's
// and the dashboard's every few seconds. A plan check, not a timing.
func TestQueueStatsCountsRunningJobsInOnePass(t *testing.T) {
	b := testkit.Setup(t)
	seedHot(t, b, 30000)
	testkit.ExecAll(t, b,
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 10000, '1 hour')`,
		`select count(*) from pgrun.claim_jobs('hot', 'w2', 10000, '1 hour')`,
		`select count(pgrun.set_queue('q' || g)) from generate_series(1, 20) g`,
		`select count(*) from pgrun.enqueue_columns(array_fill('noop'::text, array[3]), queues => array_fill('q1'::text, array[3]))`,
		`select count(*) from pgrun.claim_jobs('q1', 'w3', 2, '1 hour')`,
		`analyze pgrun.jobs`,
	)
	conn, plans := analyzeSession(t, b)
	var running, queued int64
	var estimated bool
	require.NoError(t, conn.QueryRow(b.Ctx, `select running, queued, estimated from pgrun.queue_stats where queue = 'q1'`).
		Scan(&running, &queued, &estimated))
	require.Equal(t, []any{int64(2), int64(1), false}, []any{running, queued, estimated}, "q1's counts, exact")
	require.NoError(t, conn.QueryRow(b.Ctx, `select running, estimated from pgrun.queue_stats where queue = 'q2'`).
		Scan(&running, &estimated))
	require.Equal(t, []any{int64(0), false}, []any{running, estimated}, "q2's counts, exact")
	// The estimate's TABLESAMPLE pass reads about 20,000 rows by design (20,000 running
	// are over the exact limit), finished ones among them: it is left out.
	var checked []string
	for _, p := range plans() {
		if !strings.Contains(p, "Sample Scan on jobs") {
			checked = append(checked, p)
		}
	}
	requireNoWideFilter(t, checked, 5, "queue_stats")
}

// worker_status counts the jobs each worker holds in one pass, not one per worker:
// with 20,000 jobs running under two of twelve registered workers, reading the view
// (auto_explain with log_analyze) scans pgrun.jobs once, and the counts are right.
// Counted worker by worker, each count walked the running jobs of every worker:
// 280-470 ms for 20 workers beside 40,000 running jobs.
func TestWorkerStatusCountsHeldJobsInOnePass(t *testing.T) {
	b := testkit.Setup(t)
	seedHot(t, b, 30000)
	testkit.ExecAll(t, b,
		`select count(pgrun.worker_heartbeat('w' || g, 'h' || g, g, array['hot'], '{}')) from generate_series(1, 12) g`,
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 10000, '1 hour')`,
		`select count(*) from pgrun.claim_jobs('hot', 'w2', 9999, '1 hour')`,
		`analyze pgrun.jobs`,
	)
	conn, plans := analyzeSession(t, b)
	rows, err := conn.Query(b.Ctx, `select id, running from pgrun.worker_status where id in ('w1', 'w2', 'w3') order by id`)
	require.NoError(t, err)
	held := map[string]int64{}
	var id string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { held[id] = n; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"w1": 10000, "w2": 9999, "w3": 0}, held)
	// One pass over the running jobs: no scan of pgrun.jobs runs once per worker.
	got := plans()
	require.NotEmpty(t, got, "auto_explain reported the view's plan")
	scans := regexp.MustCompile(`Scan[^\n]* on jobs \w+ [^\n]*loops=(\d+)\)`)
	found := false
	for _, p := range got {
		for _, m := range scans.FindAllStringSubmatch(p, -1) {
			found = true
			require.Equal(t, "1", m[1], "worker_status read the running jobs once per worker:\n%s", p)
		}
	}
	require.True(t, found, "the plan reads pgrun.jobs")
}
