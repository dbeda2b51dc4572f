package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// uiScreenshotSeed fills a test database with what a dashboard of a working system
// shows: 16 minutes of endings, a backlog, jobs running with progress, failures with
// stacks, a workflow run part way through, workers with warm models, host telemetry,
// schedules, a worker switch and a poisoned outbox row. It runs as the schema owner,
// which may set engine-owned columns.
const uiScreenshotSeed = `
do $$
declare
  v bigint;
  n int;
  k text;
  q text;
  t timestamptz;
begin
  for m in 0..15 loop
    n := 30 + (m * 37) % 45;
    for g in 1..n loop
      q := (array['images', 'emails', 'reports'])[1 + g % 3];
      k := case q when 'images' then 'resize' when 'emails' then 'send_email' else 'report' end;
      select id into v from pgrun.enqueue_job(k, jsonb_build_object('user_id', 1000 + g, 'n', g), queue => q);
      t := now() - (16 - m) * interval '1 minute' + g * (interval '58 seconds' / n);
      update pgrun.jobs set attempt = 1, started_at = t, claimed_by = 'host-1/w' || (g % 4),
        created_at = t - (g % 7) * interval '90 milliseconds', run_at = t - (g % 7) * interval '90 milliseconds',
        status = case when (g + m) % 17 = 0 then 'failed' else 'succeeded' end::pgrun.job_status,
        finished_at = t + (120 + (g * 53) % 1400) * interval '1 millisecond',
        result = case when (g + m) % 17 <> 0 then '{"ok": true}'::jsonb end,
        failures = case when (g + m) % 17 = 0 then 1 else 0 end,
        error = case when (g + m) % 17 = 0 then jsonb_build_object('class', 'permanent',
          'message', 'smtp: 550 mailbox unavailable for user ' || (1000 + g),
          'stack', E'goroutine 41 [running]:\nexample.com/mail.(*Sender).Send(...)\n\t/src/mail/send.go:88 +0x1c4\nexample.com/mail.handle()\n\t/src/mail/handler.go:31 +0x9a') end
      where id = v;
    end loop;
  end loop;
end;
$$;
select pgrun.enqueue_job('resize', jsonb_build_object('image', 'img-' || g || '.png'), queue => 'images') from generate_series(1, 240) g;
select pgrun.enqueue_job('embed', jsonb_build_object('doc', g), queue => 'gpu', model => 'bge-small') from generate_series(1, 60) g;
select pgrun.enqueue_job('report', '{"kind": "weekly"}', queue => 'reports', run_at => now() + interval '2 hours') from generate_series(1, 12);
select pgrun.worker_heartbeat('host-1/w' || w, 'host-1', 4100 + w, array['images', 'emails', 'reports']) from generate_series(0, 3) w;
select pgrun.worker_heartbeat('gpu-1/w0', 'gpu-1', 7311, array['gpu'], array['bge-small', 'clip-vit-b32'], servable => array['bge-small']);
select pgrun.set_progress(j.id, 40 + j.id % 50, 100) from pgrun.claim_jobs('gpu', 'gpu-1/w0', 2, interval '5 minutes') j;
select pgrun.set_progress(j.id, 10 + j.id % 80, 100)
from generate_series(0, 3) w, lateral pgrun.claim_jobs('images', 'host-1/w' || w, 1, interval '5 minutes') j;
insert into pgrun.hw_metrics (host, at, cpu_pct, mem_used, mem_total, gpus)
select h, now() - s * interval '10 seconds',
       case h when 'host-1' then 35 + 25 * sin(s / 9.0) + (s * 7) % 9 else 70 + 15 * sin(s / 14.0) end,
       ((case h when 'host-1' then 9 else 21 end) + sin(s / 20.0) * 2)::numeric * (1 << 30), 32::bigint << 30,
       case h when 'gpu-1' then jsonb_build_array(jsonb_build_object('index', 0, 'name', 'NVIDIA L4',
         'memory_total', 24::bigint << 30, 'memory_used', ((11 + 3 * sin(s / 11.0)) * (1 << 30))::bigint,
         'utilization', round(60 + 30 * sin(s / 6.0)))) else '[]' end
from unnest(array['host-1', 'gpu-1']) h, generate_series(0, 179) s;
select pgrun.set_schedule('nightly-report', '0 2 * * *', 'report', '{"kind": "daily"}', queue => 'reports', timezone => 'Europe/Berlin');
select pgrun.set_schedule('heartbeat', '@every 30s', 'noop');
select pgrun.set_schedule('weekly-digest', '0 8 * * mon', 'send_email', '{"digest": true}', queue => 'emails');
select pgrun.pause_schedule('weekly-digest');
select pgrun.set_worker_control('host-1', 'reports', 'drain');
select pgrun.define_workflow('ingest', '{"nodes": [
  {"name": "fetch", "kind": "fetch"},
  {"name": "parse", "kind": "parse", "deps": ["fetch"]},
  {"name": "thumbnails", "kind": "thumbnail", "deps": ["fetch"], "queue": "images"},
  {"name": "embed", "kind": "embed_doc", "deps": ["parse"], "queue": "gpu"},
  {"name": "approve", "input": true, "deps": ["parse"]},
  {"name": "index", "kind": "index", "deps": ["embed", "approve"]},
  {"name": "notify", "kind": "send_email", "deps": ["index", "thumbnails"], "optional": true}]}');
select pgrun.start_run('ingest', jsonb_build_object('url', 'https://example.com/batch/' || g)) from generate_series(1, 3) g;
-- An incident for the errors page: the mail server refuses with 421 for a while (a
-- burst in the last ten minutes, each message with its own session id), and a few
-- mailboxes are gone for good (550).
do $$
declare
  v bigint;
  t timestamptz;
begin
  for g in 1..160 loop
    select id into v from pgrun.enqueue_job('send_email', jsonb_build_object('to', 'user' || g || '@example.com'), queue => 'emails');
    t := now() - interval '10 minutes' + g * interval '3.5 seconds';
    update pgrun.jobs set attempt = 3, failures = 3, max_attempts = 3, claimed_by = 'host-1/w' || (g % 4),
      created_at = t - interval '2 minutes', run_at = t - interval '1 second', started_at = t,
      finished_at = t + (200 + g % 300) * interval '1 millisecond', status = 'failed',
      error = jsonb_build_object('class', 'transient', 'message',
        case when g % 9 = 0 then format('550 5.1.1 <user%s@example.com>: mailbox unavailable', g)
             else format('smtp 421 4.7.0 [10.0.3.%s] try again later (session %s)', g % 250, left(md5(g::text), 12)) end)
    where id = v;
  end loop;
end;
$$;
`

