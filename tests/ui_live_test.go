package tests

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Issue 34, "live refresh fights the reader", in the browser (ui/assets/static/
// live.js, keys.js, theme.js): pause, lists that do not move under the reader,
// focus kept across re-renders, finished jobs' pages that do not follow events,
// dark mode and the keyboard shortcuts.

// waitJS polls the page until expr is true, failing the test with what after within.
func waitJS(t *testing.T, ctx context.Context, within time.Duration, what, expr string) {
	t.Helper()
	testkit.Eventually(t, within, what, func() bool {
		var ok bool
		return chromedp.Run(ctx, chromedp.Evaluate(expr, &ok)) == nil && ok
	})
}

// evalJS evaluates expr in the page.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	var v T
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(expr, &v)), "evaluate %s", expr)
	return v
}

// enqueueN enqueues n jobs of kind noop in queue and returns their ids.
func enqueueN(t *testing.T, b *testkit.DB, queue string, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		j, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", map[string]int{"n": i}, pgrun.Queue(queue))
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	return ids
}

// press types keys as a person does: each a keyDown carrying its text, so that a
// page that handles the key (preventDefault) also keeps its character out of the
// field it may have focused. (chromedp.KeyEvent sends the character apart, after
// the keyDown, which a handled keyDown does not stop.)
func press(keys string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for _, r := range keys {
			for _, ev := range kb.Encode(r) {
				switch ev.Type {
				case input.KeyChar:
					continue
				case input.KeyDown:
					if ev.Key != "Enter" && ev.Key != "Escape" {
						ev.Text, ev.UnmodifiedText = string(r), string(r)
					}
				}
				if err := ev.Do(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// shownIDs is the jobs list's rows, top to bottom.
const shownIDs = `Array.from(document.querySelectorAll("table.jobs tr[data-job]")).map(tr => Number(tr.dataset.job))`

// Paused, the page does not re-render: it says so and counts the changes that come
// meanwhile; the choice outlives a reload (localStorage); space resumes, and the
// page then re-renders with what changed.
func TestUILivePauseHoldsThePageAndCountsChanges(t *testing.T) {
	b := testkit.Setup(t)
	enqueueN(t, b, "first", 1)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`tr[data-queue="first"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live-pause`, chromedp.ByQuery),
		press("p"),
	))
	waitJS(t, ctx, 5*time.Second, "the page to pause", `document.body.dataset.liveState === "paused"`)
	require.Equal(t, "Paused · no changes since", evalJS[string](t, ctx, `document.getElementById("live-status").textContent`))
	require.Equal(t, "Resume", evalJS[string](t, ctx, `document.getElementById("live-pause").textContent`))
	require.Equal(t, "1", evalJS[string](t, ctx, `localStorage.getItem("pgrun.live.paused")`))

	enqueueN(t, b, "second", 1)
	waitJS(t, ctx, 20*time.Second, "the paused page to count a change", `Number(document.body.dataset.missed) > 0`)
	require.Regexp(t, `^Paused · \d+ changes? since$`, evalJS[string](t, ctx, `document.getElementById("live-status").textContent`))
	require.False(t, evalJS[bool](t, ctx, `!!document.querySelector('tr[data-queue="second"]')`), "no re-render while paused")
	require.Empty(t, evalJS[string](t, ctx, `document.body.dataset.refreshed || ""`))

	// Reloaded, the page is still paused, and counts again from nothing.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Reload(),
		chromedp.WaitVisible(`tr[data-queue="second"]`, chromedp.ByQuery),
	))
	waitJS(t, ctx, 5*time.Second, "the reloaded page to be paused", `document.body.dataset.liveState === "paused"`)
	enqueueN(t, b, "third", 1)
	waitJS(t, ctx, 20*time.Second, "the paused page to count a change", `Number(document.body.dataset.missed) > 0`)
	require.False(t, evalJS[bool](t, ctx, `!!document.querySelector('tr[data-queue="third"]')`))

	require.NoError(t, chromedp.Run(ctx, press(" ")))
	waitJS(t, ctx, 10*time.Second, "resume to re-render the page", `!!document.querySelector('tr[data-queue="third"]')`)
	require.Equal(t, "on", evalJS[string](t, ctx, `document.body.dataset.liveState`))
	require.True(t, evalJS[bool](t, ctx, `document.getElementById("live-status").hidden`))
	require.Nil(t, evalJS[any](t, ctx, `localStorage.getItem("pgrun.live.paused")`))
}

