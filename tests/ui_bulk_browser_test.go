package tests

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Issue 34 in the browser: filtered to queue emails, kind echo, state failed and
// error text 421, the filter-wide retry asks with the count of every job the filter
// matches (more than a page holds), and once confirmed redrives exactly those, batch
// by batch, one request each, with its progress in the dialog: the
// permanent 550 failures, which the filter leaves out, stay failed. The header box
// ticks the page's jobs only, and the ticked-rows action names how many are ticked.
func TestUIBulkRetryLeavesThePermanentFailures(t *testing.T) {
	b := testkit.Setup(t)
	s := newBulkScenario(t, b, 2100, 60) // three batches of the page's script
	base := serveUI(t, testkit.AsRole(t, b, "pgrun_admin"), ui.Options{})
	list := base + "/jobs?queue=emails&kind=echo&state=failed&error=421"

	ctx := browser(t)
	var ticked, question, title string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(list),
		chromedp.WaitVisible(`button[data-action="retry-matching"]`, chromedp.ByQuery),
		chromedp.Click(`input[data-select-all]`, chromedp.ByQuery),
		chromedp.Text(`[data-ticked]`, &ticked, chromedp.ByQuery),
		chromedp.AttributeValue(`input[data-select-all]`, "title", &title, nil, chromedp.ByQuery),
		chromedp.Click(`button[formaction="/actions/retry-selected"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Text(`#confirm-text`, &question, chromedp.ByQuery),
	))
	require.Equal(t, "Ticked on this page: 50 of 50", ticked)
	require.Equal(t, "Tick the 50 jobs on this page", title)
	require.Equal(t, "Retry the 50 ticked jobs?", question, "the dialog counts the ticked boxes")

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#confirm button[value="keep"]`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Click(`input[data-select-all]`, chromedp.ByQuery),
		chromedp.Click(`button[data-action="retry-matching"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Text(`#confirm-text`, &question, chromedp.ByQuery),
	))
	require.Equal(t, `Retry the 2,100 jobs this filter matches (queue emails, kind echo, state failed, error text "421")?`, question)
	require.Equal(t, 2160, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`),
		"nothing happens before the confirmation")

	var flash string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`.flash`, &flash, chromedp.ByQuery),
	))
	require.Equal(t, `2,100 jobs matched (queue emails, kind echo, state failed, error text "421"): 2,100 queued again.`, flash)
	require.Equal(t, s.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'queued'`),
		"exactly the 421 failures are queued again")
	require.Equal(t, s.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`),
		"the 550 failures stay failed")
	var empty string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`table.jobs td.empty`, &empty, chromedp.ByQuery)))
	require.Equal(t, "No jobs match.", empty, "the page, reloaded, lists no 421 failure")
}