// uiScreenshotAdvance moves run 3 along: fetch and parse done, embed running, the
// thumbnails failed.
const uiScreenshotAdvance = `
select pgrun.complete_job(j.id, j.attempt, '{"docs": 12}') from pgrun.claim_jobs('default', 'host-1/w0', 10, kinds => array['fetch']) j where j.run_id = 3;
select pgrun.complete_job(j.id, j.attempt, '{"pages": 12}') from pgrun.claim_jobs('default', 'host-1/w0', 10, kinds => array['parse']) j where j.run_id = 3;
select pgrun.set_progress(j.id, 7, 12) from pgrun.claim_jobs('gpu', 'gpu-1/w0', 10, kinds => array['embed_doc']) j where j.run_id = 3;
select pgrun.fail_job(j.id, j.attempt, '{"class": "permanent", "message": "image too large: 61 MB"}', false)
from pgrun.claim_jobs('images', 'host-1/w1', 10, kinds => array['thumbnail']) j where j.run_id = 3;
insert into pgrun.outbox (job_id, event, attempts, last_error, poisoned_at)
select max(id), 'finished', 10, 'fan-in of parent failed: could not obtain lock on row in relation "jobs"', now() - interval '4 minutes'
from pgrun.jobs where status = 'succeeded';
`

// uiScreenshotFlow gives queue billing flow control in use for the queue page's
// screenshot: fairness across accounts, two running and five starts a minute per
// account, accounts at their limit, and two sequences of invoices, one stopped by a
// failed head. The screenshot test applies it after the other pages' shots, so that
// they stay as they were.
const uiScreenshotFlow = `
select pgrun.set_queue('billing', fair_by => 'concurrency_key', concurrency_limit => 2, key_rate_limit => 5,
                       key_rate_period => '1 minute', max_running => 20);
select pgrun.worker_heartbeat('host-2/w' || w, 'host-2', 5200 + w, array['billing']) from generate_series(0, 1) w;
select pgrun.enqueue_job('charge', jsonb_build_object('account', a, 'n', g), queue => 'billing',
                         concurrency_key => 'acct-' || a)
from generate_series(1, 6) a, generate_series(1, 2 + (a * 5) % 7) g;
select count(*) from pgrun.claim_jobs('billing', 'host-2/w0', 8, interval '5 minutes');
`