// On the jobs list new rows do not push the shown ones down: a banner counts them,
// while a shown row's state changes in place; "." shows them.
func TestUILiveListHoldsNewRowsBehindABanner(t *testing.T) {
	b := testkit.Setup(t)
	old := enqueueN(t, b, "mail", 5)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/jobs?queue=mail"),
		chromedp.WaitVisible(`table.jobs tr[data-job]`, chromedp.ByQuery),
	))
	before := evalJS[[]int64](t, ctx, shownIDs)
	require.Equal(t, []int64{old[4], old[3], old[2], old[1], old[0]}, before)
	ticked := fmt.Sprintf(`tr[data-job="%d"] input[name="id"]`, old[4])
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(ticked, chromedp.ByQuery)))
	top := evalJS[float64](t, ctx, `document.querySelector("table.jobs tr[data-job]").getBoundingClientRect().top`)

	added := enqueueN(t, b, "mail", 3)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'from the test')`, old[2])
	require.NoError(t, err)
	waitJS(t, ctx, 20*time.Second, "the banner", `!document.getElementById("live-banner").hidden`)
	require.Equal(t, "3 new jobs — show", evalJS[string](t, ctx, `document.getElementById("live-show").textContent`))
	require.Equal(t, before, evalJS[[]int64](t, ctx, shownIDs), "the shown rows stay, in their order")
	require.Equal(t, top, evalJS[float64](t, ctx, `document.querySelector("table.jobs tr[data-job]").getBoundingClientRect().top`),
		"nothing moved the rows")
	waitJS(t, ctx, 20*time.Second, "the cancelled job's state to change in place",
		fmt.Sprintf(`document.querySelector('tr[data-job="%d"] .st').textContent === "cancelled"`, old[2]))

	require.NoError(t, chromedp.Run(ctx, press(".")))
	waitJS(t, ctx, 10*time.Second, "the new rows", fmt.Sprintf(`!!document.querySelector('tr[data-job="%d"]')`, added[2]))
	require.Equal(t, []int64{added[2], added[1], added[0], old[4], old[3], old[2], old[1], old[0]}, evalJS[[]int64](t, ctx, shownIDs))
	require.True(t, evalJS[bool](t, ctx, `document.getElementById("live-banner").hidden`))
	require.True(t, evalJS[bool](t, ctx, fmt.Sprintf(`document.querySelector(%q).checked`, ticked)), "the ticked box stays ticked")
	require.Equal(t, "Ticked on this page: 1 of 8", evalJS[string](t, ctx, `document.querySelector("[data-ticked]").textContent`))

	// More new jobs than a page holds: none of the shown rows is on the fresh page.
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('noop', '{}', queue => 'mail') from generate_series(1, 60)`)
	waitJS(t, ctx, 20*time.Second, "the banner", `!document.getElementById("live-banner").hidden`)
	require.Equal(t, "50+ new jobs — show", evalJS[string](t, ctx, `document.getElementById("live-show").textContent`))
	require.Equal(t, 8, evalJS[int](t, ctx, `document.querySelectorAll("table.jobs tr[data-job].live-gone").length`),
		"the shown rows, pushed off the fresh page, are dimmed")
}

