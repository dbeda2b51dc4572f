package tests

import (
	"strings"
	"testing"

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
	for _, s := range []string{
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 10000, '1 hour')`,
		`select count(*) from pgrun.claim_jobs('hot', 'w2', 10000, '1 hour')`,
		`select count(pgrun.set_queue('q' || g)) from generate_series(1, 20) g`,
		`select count(*) from pgrun.enqueue_columns(array_fill('noop'::text, array[3]), queues => array_fill('q1'::text, array[3]))`,
		`select count(*) from pgrun.claim_jobs('q1', 'w3', 2, '1 hour')`,
		`analyze pgrun.jobs`,
	} {
		_, err := b.Pool.Exec(b.Ctx, s)
		require.NoError(t, err, s)
	}
	conn, plans := explainSession(t, b)
	_, err := conn.Exec(b.Ctx, `set auto_explain.log_analyze = on`)
	require.NoError(t, err)
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
