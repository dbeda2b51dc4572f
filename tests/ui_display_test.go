package tests

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// A job that failed once and then succeeded shows no error: its timeline's ending
// carries none (the failure is in its own job.failed entry), and its page has no
// error box, though the row keeps the old error (pgrun.outcome_error).
func TestASucceededJobShowsNoStaleError(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('noop', queue => 'stale')`)
	id, claim := durableClaim(t, b, "stale", "w")
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, 1, '{"message": "smtp 421 try later", "class": "error"}', true, 'w', '%s')`, id, claim),
		`update pgrun.jobs set run_at = now() where queue = 'stale'`)
	_, claim = durableClaim(t, b, "stale", "w")
	require.True(t, one[bool](t, b.Ctx, b.Pool, `select pgrun.complete_job($1, 2, '{"sent": true}', 'w', $2::uuid)`, id, claim))
	require.Contains(t, one[string](t, b.Ctx, b.Pool, `select error::text from pgrun.jobs where id = $1`, id), "421",
		"the row keeps the old error")

	tl := timelineOf(t, b.Pool, id)
	require.Contains(t, sketch(tl), "job.failed@1", "the failure is told as itself")
	end := tl[len(tl)-1]
	require.Equal(t, "job.succeeded", end.Event)
	require.Nil(t, end.Message, "the ending carries no stale error")
	require.JSONEq(t, `{}`, string(end.Fields))

	base := serveUI(t, b.Pool, ui.Options{})
	_, html := get(t, fmt.Sprintf("%s/jobs/%d", base, id))
	require.NotContains(t, html, "error-box", "no error box on a succeeded job")
	require.Contains(t, html, "smtp 421 try later", "the failure is still in the timeline")
}

// The runs list says why a run failed: the failing node and its error (a run keeps
// them as {"node", "job_id", "status", "error": {...}}).
func TestTheRunsListShowsWhyARunFailed(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "brittle", `{"nodes": [{"name": "only", "kind": "noop", "max_attempts": 1}]}`)
	testkit.ExecAll(t, b, `select pgrun.start_run('brittle')`)
	id, claim := durableClaim(t, b, "default", "w")
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, 1, '{"message": "disk full on node", "class": "error"}', false, 'w', '%s')`, id, claim))
	require.Equal(t, "failed", one[string](t, b.Ctx, b.Pool, `select status::text from pgrun.runs`))
	base := serveUI(t, b.Pool, ui.Options{})
	_, html := get(t, base+"/runs")
	require.True(t, strings.Contains(html, "node only: disk full on node"), "the runs list names the node and its error:\n%s", html)
}

// A runner killed after its jobs were taken back shows dead, not "running, silent":
// the workers page reads worker_status's liveness, flagged or not.
func TestTheWorkersPageShowsASilentRunnerDead(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.worker_heartbeat('gone', 'host-a', 1, array['default'], cadence => '1 second')`,
		`select pgrun.worker_heartbeat('here', 'host-b', 2, array['default'], cadence => '1 minute')`,
		`update pgrun.workers set last_seen = now() - interval '1 minute' where id = 'gone'`)
	require.Equal(t, "dead", one[string](t, b.Ctx, b.Pool, `select liveness from pgrun.worker_status where id = 'gone'`))
	require.Nil(t, testkit.NullID(t, b.Pool, `select extract(epoch from flagged_dead_at)::bigint from pgrun.workers where id = 'gone'`),
		"not flagged: it held no job")
	base := serveUI(t, b.Pool, ui.Options{})
	_, html := get(t, base+"/workers")
	require.Contains(t, html, "1 dead")
	require.NotContains(t, html, "silent</span>")
	_, js := get(t, base+"/workers?format=json")
	require.Contains(t, js, `"liveness": "dead"`)
	require.Contains(t, js, `"liveness": "live"`)
}

// The dead-letters page's retry is the exact-filter action: its form carries the
// page's error text, so a retry from a page filtered to "421" leaves the "550"
// failures failed.
func TestTheDeadLettersRetryKeepsTheErrorFilter(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('mail', queue => 'emails') from generate_series(1, 5)`)
	for i := 0; i < 5; i++ {
		id, claim := durableClaim(t, b, "emails", "w")
		msg := "smtp 421 try later"
		if i >= 3 {
			msg = "550 mailbox unavailable"
		}
		testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, 1, jsonb_build_object('message', '%s'), false, 'w', '%s')`, id, msg, claim))
	}
	base := serveUI(t, b.Pool, ui.Options{})
	_, page := get(t, base+"/dead?queue=emails&error=421")
	require.Contains(t, page, `action="/actions/retry-matching"`)
	require.Contains(t, page, `name="error" value="421"`)
	require.NotContains(t, page, "retry-failed", "no retry on queue and kind alone")
	form := url.Values{"csrf": {csrfFrom(t, page)}, "return": {"/dead"}, "queue": {"emails"}, "state": {"failed"}, "error": {"421"}}
	resp, body := post(t, base+"/actions/retry-matching", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	upto := regexp.MustCompile(`name="upto" value="(\d+)"`).FindStringSubmatch(body)
	require.NotNil(t, upto, body)
	form.Set("upto", upto[1])
	resp, _ = post(t, base+"/actions/retry-matching", withConfirmed(form, form.Get("csrf")))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, 3, countRows(t, b, `select count(*) from pgrun.jobs where status = 'queued'`), "the 421s")
	require.Equal(t, 2, countRows(t, b, `select count(*) from pgrun.jobs where status = 'failed' and error->>'message' like '550%'`),
		"the 550s stay failed")
}