// The runs list and the dead letters hold their new rows the same way, and a click
// on the banner shows them.
func TestUILiveRunsAndDeadLettersHoldNewRows(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "etl", `{"nodes": [{"name": "extract", "kind": "noop"}]}`)
	first, err := pgrun.StartRun(b.Ctx, b.Pool, "etl", map[string]any{}, "")
	require.NoError(t, err)
	failOne := func() {
		enqueueN(t, b, "dead", 1)
		testkit.ExecAll(t, b, `select pgrun.fail_job(c.id, c.attempt, '{"message": "boom"}', retryable => false)
			from pgrun.claim_jobs('dead', 'w-live', 1, '1 minute') c`)
	}
	failOne()
	base := serveUI(t, b.Pool, ui.Options{})
	ctx := browser(t)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/runs"),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-run="%d"]`, first.ID), chromedp.ByQuery),
	))
	second, err := pgrun.StartRun(b.Ctx, b.Pool, "etl", map[string]any{}, "")
	require.NoError(t, err)
	waitJS(t, ctx, 20*time.Second, "the runs banner", `!document.getElementById("live-banner").hidden`)
	require.Equal(t, "1 new run — show", evalJS[string](t, ctx, `document.getElementById("live-show").textContent`))
	require.Equal(t, 1, evalJS[int](t, ctx, `document.querySelectorAll("tr[data-run]").length`))
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#live-show`, chromedp.ByQuery)))
	waitJS(t, ctx, 10*time.Second, "the new run's row", fmt.Sprintf(`!!document.querySelector('tr[data-run="%d"]')`, second.ID))

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/dead"),
		chromedp.WaitVisible(`table.jobs tr[data-job]`, chromedp.ByQuery),
	))
	failOne()
	waitJS(t, ctx, 20*time.Second, "the dead letters banner", `!document.getElementById("live-banner").hidden`)
	require.Equal(t, "1 new job — show", evalJS[string](t, ctx, `document.getElementById("live-show").textContent`))
	require.Equal(t, 1, evalJS[int](t, ctx, `document.querySelectorAll("table.jobs tr[data-job]").length`))
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#live-show`, chromedp.ByQuery)))
	waitJS(t, ctx, 10*time.Second, "the new failed job's row", `document.querySelectorAll("table.jobs tr[data-job]").length === 2`)
}

// A re-render keeps the focus: the field being typed in is the same element after
// it, with its text, caret and selection, and a focused button in a row is focused
// again.
func TestUILiveKeepsFocusAcrossRerenders(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueN(t, b, "mail", 2)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/jobs?queue=mail"),
		chromedp.WaitVisible(`form.filters input[name="kind"]`, chromedp.ByQuery),
		chromedp.Click(`form.filters input[name="kind"]`, chromedp.ByQuery),
		chromedp.KeyEvent("echo-"),
		chromedp.Evaluate(`window.typedIn = document.activeElement; document.activeElement.setSelectionRange(1, 3, "forward"); true`, nil),
	))
	// A shown job changes state: the list re-renders in place (no new row).
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'from the test')`, ids[0])
	require.NoError(t, err)
	waitJS(t, ctx, 20*time.Second, "the re-render", fmt.Sprintf(`document.querySelector('tr[data-job="%d"] .st').textContent === "cancelled"`, ids[0]))
	got := evalJS[map[string]any](t, ctx, `(() => { const a = document.activeElement;
		return {same: a === window.typedIn, value: a.value, start: a.selectionStart, end: a.selectionEnd, refreshed: document.body.dataset.refreshed}; })()`)
	require.Equal(t, true, got["same"], "the field is the one typed in: %v", got)
	require.Equal(t, "echo-", got["value"])
	require.Equal(t, float64(1), got["start"])
	require.Equal(t, float64(3), got["end"])
	require.NotEmpty(t, got["refreshed"])
	// The typing goes on where the caret is.
	require.NoError(t, chromedp.Run(ctx, chromedp.KeyEvent("X")))
	require.Equal(t, "eXo-", evalJS[string](t, ctx, `document.activeElement.value`))

	// A button: the overview's pause of queue mail.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`tr[data-queue="mail"] button[data-action="pause-queue"]`, chromedp.ByQuery),
		chromedp.Focus(`tr[data-queue="mail"] button[data-action="pause-queue"]`, chromedp.ByQuery),
	))
	queued := evalJS[string](t, ctx, `document.querySelector('tr[data-queue="mail"] td.n').textContent.trim()`)
	require.Equal(t, "1", queued)
	enqueueN(t, b, "mail", 1)
	waitJS(t, ctx, 20*time.Second, "the overview to count the new job",
		`document.querySelector('tr[data-queue="mail"] td.n').textContent.trim() === "2"`)
	require.True(t, evalJS[bool](t, ctx, `(() => { const a = document.activeElement;
		return a.dataset.action === "pause-queue" && a.closest("tr").dataset.queue === "mail"; })()`), "the button keeps the focus")
}

// A finished job's page does not subscribe to live events (no /events request, no
// re-render while others are told of changes); a retry from the page reloads it,
// and the queued job's page is live again.
func TestUILiveFinishedJobPageDoesNotFollowEvents(t *testing.T) {
	b := testkit.Setup(t)
	id := enqueueN(t, b, "dead", 1)[0]
	testkit.ExecAll(t, b, `select pgrun.fail_job(c.id, c.attempt, '{"message": "boom"}', retryable => false)
		from pgrun.claim_jobs('dead', 'w-live', 1, '1 minute') c`)
	require.Equal(t, pgrun.StatusFailed, testkit.JobStatus(t, b, id))
	base := serveUI(t, testkit.AsRole(t, b, "pgrun_admin"), ui.Options{})

	ctx := browser(t)
	var streams atomic.Int32
	chromedp.ListenTarget(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && strings.Contains(e.Request.URL, "/events") {
			streams.Add(1)
		}
	})
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, id)),
		chromedp.WaitVisible(`button[data-action="retry"]`, chromedp.ByQuery),
	))
	waitJS(t, ctx, 5*time.Second, "the page's script", `document.body.dataset.liveState === "off"`)
	require.Equal(t, "not live", evalJS[string](t, ctx, `document.getElementById("live-dot").textContent`))
	require.True(t, evalJS[bool](t, ctx, `document.getElementById("live-pause").hidden`))

	// Others are told of a change; this page is not.
	_, pageHTML := get(t, base+"/")
	seq := regexp.MustCompile(`data-seq="(\d+)"`).FindStringSubmatch(pageHTML)
	require.NotNil(t, seq)
	stream, closeStream := openEvents(t, b, base, seq[1])
	defer closeStream()
	enqueueN(t, b, "other", 1)
	require.NotEmpty(t, nextChange(t, stream))
	require.Zero(t, streams.Load(), "the finished job's page opened no event stream")
	require.Empty(t, evalJS[string](t, ctx, `document.body.dataset.refreshed || ""`))

	var flash string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`button[data-action="retry"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`.flash`, &flash, chromedp.ByQuery),
	))
	require.Equal(t, fmt.Sprintf("Job %d queued again.", id), flash)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, id))
	waitJS(t, ctx, 5*time.Second, "the retried job's page to be live", `document.body.dataset.liveState === "on"`)
	testkit.Eventually(t, 5*time.Second, "its event stream", func() bool { return streams.Load() > 0 })
}

