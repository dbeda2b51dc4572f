package ui

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The time-range charts and sparklines drawn from made-up buckets: what needs no
// database (the pages themselves are tested in tests/ui_errors_test.go).

func TestChartRangesKeepChartsNarrow(t *testing.T) {
	for _, r := range chartRanges {
		n := int(r.Span / r.Bucket)
		require.LessOrEqual(t, n, 120, r.Name)
		require.Zero(t, r.Span%r.Bucket, r.Name)
	}
	r, err := pickRange("", errorRanges, "1h")
	require.NoError(t, err)
	require.Equal(t, time.Minute, r.Bucket)
	_, err = pickRange("6h", errorRanges, "1h")
	require.ErrorContains(t, err, `range "6h" is not offered here: use one of 1h, 24h, 7d`)
	r, err = pickRange("7d", rangeNames(), "1h")
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, r.Bucket)
	require.Equal(t, "604800 seconds", interval(r.Span))

	pages, err := parsePages()
	require.NoError(t, err)
	require.Contains(t, pages, "errors")
}

// The axis holds the buckets job_series returns: aligned on UTC as the SQL's
// date_bin aligns them on the epoch, from the one that holds now - span to the
// current, partial one.
func TestAxisEndsWithTheCurrentBucket(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 7, 30, 0, time.UTC)
	r, _ := pickRange("6h", rangeNames(), "")
	a := axisFor(r, now)
	require.Equal(t, time.Date(2026, 11, 27, 14, 10, 0, 0, time.UTC), a.to)
	require.Equal(t, time.Date(2026, 11, 27, 8, 5, 0, 0, time.UTC), a.from, "73 buckets")
	require.Equal(t, "−6 h", a.label())
	require.InDelta(t, float64(padL), a.x(a.from.Add(-time.Hour)), 0.01, "clamped to the plot")
	require.InDelta(t, float64(chartW), a.x(a.to), 0.01)
	r, _ = pickRange("7d", rangeNames(), "")
	a = axisFor(r, now)
	require.Equal(t, time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC), a.to)
	require.Equal(t, "−7 d", a.label())
}

func TestRangeChartsShowSampleSizes(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 7, 30, 0, time.UTC)
	r, _ := pickRange("1h", rangeNames(), "")
	a := axisFor(r, now)
	f := func(v float64) *float64 { return &v }
	bs := []bucket{
		{At: now.Truncate(time.Minute).Add(-3 * time.Minute), Succeeded: 1200, Failed: 30, Cancelled: 3,
			WaitN: 1230, WaitP50: f(0.2), WaitP95: f(1.5), RunN: 1230, RunP50: f(1.2), RunP95: f(4.1)},
		{At: now.Truncate(time.Minute).Add(-2 * time.Minute), Cancelled: 2}, // nothing ran: no percentiles
		{At: now.Truncate(time.Minute), Succeeded: 10, Failed: 10, WaitN: 20, WaitP50: f(0.1), WaitP95: f(0.3),
			RunN: 20, RunP50: f(0.5), RunP95: f(0.9), Partial: true},
	}
	tp := throughputRangeChart(a, bs)
	require.Equal(t, int64(1255), tp.N)
	svg := string(tp.SVG)
	require.Contains(t, svg, "<title>14:04–14:05 UTC: n = 1,233 finished: 1,200 succeeded, 30 failed, 3 cancelled</title>")
	require.Contains(t, svg, `class="bucket bar partial"`)
	require.Contains(t, svg, "14:07–14:08 UTC (so far): n = 20 finished")

	fr := failureRangeChart(a, bs)
	require.Equal(t, int64(1250), fr.N, "succeeded or failed")
	require.Contains(t, string(fr.SVG), "<title>14:07–14:08 UTC (so far): 50.0% failed, 10 of n = 20</title>")
	require.Contains(t, string(fr.SVG), "14:05–14:06 UTC: nothing succeeded or failed")

	run := latencyRangeChart(a, bs, "run")
	require.Equal(t, int64(1250), run.N)
	svg = string(run.SVG)
	require.Contains(t, svg, "<title>14:04–14:05 UTC: run p50 1.2s, p95 4.1s (n = 1,230)</title>")
	require.Contains(t, svg, "<title>14:05–14:06 UTC: no run times</title>")
	require.Contains(t, svg, `>5.0s</text>`, "the axis tops at a round value over the largest p95")
	// The gap: a bucket without times breaks the lines; two buckets apart, too.
	require.Equal(t, 4, strings.Count(svg, "<polyline"), "p50 and p95, each in two pieces")
	for _, c := range []chart{tp, fr, run, latencyRangeChart(a, nil, "wait")} {
		require.NotContains(t, string(c.SVG), "NaN")
		require.NotContains(t, string(c.SVG), "Inf")
	}
}

func TestSparklineCountsEachSlice(t *testing.T) {
	to := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	counts := make([]int64, 24)
	counts[0], counts[20], counts[23] = 1, 1570, 177
	svg := string(sparkline(counts, to.Add(-time.Hour), to))
	require.Equal(t, 24, strings.Count(svg, "<title>"))
	require.Contains(t, svg, "<title>13:50:00–13:52:30 UTC: 1,570</title>")
	require.Contains(t, svg, `aria-label="1,748 failures over the range, most 1,570 in a slice"`)
	heights := regexp.MustCompile(`class="bad" x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)"`).FindAllStringSubmatch(svg, -1)
	require.Len(t, heights, 24)
	require.Equal(t, "1.0", heights[0][1], "a single failure still shows")
	require.Equal(t, "20.0", heights[20][1])
	require.Equal(t, "0.0", heights[1][1])
	require.Equal(t, `<svg class="spark" viewBox="0 0 96 20" role="img" aria-label="0 failures over the range, most 0 in a slice"></svg>`,
		string(sparkline(nil, to.Add(-time.Hour), to)))
}
