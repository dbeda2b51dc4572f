package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// A job whose model is warm on another live worker is left to it for warm_wait, then
// taken by anyone; a model_required job goes only to a worker that can serve it.
func TestWarmWaitAndRequiredModels(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_queue('gpu', warm_wait => '10 seconds')`)
	c.Exec(`select pgrun.worker_heartbeat('warm', 'h1', 1, '{gpu}', '{m1}')`)
	c.Exec(`select pgrun.worker_heartbeat('cold', 'h2', 2, '{gpu}', '{}', servable => '{m9}')`)
	c.Exec(`select pgrun.enqueue_job('infer', queue => 'gpu', model => 'm1')`)
	require.Zero(t, claimCount(t, c.Conn, "gpu", "cold", 10), "left for the worker with m1 warm")
	c.Set(now.Add(11 * time.Second))
	require.Equal(t, 1, claimCount(t, c.Conn, "gpu", "cold", 10), "nobody took it within warm_wait")

	c.Exec(`insert into pgrun.jobs (kind, queue, model, model_required) values ('infer', 'gpu', 'm2', true), ('infer', 'gpu', 'm9', true)`)
	var model string
	c.QueryRow(`select model from pgrun.claim_jobs('gpu', 'cold', 10)`, nil, &model)
	require.Equal(t, "m9", model, "cold can serve m9 but not m2")
	c.QueryRow(`select model from pgrun.claim_jobs('gpu', 'warm', 10, models => '{m2}')`, nil, &model)
	require.Equal(t, "m2", model, "a worker with m2 warm takes it")
}

// Model affinity is a tiebreak within priority, not above it: a warm job at
// priority 100 does not go before a cold job at priority 0; within a priority the
// warm job goes first.
func TestAffinityIsATiebreakWithinPriority(t *testing.T) {
	b := testkit.Setup(t)
	var coldUrgent, warmLate, coldLate, warmLate2 int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100, model => 'm1')`).Scan(&warmLate))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 0)`).Scan(&coldUrgent))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100)`).Scan(&coldLate))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100, model => 'm1')`).Scan(&warmLate2))
	claim := func() int64 {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('gpu', 'g', 1, null, array['m1'])`).Scan(&id))
		return id
	}
	require.Equal(t, coldUrgent, claim(), "priority first")
	require.Equal(t, warmLate, claim(), "then warm within priority 100")
	require.Equal(t, warmLate2, claim(), "warm before the earlier cold one")
	require.Equal(t, coldLate, claim())
}

// A claim reads the other workers once, not once per queued job it passes: a worker
// with no model warm, on a queue of 5,000 young jobs whose model is warm on another
// worker, leaves them all (warm_wait) and its claim's statements, planned and run
// under auto_explain, read pgrun.workers a handful of times. The routing rule used to
// look the other workers up for every job the scan passed: 7.6 s for one claim beside
// 100,000 such jobs. A plan check on what the claim reads, not a timing.
func TestColdClaimReadsTheWorkersOnce(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.worker_heartbeat('warm', 'h1', 1, '{gpu}', '{m1}')`,
		`select pgrun.worker_heartbeat('cold', 'h2', 2, '{gpu}', '{}')`,
		`select count(*) from pgrun.enqueue_columns(array_fill('embed'::text, array[5000]),
			queues => array_fill('gpu'::text, array[5000]), models => array_fill('m1'::text, array[5000]))`,
		`analyze pgrun.jobs`,
	)
	conn, plans := analyzeSession(t, b)
	var got int
	require.NoError(t, conn.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('gpu', 'cold', 10, models => '{}')`).Scan(&got))
	require.Zero(t, got, "every job is left to the worker with m1 warm")
	reads := 0
	for _, p := range plans() {
		reads += strings.Count(p, " on workers ")
	}
	require.Greater(t, reads, 0, "auto_explain reported the claim's statements")
	require.Less(t, reads, 10, "the claim read pgrun.workers once per job it passed")
}