// uiScreenshotSequences are the invoices of uiScreenshotFlow, one enqueue a
// statement (each is admitted behind the one before), then the first head's failure.
var uiScreenshotSequences = []string{
	`select pgrun.enqueue_job('send_invoice', '{"invoice": 2041}', queue => 'billing', sequence_key => 'customer:2041', max_attempts => 1)`,
	`select pgrun.enqueue_job('send_invoice', '{"invoice": 2041}', queue => 'billing', sequence_key => 'customer:2041', max_attempts => 1)`,
	`select pgrun.enqueue_job('send_invoice', '{"invoice": 2041}', queue => 'billing', sequence_key => 'customer:2041', max_attempts => 1)`,
	`select pgrun.enqueue_job('send_invoice', '{"invoice": 3310}', queue => 'billing', sequence_key => 'customer:3310')`,
	`select pgrun.enqueue_job('send_invoice', '{"invoice": 3310}', queue => 'billing', sequence_key => 'customer:3310')`,
	`select pgrun.fail_job(j.id, j.attempt, '{"class": "permanent", "message": "card declined"}', false)
	 from pgrun.claim_jobs('billing', 'host-2/w1', 5, interval '5 minutes', kinds => array['send_invoice']) j
	 where j.args ->> 'invoice' = '2041'`,
}

// TestUIScreenshots writes a screenshot of every page to the directory named by
// PGRUN_UI_SCREENSHOTS (docs/ui/ for the documentation):
//
//	PGRUN_UI_SCREENSHOTS=$PWD/docs/ui go test -run TestUIScreenshots ./tests/
func TestUIScreenshots(t *testing.T) {
	dir := os.Getenv("PGRUN_UI_SCREENSHOTS")
	if dir == "" {
		t.Skip("set PGRUN_UI_SCREENSHOTS to a directory to write the dashboard's screenshots there")
	}
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, uiScreenshotSeed)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, uiScreenshotAdvance)
	require.NoError(t, err)
	// One image job has been running for three hours: first in the running list.
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set started_at = now() - interval '3 hours 12 minutes'
		where id = (select min(id) from pgrun.jobs where status = 'running' and queue = 'images')`)
	require.NoError(t, err)
	var failed, running int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(id) filter (where status = 'failed' and run_id is null),
		max(id) filter (where status = 'running' and queue = 'gpu' and progress_total is not null) from pgrun.jobs`).Scan(&failed, &running))
	base := serveUI(t, b.Pool, ui.Options{})
	require.NoError(t, os.MkdirAll(dir, 0o755))

	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(1280, 860)))
	// The long lists (jobs, dead letters) are shot as one screen; the rest whole.
	for _, p := range []struct{ name, path, ready string }{
		{"overview", "/", `tr[data-queue="images"]`},
		{"jobs", "/jobs", `tr[data-job]`},
		{"job-failed", fmt.Sprintf("/jobs/%d", failed), `.error-box`},
		{"job-running", fmt.Sprintf("/jobs/%d", running), `.progress-line`},
		{"runs", "/runs", `tr[data-run]`},
		{"run", "/runs/3", `svg.dag g.dag-node`},
		{"workers", "/workers", `section.host svg.chart`},
		{"schedules", "/schedules", `tr[data-schedule]`},
		{"dead", "/dead", `tr[data-job]`},
		{"errors", "/errors?range=1h", `tr[data-group]`},
		{"jobs-running", "/jobs?state=running", `tr[data-job]`},
		{"overview-24h", "/?range=24h", `tr[data-queue="images"]`},
	} {
		var png []byte
		shot := chromedp.FullScreenshot(&png, 100)
		if p.name == "jobs" || p.name == "dead" {
			shot = chromedp.CaptureScreenshot(&png)
		}
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(base+p.path),
			chromedp.WaitVisible(p.ready, chromedp.ByQuery),
			shot,
		), p.name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, p.name+".png"), png, 0o644))
		t.Logf("%s: %s (%d bytes)", p.name, p.path, len(png))
	}

	// Dark mode (the theme choice theme.js keeps) and the keyboard help.
	var png []byte
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Evaluate(`localStorage.setItem("pgrun.theme", "dark")`, nil),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`html[data-theme="dark"] tr[data-queue="images"]`, chromedp.ByQuery),
		chromedp.FullScreenshot(&png, 100),
	))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "overview-dark.png"), png, 0o644))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible(`tr[data-job]`, chromedp.ByQuery),
		chromedp.KeyEvent("?"),
		chromedp.WaitVisible(`#help`, chromedp.ByQuery),
		chromedp.CaptureScreenshot(&png),
		chromedp.Evaluate(`localStorage.removeItem("pgrun.theme")`, nil),
	))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keyboard-help.png"), png, 0o644))

	// The queue page, with flow control in use (after the rest, which it would change).
	testkit.ExecAll(t, b, uiScreenshotFlow)
	testkit.ExecAll(t, b, uiScreenshotSequences...)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/queues/billing"),
		chromedp.WaitVisible(`tr[data-key]`, chromedp.ByQuery),
		chromedp.FullScreenshot(&png, 100),
	))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "queue.png"), png, 0o644))
}
