package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/ui"
)

// BenchmarkUIPages times every dashboard page, rendered and read over HTTP, against
// the database PGRUN_UI_BENCH_URL names: one filled with 5 million jobs by
// scripts/ui-bench.sh (tests/testdata/ui_bench_fill.sql), which also runs this:
//
//	scripts/ui-bench.sh            # creates and fills pgrun_ui_bench once, then times
//
// Each sub-benchmark is one page; ns/op is the page's time on a new connection.
func BenchmarkUIPages(b *testing.B) {
	dbURL := os.Getenv("PGRUN_UI_BENCH_URL")
	if dbURL == "" {
		b.Skip("set PGRUN_UI_BENCH_URL to a database filled by scripts/ui-bench.sh")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(b, err)
	ui.TunePool(cfg) // as runner ui connects
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	defer pool.Close()
	var jobs int64
	require.NoError(b, pool.QueryRow(ctx, `select count(*) from (select 1 from pgrun.jobs limit 1000000) x`).Scan(&jobs))
	if jobs < 1000000 {
		b.Fatalf("%s holds %d jobs: fill it with scripts/ui-bench.sh first", dbURL, jobs)
	}
	var failed, run int64
	require.NoError(b, pool.QueryRow(ctx, `select (select max(id) from pgrun.jobs where status = 'failed'),
		(select max(id) from pgrun.runs)`).Scan(&failed, &run))
	var group, groupQueue, groupKind string
	require.NoError(b, pool.QueryRow(ctx, `select error_group, queue, kind from pgrun.error_groups('24 hours', 1)`).
		Scan(&group, &groupQueue, &groupKind))
	open := "/jobs?" + url.Values{"queue": {groupQueue}, "kind": {groupKind}, "state": {"failed"}, "error_group": {group}}.Encode()
	base := serveUI(b, pool, ui.Options{})
	for _, p := range []struct{ name, path string }{
		{"overview", "/"},
		{"overview_6h", "/?range=6h"},
		{"overview_24h", "/?range=24h"},
		{"overview_7d", "/?range=7d"},
		{"errors_1h", "/errors?range=1h"},
		{"errors_24h", "/errors?range=24h"},
		{"errors_7d", "/errors?range=7d"},
		{"errors_open_group", open},
		{"jobs", "/jobs"},
		{"jobs_queue_queued", "/jobs?queue=images&state=queued"},
		{"jobs_last_hour", "/jobs?last=1h"},
		{"jobs_rare_queue_cancelled", "/jobs?queue=audit&state=cancelled"},
		{"jobs_args_key", "/jobs?arg=tenant_key"},
		{"jobs_error_text", "/jobs?error=upstream+7"},
		{"jobs_failed", "/jobs?state=failed"},
		{"jobs_older_page", "/jobs?before=2500000"},
		{"jobs_running", "/jobs?state=running"},
		{"jobs_running_kind", "/jobs?state=running&kind=embed"},
		{"jobs_queued", "/jobs?state=queued"},
		{"jobs_queued_rare_kind", "/jobs?state=queued&kind=none-such"},
		{"jobs_of_run", fmt.Sprintf("/jobs?run=%d", run)},
		{"job", fmt.Sprintf("/jobs/%d", failed)},
		{"runs", "/runs"},
		{"run", fmt.Sprintf("/runs/%d", run)},
		{"workers", "/workers"},
		{"schedules", "/schedules"},
		{"dead", "/dead"},
	} {
		fetch := func(b *testing.B) {
			resp, err := http.Get(base + p.path)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %s", p.path, resp.Status)
			}
		}
		// Each request on a new connection, as the figure is: the pool's
		// connections are closed, untimed, before each, so the page pays for
		// connecting, planning its statements afresh and a cold catalog cache.
		b.Run(p.name, func(b *testing.B) {
			fetch(b) // once untimed: the first pages read into the server's cache
			for b.Loop() {
				b.StopTimer()
				pool.Reset()
				b.StartTimer()
				fetch(b)
			}
		})
	}
}
