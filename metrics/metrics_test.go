package metrics_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/metrics"
	"github.com/pgrun/pgrun/runner"
)

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	exp  *metrics.Exporter
	srv  *httptest.Server
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testdb.Pool(t)
	exp := metrics.New(pool)
	srv := httptest.NewServer(exp.Handler())
	t.Cleanup(srv.Close)
	return &bundle{ctx: ctx, pool: pool, exp: exp, srv: srv}
}

// scrape fetches /metrics and returns its samples by "name{labels}" as exposed
// (labels sorted by name), and the text.
func (b *bundle) scrape(t *testing.T) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get(b.srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out, string(body)
}

// runJobs runs a runner with the exporter's hooks until every job of ids finished.
func (b *bundle) runJobs(t *testing.T, ids []int64) {
	t.Helper()
	r, err := runner.New(b.pool, runner.Config{
		Queues:              map[string]runner.QueueConfig{"default": {Workers: 4}},
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks:               []runner.Hooks{b.exp.Hooks()},
		MaintenanceInterval: 50 * time.Millisecond,
		ShutdownGrace:       2 * time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, runner.RegisterExamples(r))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs
			where id = any ($1) and status not in ('succeeded', 'failed')`, ids).Scan(&left))
		if left == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d jobs not finished in 30 s", left)
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually polls cond every 10 ms until it holds or 10 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// After a runner ran N jobs, the scrape counts them by queue and kind, with their
// claims, run and wait times, and its report round trips.
func TestScrapeCountsTheJobsARunnerRan(t *testing.T) {
	b := setup(t)
	const n = 25
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: runner.KindEcho, Args: map[string]int{"i": i}}
	}
	jobs, err := pgrun.EnqueueMany(b.ctx, b.pool, specs)
	require.NoError(t, err)
	failing, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindFail, runner.FailArgs{Permanent: true})
	require.NoError(t, err)
	ids := []int64{failing.ID}
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	b.runJobs(t, ids)

	// The hook of the last success runs just after its commit: poll the scrape.
	var got map[string]float64
	eventually(t, "the scrape to count every job", func() bool {
		got, _ = b.scrape(t)
		return got[`pgrun_jobs_succeeded_total{kind="echo",queue="default"}`] == n &&
			got[`pgrun_jobs_failed_total{kind="fail",queue="default"}`] == 1
	})
	require.EqualValues(t, n, got[`pgrun_jobs_claimed_total{kind="echo",queue="default"}`])
	require.EqualValues(t, n, got[`pgrun_job_outcomes_total{kind="echo",outcome="succeeded",queue="default"}`])
	require.EqualValues(t, n, got[`pgrun_job_run_duration_seconds_count{kind="echo",queue="default"}`])
	require.EqualValues(t, n+1, got[`pgrun_job_wait_seconds_count{queue="default"}`])
	require.EqualValues(t, n+1, got[`pgrun_report_round_trip_seconds_count{queue="default"}`])
	require.Positive(t, got[`pgrun_claim_round_trip_seconds_count{queue="default"}`])
	require.Zero(t, got[`pgrun_jobs_retried_total{kind="fail",queue="default"}`])
	require.Zero(t, got[`pgrun_report_errors_total{queue="default"}`])
	// The leader gauge and the step timings of one round are recorded one after the
	// other, so a scrape can fall between them: poll for both.
	eventually(t, "a maintain() round led by the runner, its steps timed", func() bool {
		got, _ = b.scrape(t)
		var steps float64
		for k, v := range got {
			if strings.HasPrefix(k, "pgrun_maintain_step_seconds_count{") {
				steps += v
			}
		}
		return got[`pgrun_maintain_leader`] == 1 && steps > 0
	})

	// Every metric follows the naming conventions.
	problems, err := testutil.GatherAndLint(b.exp.Registry())
	require.NoError(t, err)
	var ours []string
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "pgrun_") {
			ours = append(ours, p.Metric+": "+p.Text)
		}
	}
	require.Empty(t, ours)
}

// The queue gauges come from the database at each scrape and match the jobs there:
// due and scheduled counts, the oldest due job's age, the paused flag.
func TestScrapeReadsTheQueuesFromTheDatabase(t *testing.T) {
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `select pgrun.set_queue('idle')`)
	require.NoError(t, err)
	past := time.Now().Add(-time.Minute)
	future := time.Now().Add(time.Hour)
	var specs []pgrun.JobSpec
	for range 7 {
		specs = append(specs, pgrun.JobSpec{Kind: "nobody", Queue: "idle", RunAt: &past})
	}
	for range 3 {
		specs = append(specs, pgrun.JobSpec{Kind: "nobody", Queue: "idle", RunAt: &future})
	}
	specs = append(specs, pgrun.JobSpec{Kind: "nobody", RunAt: &future}) // queue default, nothing due
	_, err = pgrun.EnqueueMany(b.ctx, b.pool, specs)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `select pgrun.pause_queue('idle')`)
	require.NoError(t, err)

	got, text := b.scrape(t)
	value := func(key string) float64 {
		v, ok := got[key]
		require.True(t, ok, "%s missing from the scrape:\n%s", key, text)
		return v
	}
	require.EqualValues(t, 1, value(`pgrun_database_up`))
	require.EqualValues(t, 7, value(`pgrun_queue_jobs{queue="idle",state="queued"}`))
	require.EqualValues(t, 3, value(`pgrun_queue_jobs{queue="idle",state="scheduled"}`))
	require.EqualValues(t, 0, value(`pgrun_queue_jobs{queue="idle",state="running"}`))
	require.EqualValues(t, 1, value(`pgrun_queue_jobs{queue="default",state="scheduled"}`))
	require.EqualValues(t, 1, value(`pgrun_queue_paused{queue="idle"}`))
	require.EqualValues(t, 0, value(`pgrun_queue_paused{queue="default"}`))
	require.EqualValues(t, 0, value(`pgrun_queue_counts_estimated{queue="idle"}`))
	require.InDelta(t, 60, value(`pgrun_queue_oldest_queued_age_seconds{queue="idle"}`), 30)
	require.EqualValues(t, 0, value(`pgrun_queue_oldest_queued_age_seconds{queue="default"}`), "nothing due")
	require.EqualValues(t, 7, value(`pgrun_queue_unhandled_jobs{queue="idle"}`), "no worker serves the queue")
	require.GreaterOrEqual(t, value(`pgrun_database_scrape_duration_seconds`), 0.0)

	// A scrape that cannot reach the database still serves the runner metrics.
	b.pool.Close()
	got, _ = b.scrape(t)
	require.EqualValues(t, 0, got[`pgrun_database_up`])
	_, found := got[`pgrun_queue_jobs{queue="idle",state="queued"}`]
	require.False(t, found)
	_, found = got[`pgrun_maintain_leader`]
	require.True(t, found)
}

// The exporter's metrics, the queue gauges included, pass promlint.
func TestMetricsLintClean(t *testing.T) {
	b := setup(t)
	_, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindNoop, nil)
	require.NoError(t, err)
	// Every runner series exists once an event of each kind arrived.
	h := b.exp.Hooks()
	job := &pgrun.Job{ID: 1, Kind: "noop", Queue: "default"}
	h.OnClaim(runner.ClaimEvent{Queue: "default", Jobs: []*pgrun.Job{job}, RoundTrip: time.Millisecond})
	h.OnOutcome(runner.OutcomeEvent{Job: job, Outcome: runner.OutcomeRetried, Run: time.Millisecond})
	h.OnLeaseLost(job)
	h.OnMaintain(runner.MaintainEvent{Step: "prune_history", Elapsed: time.Millisecond, Rows: 3, Leader: true})
	for _, c := range metrics.Collectors(b.exp) {
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
}
