package tests

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
	"github.com/pgrun/pgrun/ui"
)

// The dashboard in a real browser: Debian's chromium, headless, driven over the
// DevTools protocol by chromedp. CI installs chromium (scripts/ensure-chromium.sh,
// called by .ci/run); elsewhere the tests skip when it is missing.

// chromiumPath returns the browser to drive, or skips (fails in CI) without one.
func chromiumPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PGRUN_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is missing at %s in CI: .ci/run installs it with scripts/ensure-chromium.sh", p)
		}
		t.Skipf("chromium is not installed at %s: scripts/ensure-chromium.sh installs it (apt-get install chromium)", p)
	}
	return p
}

// browser starts a fresh headless chromium for t (its own profile directory) and
// returns a tab's context, which ends with the test or after two minutes.
func browser(t testing.TB) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "pgrun-chromium-")
	require.NoError(t, err)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// This chromedp's protocol tables predate some of Debian's chromium events; it
	// logs each unknown one, which says nothing about the test.
	quiet := func(string, ...any) {}
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(quiet), chromedp.WithLogf(quiet))
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
		// The browser's helpers may still write the profile for a moment after it
		// exits; the directory is in /tmp, so a leftover does no harm.
		for i := 0; i < 20 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	})
	require.NoError(t, chromedp.Run(ctx), "start chromium")
	return ctx
}

// serveUI serves a dashboard on pool at a loopback address for the test.
func serveUI(t testing.TB, pool *pgxpool.Pool, opts ui.Options) string {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testkit.QuietLogger()
	}
	h, err := ui.New(pool, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL
}

// The overview lists every queue from the database with its counts and its paused
// flag.
func TestUIOverviewShowsQueues(t *testing.T) {
	b := testkit.Setup(t)
	for i := 0; i < 3; i++ {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", map[string]int{"n": i}, pgrun.Queue("images"))
		require.NoError(t, err)
	}
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "mail", nil, pgrun.Queue("emails"))
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.pause_queue('emails')`)
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	var images, emails string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`tr[data-queue="images"]`, chromedp.ByQuery),
		chromedp.Text(`tr[data-queue="images"]`, &images, chromedp.ByQuery),
		chromedp.Text(`tr[data-queue="emails"]`, &emails, chromedp.ByQuery),
	))
	cells := strings.Fields(images)
	require.Equal(t, "images", cells[0])
	require.Equal(t, "3", cells[1], "queued count of images in %q", images)
	require.Contains(t, emails, "paused")
	require.NotContains(t, images, "paused")
}

// A cancel clicked in the job's page, and confirmed in its dialog, cancels the
// running job: the database says cancelled, and the handler's context ends.
func TestUICancelRunningJobFromThePage(t *testing.T) {
	b := testkit.Setup(t)
	started := make(chan int64, 1)
	stopped := make(chan error, 1)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	runner.Handle(r, "ui-long", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		started <- j.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "ui-long", nil)
	require.NoError(t, err)
	select {
	case id := <-started:
		require.Equal(t, job.ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, job.ID))
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	var question, flash string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, job.ID)),
		chromedp.WaitVisible(`button[data-action="cancel"]`, chromedp.ByQuery),
		chromedp.Click(`button[data-action="cancel"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Text(`#confirm-text`, &question, chromedp.ByQuery),
	))
	require.Contains(t, question, fmt.Sprintf("Cancel job %d", job.ID))
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, job.ID), "nothing happens before the confirmation")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`.flash`, &flash, chromedp.ByQuery),
	))
	require.Contains(t, flash, fmt.Sprintf("Job %d cancelled", job.ID))
	testkit.Eventually(t, 10*time.Second, "the job to be cancelled in the database", func() bool {
		return testkit.JobStatus(t, b, job.ID) == pgrun.StatusCancelled
	})
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
}

// A workflow run's page draws its DAG: one node per workflow node, with its state.
func TestUIRunPageDrawsTheDAG(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "etl", map[string]any{"nodes": []map[string]any{
		{"name": "extract", "kind": "noop"},
		{"name": "clean", "kind": "noop", "deps": []string{"extract"}},
		{"name": "enrich", "kind": "noop", "deps": []string{"extract"}},
		{"name": "load", "kind": "noop", "deps": []string{"clean", "enrich"}},
	}})
	require.NoError(t, err)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "etl", map[string]any{}, "")
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	var nodes []map[string]string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/runs/%d", base, run.ID)),
		chromedp.WaitVisible(`svg.dag g.dag-node`, chromedp.ByQuery),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("svg.dag g.dag-node")).map(g => ({node: g.dataset.node, status: g.dataset.status}))`, &nodes),
	))
	got := map[string]string{}
	for _, n := range nodes {
		got[n["node"]] = n["status"]
	}
	require.Equal(t, map[string]string{"extract": "queued", "clean": "pending", "enrich": "pending", "load": "pending"}, got)
	var edges int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("svg.dag path.edge").length`, &edges)))
	require.Equal(t, 4, edges)

	// Live: a node that moves on redraws without a reload.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_run($1, 'from the test')`, run.ID)
	require.NoError(t, err)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`svg.dag g.dag-node[data-node="extract"][data-status="cancelled"]`, chromedp.ByQuery)))
	var names []string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("svg.dag g.dag-node")).map(g => g.dataset.node)`, &names)))
	slices.Sort(names)
	require.Equal(t, []string{"clean", "enrich", "extract", "load"}, names)
}