// Dark mode: with the system's preference dark and no choice made, the theme is
// dark before the page paints, and its text, links, badges and the charts' labels
// read at 4.5:1 or more; the header's choice (light, dark, system) is kept in
// localStorage and wins over the system's.
func TestUIDarkModeFollowsTheSystemAndTheChoice(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueN(t, b, "mail", 2)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'from the test')`, ids[0])
	require.NoError(t, err)
	testkit.DefineWorkflow(t, b, "etl", `{"nodes": [{"name": "extract", "kind": "noop"}, {"name": "load", "kind": "noop", "deps": ["extract"]}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "etl", map[string]any{}, "")
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	dark := func(on bool) chromedp.Action {
		v := "light"
		if on {
			v = "dark"
		}
		return emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}})
	}
	// The theme at the moment <body> is created, before anything is painted.
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`new MutationObserver(function (ms, o) {
			if (document.body) { window.themeAtBody = document.documentElement.dataset.theme || "none"; o.disconnect(); }
		}).observe(document, {childList: true, subtree: true});`).Do(ctx)
		return err
	})))
	require.NoError(t, chromedp.Run(ctx, dark(true),
		chromedp.Navigate(base+"/jobs?queue=mail"),
		chromedp.WaitVisible(`table.jobs tr[data-job]`, chromedp.ByQuery),
	))
	require.Equal(t, "dark", evalJS[string](t, ctx, `window.themeAtBody`), "dark before the first paint")
	require.Equal(t, "rgb(20, 23, 27)", evalJS[string](t, ctx, `getComputedStyle(document.body).backgroundColor`))
	require.Equal(t, "system", evalJS[string](t, ctx, `document.getElementById("theme-choice").value`))
	checkContrast(t, ctx, 4.5, `h1`, `table.list th`, `table.list td a`, `.st`, `.small`, `button`, `footer.foot`)

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`svg.chart`, chromedp.ByQuery)))
	checkContrast(t, ctx, 4.5, `svg.chart .tick`, `figcaption`, `.card .value`)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(fmt.Sprintf("%s/runs/%d", base, run.ID)),
		chromedp.WaitVisible(`svg.dag g.dag-node`, chromedp.ByQuery)))
	checkContrast(t, ctx, 4.5, `svg.dag .dag-node .name`, `svg.dag .dag-node .sub`)
	require.NotEqual(t, "rgb(255, 255, 255)", evalJS[string](t, ctx, `getComputedStyle(document.querySelector("svg.dag .dag-node rect")).fill`),
		"the DAG's nodes are not white boxes in the dark")

	// Light, chosen, wins over the system's dark, also on the next page.
	require.NoError(t, chromedp.Run(ctx, chromedp.SetValue(`#theme-choice`, "light", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("theme-choice").dispatchEvent(new Event("change")); true`, nil)))
	require.Equal(t, "light", evalJS[string](t, ctx, `document.documentElement.dataset.theme`))
	require.Equal(t, "light", evalJS[string](t, ctx, `localStorage.getItem("pgrun.theme")`))
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(`h1`, chromedp.ByQuery)))
	require.Equal(t, "light", evalJS[string](t, ctx, `window.themeAtBody`))
	require.Equal(t, "rgb(247, 247, 245)", evalJS[string](t, ctx, `getComputedStyle(document.body).backgroundColor`))

	// Dark, chosen, wins over a light system; system follows it again.
	require.NoError(t, chromedp.Run(ctx, dark(false), chromedp.SetValue(`#theme-choice`, "dark", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("theme-choice").dispatchEvent(new Event("change")); true`, nil)))
	require.Equal(t, "dark", evalJS[string](t, ctx, `document.documentElement.dataset.theme`))
	require.NoError(t, chromedp.Run(ctx, chromedp.SetValue(`#theme-choice`, "system", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("theme-choice").dispatchEvent(new Event("change")); true`, nil)))
	require.Equal(t, "light", evalJS[string](t, ctx, `document.documentElement.dataset.theme`))
	require.Nil(t, evalJS[any](t, ctx, `localStorage.getItem("pgrun.theme")`))
	require.NoError(t, chromedp.Run(ctx, dark(true)))
	waitJS(t, ctx, 5*time.Second, "system to follow the preference", `document.documentElement.dataset.theme === "dark"`)
}

// checkContrast asserts that the text of every element matching each selector
// reads at ratio or more against the background behind it (WCAG's contrast ratio;
// an SVG text's colour is its fill, on the nearest box or shape behind it).
func checkContrast(t *testing.T, ctx context.Context, ratio float64, selectors ...string) {
	t.Helper()
	for _, sel := range selectors {
		worst := evalJS[map[string]any](t, ctx, fmt.Sprintf(`(() => {
			const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
			const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
				return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
			const opaque = c => c.length >= 3 && (c.length < 4 || c[3] > 0.5);
			const behind = el => {
				for (let e = el; e; e = e.parentElement) {
					if (e instanceof SVGElement && e.parentElement) {
						// an SVG text lies on the first shape before it in its group, or on the box around the svg
						for (let s = e.previousElementSibling; s; s = s.previousElementSibling) {
							if (s.tagName === "rect") { const c = rgb(getComputedStyle(s).fill); if (opaque(c)) return c; }
						}
						continue;
					}
					const c = rgb(getComputedStyle(e).backgroundColor);
					if (opaque(c)) return c;
				}
				return [255, 255, 255];
			};
			let worst = {ratio: 99, text: "", fg: "", bg: ""};
			const els = document.querySelectorAll(%q);
			els.forEach(el => {
				const s = getComputedStyle(el);
				const fg = rgb(el instanceof SVGElement ? s.fill : s.color);
				const bg = behind(el);
				const a = lum(fg), b = lum(bg);
				const r = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
				if (r < worst.ratio) worst = {ratio: r, text: el.textContent.trim().slice(0, 40), fg: fg.join(","), bg: bg.join(",")};
			});
			worst.n = els.length;
			return worst;
		})()`, sel))
		require.NotZero(t, worst["n"], "no element matches %s", sel)
		require.GreaterOrEqual(t, worst["ratio"].(float64), ratio, "%s reads badly in the dark: %v", sel, worst)
	}
}

// Every colour of the stylesheet is a custom property of the two themes: a colour
// written into a rule would stay the same in the dark.
func TestUIStylesheetColoursAreThemeVariables(t *testing.T) {
	css, err := os.ReadFile("../ui/assets/static/app.css")
	require.NoError(t, err)
	colour := regexp.MustCompile(`#[0-9a-fA-F]{3,8}\b|rgba?\(|hsla?\(`)
	block := regexp.MustCompile(`(?s):root(\[data-theme="dark"\])? \{.*?\n\}`)
	rest := block.ReplaceAllString(string(css), "")
	for i, line := range strings.Split(rest, "\n") {
		require.False(t, colour.MatchString(line), "a colour outside the themes' custom properties (use var(--…)): line %d of the rest: %s", i+1, line)
	}
	require.Len(t, block.FindAllString(string(css), -1), 2, "the light and the dark set")
}

// The keyboard: / focuses the filter box (and keys then type), Escape leaves it,
// j and k move a highlighted row and Enter opens it, ? lists every shortcut, g j,
// g o and g e go to the jobs, the overview and the errors.
func TestUIKeyboardShortcuts(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueN(t, b, "mail", 3)
	base := serveUI(t, b.Pool, ui.Options{})

	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible(`table.jobs tr[data-job]`, chromedp.ByQuery),
		press("/"),
	))
	require.Equal(t, "queue", evalJS[string](t, ctx, `document.activeElement.name`), "/ focuses the filter box")
	require.NoError(t, chromedp.Run(ctx, chromedp.KeyEvent("jk")))
	require.Equal(t, "jk", evalJS[string](t, ctx, `document.activeElement.value`), "keys type in a field")
	require.False(t, evalJS[bool](t, ctx, `!!document.querySelector("tr.kb-current")`))
	require.NoError(t, chromedp.Run(ctx, chromedp.KeyEvent(kb.Escape)))
	require.Equal(t, "BODY", evalJS[string](t, ctx, `document.activeElement.tagName`), "Escape leaves the field")

	current := `Number((document.querySelector("tr.kb-current") || {dataset: {}}).dataset.job || 0)`
	require.NoError(t, chromedp.Run(ctx, press("j")))
	require.Equal(t, ids[2], evalJS[int64](t, ctx, current))
	require.NoError(t, chromedp.Run(ctx, press("jj")))
	require.Equal(t, ids[0], evalJS[int64](t, ctx, current))
	require.NoError(t, chromedp.Run(ctx, press("k")))
	require.Equal(t, ids[1], evalJS[int64](t, ctx, current))
	require.NoError(t, chromedp.Run(ctx, press(kb.Enter)))
	waitJS(t, ctx, 10*time.Second, "Enter to open the row", fmt.Sprintf(`location.pathname === "/jobs/%d"`, ids[1]))

	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`dl.fields`, chromedp.ByQuery), press("?")))
	waitJS(t, ctx, 5*time.Second, "the help dialog", `document.getElementById("help").open`)
	help := evalJS[string](t, ctx, `document.getElementById("help").textContent`)
	for _, want := range []string{"focus the filter box", "next or previous row", "open the highlighted row", "go to the overview",
		"go to the jobs", "go to the errors", "pause or resume live updates", "show the new rows", "this list"} {
		require.Contains(t, help, want)
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.KeyEvent(kb.Escape)))
	waitJS(t, ctx, 5*time.Second, "the help dialog to close", `!document.getElementById("help").open`)
	require.Contains(t, evalJS[string](t, ctx, `document.querySelector("footer.foot").textContent`), "? all keys")

	for _, hop := range []struct{ keys, path string }{{"gj", "/jobs"}, {"go", "/"}, {"ge", "/errors"}} {
		require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`footer.foot`, chromedp.ByQuery), press(hop.keys)))
		waitJS(t, ctx, 10*time.Second, hop.keys+" to go to "+hop.path, fmt.Sprintf(`location.pathname === %q`, hop.path))
	}
}
