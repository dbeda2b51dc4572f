package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
// Each sub-benchmark is one page; ns/op is the page's time.
func BenchmarkUIPages(b *testing.B) {
	dbURL := os.Getenv("PGRUN_UI_BENCH_URL")
	if dbURL == "" {
		b.Skip("set PGRUN_UI_BENCH_URL to a database filled by scripts/ui-bench.sh")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
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
	base := serveUI(b, pool, ui.Options{})
	for _, p := range []struct{ name, path string }{
		{"overview", "/"},
		{"jobs", "/jobs"},
		{"jobs_queue_queued", "/jobs?queue=images&state=queued"},
		{"jobs_last_hour", "/jobs?last=1h"},
		{"jobs_rare_queue_cancelled", "/jobs?queue=audit&state=cancelled"},
		{"jobs_args_key", "/jobs?arg=tenant_key"},
		{"jobs_error_text", "/jobs?error=upstream+7"},
		{"jobs_failed", "/jobs?state=failed"},
		{"jobs_older_page", "/jobs?before=2500000"},
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
		b.Run(p.name, func(b *testing.B) {
			fetch(b) // once untimed: statements prepared, the first pages read
			for b.Loop() {
				fetch(b)
			}
		})
	}
}
