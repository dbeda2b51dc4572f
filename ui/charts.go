package ui

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The charts are small inline SVGs drawn on the server: no script, no library, and
// they scale with the page (viewBox). Colours come from CSS classes (app.css).

const (
	chartW = 480
	chartH = 120
	padL   = 56 // room for the axis labels ("12,000", "2m30s")
	padB   = 16
)

// point is a chart point with X and Y in [0, 1] (Y NaN: no value, a gap).
type point struct{ X, Y float64 }

// series is one line of a lineChart.
type series struct {
	Name  string
	Class string
	At    []time.Time
	Val   []float64 // in [0, top]
}

// lineChart draws series over the window [from, to] with values in [0, top]
// (labelled topLabel), with a legend. Used for host telemetry.
func lineChart(title string, from, to time.Time, top float64, topLabel string, ss []series) template.HTML {
	var b strings.Builder
	open(&b, "chart-line", title)
	axis(&b, topLabel, "0")
	span := to.Sub(from).Seconds()
	for _, s := range ss {
		pts := make([]point, 0, len(s.At))
		for i, at := range s.At {
			x := at.Sub(from).Seconds() / span
			pts = append(pts, point{X: x, Y: math.Min(1, s.Val[i]/top)})
		}
		polyline(&b, "line "+s.Class, pts)
	}
	for i, s := range ss {
		x := padL + 6 + i*110
		fmt.Fprintf(&b, `<rect class="swatch %s" x="%d" y="4" width="10" height="4"/><text class="legend" x="%d" y="10">%s</text>`,
			s.Class, x, x+14, html.EscapeString(s.Name))
	}
	timeLabels(&b, fmt.Sprintf("−%.0f min", to.Sub(from).Minutes()), "now")
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func open(b *strings.Builder, class, title string) {
	fmt.Fprintf(b, `<svg class="chart %s" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		class, chartW, chartH+4, html.EscapeString(title), html.EscapeString(title))
}

// axis draws the frame and the top and bottom labels of the Y axis.
func axis(b *strings.Builder, top, bottom string) {
	plotH := chartH - padB
	fmt.Fprintf(b, `<line class="grid" x1="%d" y1="0.5" x2="%d" y2="0.5"/>`, padL, chartW)
	fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, plotH, chartW, plotH)
	fmt.Fprintf(b, `<text class="tick" x="%d" y="10" text-anchor="end">%s</text>`, padL-4, html.EscapeString(top))
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s</text>`, padL-4, plotH, html.EscapeString(bottom))
}

func timeLabels(b *strings.Builder, left, right string) {
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d">%s</text>`, padL, chartH+2, html.EscapeString(left))
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s</text>`, chartW, chartH+2, html.EscapeString(right))
}

// polyline draws pts as lines, broken where Y is NaN.
func polyline(b *strings.Builder, class string, pts []point) {
	plotW := float64(chartW - padL)
	plotH := float64(chartH - padB)
	var seg []string
	flush := func() {
		if len(seg) == 1 {
			seg = append(seg, seg[0]) // a lone point still shows (round caps)
		}
		if len(seg) > 0 {
			fmt.Fprintf(b, `<polyline class="%s" points="%s"/>`, class, strings.Join(seg, " "))
		}
		seg = seg[:0]
	}
	for _, p := range pts {
		if math.IsNaN(p.Y) || math.IsNaN(p.X) {
			flush()
			continue
		}
		seg = append(seg, fmt.Sprintf("%.1f,%.1f", float64(padL)+p.X*plotW, plotH-p.Y*plotH))
	}
	flush()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// The time-range charts (overview) and the sparklines (errors page) read the
// per-minute rollups (74_rollups.sql). Each bucket column carries a <title> with
// its time, its values and its sample size n, which the browser shows on hover;
// the legend of each chart (its figcaption) gives n over the whole range.

// chartRange is a time range a page offers, with the bucket that keeps its charts
// at or under about 120 columns: narrow enough to hover, wide enough to see.
type chartRange struct {
	Name   string        `json:"name"`   // as the query string spells it: "1h"
	Label  string        `json:"label"`  // "1 hour"
	Per    string        `json:"bucket"` // the bucket in words: "5 minutes"
	Span   time.Duration `json:"-"`
	Bucket time.Duration `json:"-"`
}

// chartRanges are the ranges of the charts: 60, 72, 96 and 84 buckets, and the one
// that holds the range's start.
var chartRanges = []chartRange{
	{"1h", "1 hour", "minute", time.Hour, time.Minute},
	{"6h", "6 hours", "5 minutes", 6 * time.Hour, 5 * time.Minute},
	{"24h", "24 hours", "15 minutes", 24 * time.Hour, 15 * time.Minute},
	{"7d", "7 days", "2 hours", 7 * 24 * time.Hour, 2 * time.Hour},
}

// pickRange returns the range named v among those named in allowed (v empty: def).
func pickRange(v string, allowed []string, def string) (chartRange, error) {
	if v == "" {
		v = def
	}
	if slices.Contains(allowed, v) {
		for _, r := range chartRanges {
			if r.Name == v {
				return r, nil
			}
		}
	}
	return chartRange{}, fmt.Errorf("range %q is not offered here: use one of %s", v, strings.Join(allowed, ", "))
}

// interval is d as a PostgreSQL interval literal ("3600 seconds").
func interval(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Second), 10) + " seconds"
}

// bucket is one column of the time-range charts: the jobs that finished in it, and
// the wait (due to started) and run (started to finished) percentiles in seconds
// with the number of jobs each covers (nil: none).
type bucket struct {
	At        time.Time `db:"at" json:"at"`
	Succeeded int64     `db:"succeeded" json:"succeeded"`
	Failed    int64     `db:"failed" json:"failed"`
	Cancelled int64     `db:"cancelled" json:"cancelled"`
	WaitN     int64     `db:"wait_n" json:"wait_n"`
	WaitP50   *float64  `db:"wait_p50" json:"wait_p50"`
	WaitP95   *float64  `db:"wait_p95" json:"wait_p95"`
	RunN      int64     `db:"run_n" json:"run_n"`
	RunP50    *float64  `db:"run_p50" json:"run_p50"`
	RunP95    *float64  `db:"run_p95" json:"run_p95"`
	Partial   bool      `db:"partial" json:"partial,omitempty"` // not over yet, or its live count was cut short
}

func (b bucket) finished() int64 { return b.Succeeded + b.Failed + b.Cancelled }

// chart is a drawn chart and its sample size over the range, for its legend.
type chart struct {
	SVG template.HTML `json:"-"`
	N   int64         `json:"n"`
}

// timeAxis places times on a chart: the window [from, to] spans the plot, and each
// bucket is a column of width step.
type timeAxis struct {
	from, to time.Time
	step     time.Duration
	per      string // the step in words
}

// axisFor is the axis of range r ending now, with the buckets pgrun.job_series
// returns: aligned on UTC (as date_bin aligns them on the epoch), from the one that
// holds now - r.Span to the current one, not over yet. So the window is one bucket
// wider than the range, and every bucket counted in a legend's n is drawn.
func axisFor(r chartRange, now time.Time) timeAxis {
	to := now.UTC().Truncate(r.Bucket).Add(r.Bucket)
	return timeAxis{from: now.UTC().Add(-r.Span).Truncate(r.Bucket), to: to, step: r.Bucket, per: r.Per}
}

// x is t's position on the plot, clamped to it.
func (a timeAxis) x(t time.Time) float64 {
	f := t.Sub(a.from).Seconds() / a.to.Sub(a.from).Seconds()
	return padL + math.Max(0, math.Min(1, f))*float64(chartW-padL)
}

// span names bucket b's time for a tooltip: "14:05–14:06 UTC", with the day for
// a range over a day.
func (a timeAxis) span(b bucket) string {
	layout := "15:04"
	if a.to.Sub(a.from) > 24*time.Hour {
		layout = "Mon 2 Jan 15:04"
	}
	s := b.At.UTC().Format(layout) + "–" + b.At.Add(a.step).UTC().Format("15:04") + " UTC"
	if b.Partial {
		s += " (so far)"
	}
	return s
}

// label is the left end of the time axis: "−6 h", "−7 d".
func (a timeAxis) label() string {
	d := a.to.Sub(a.from)
	if d >= 48*time.Hour {
		return fmt.Sprintf("−%d d", int(d.Hours()/24))
	}
	return fmt.Sprintf("−%d h", int(d.Hours()))
}

// column opens bucket b's group: its tooltip, and a transparent target the height
// of the plot, so that hovering anywhere over the column shows it.
func (a timeAxis) column(sb *strings.Builder, class string, b bucket, title string) (x, w float64) {
	x0, x1 := a.x(b.At), a.x(b.At.Add(a.step))
	if b.Partial {
		class += " partial"
	}
	fmt.Fprintf(sb, `<g class="%s" data-at="%s"><title>%s</title><rect class="hit" x="%.1f" y="0" width="%.1f" height="%d"/>`,
		class, b.At.UTC().Format(time.RFC3339), html.EscapeString(title), x0, math.Max(x1-x0, 0.5), chartH-padB)
	return x0, x1 - x0
}

// throughputRangeChart draws the jobs finished per bucket as stacked bars
// (succeeded, failed, cancelled); its n is every job that finished in the range.
func throughputRangeChart(a timeAxis, bs []bucket) chart {
	var c chart
	top := 1.0
	for _, b := range bs {
		top = max(top, float64(b.finished()))
		c.N += b.finished()
	}
	top = niceCeil(top)
	plotH := float64(chartH - padB)
	var sb strings.Builder
	open(&sb, "chart-throughput", "jobs finished per "+a.per)
	axis(&sb, num(int64(top)), "0")
	for _, b := range bs {
		x, w := a.column(&sb, "bucket bar", b, fmt.Sprintf("%s: n = %s finished: %s succeeded, %s failed, %s cancelled",
			a.span(b), num(b.finished()), num(b.Succeeded), num(b.Failed), num(b.Cancelled)))
		y := plotH
		for _, part := range []struct {
			v     int64
			class string
		}{{b.Succeeded, "ok"}, {b.Failed, "bad"}, {b.Cancelled, "muted"}} {
			h := float64(part.v) / top * plotH
			if h <= 0 {
				continue
			}
			y -= h
			fmt.Fprintf(&sb, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, part.class, x+0.5, y, math.Max(w-1, 0.5), h)
		}
		sb.WriteString(`</g>`)
	}
	timeLabels(&sb, a.label(), "now")
	sb.WriteString(`</svg>`)
	c.SVG = template.HTML(sb.String())
	return c
}

// failureRangeChart draws the failure rate per bucket, failed / (succeeded +
// failed), as a line with a gap where nothing ended; its n is every job that
// succeeded or failed in the range.
func failureRangeChart(a timeAxis, bs []bucket) chart {
	var c chart
	top := 0.05
	for _, b := range bs {
		if d := b.Succeeded + b.Failed; d > 0 {
			top = max(top, float64(b.Failed)/float64(d))
			c.N += d
		}
	}
	top = math.Min(1, niceCeil(top*100)/100)
	var sb strings.Builder
	open(&sb, "chart-failrate", "failure rate per "+a.per)
	axis(&sb, fmt.Sprintf("%.0f%%", top*100), "0%")
	var pts []float64
	for _, b := range bs {
		d := b.Succeeded + b.Failed
		title := fmt.Sprintf("%s: nothing succeeded or failed", a.span(b))
		if d > 0 {
			title = fmt.Sprintf("%s: %s failed, %s of n = %s", a.span(b), pct(float64(b.Failed), float64(d)), num(b.Failed), num(d))
		}
		a.column(&sb, "bucket", b, title)
		sb.WriteString(`</g>`)
		pts = append(pts, math.NaN())
		if d > 0 {
			pts[len(pts)-1] = float64(b.Failed) / float64(d) / top
		}
	}
	a.line(&sb, "line bad", bs, pts)
	timeLabels(&sb, a.label(), "now")
	sb.WriteString(`</svg>`)
	c.SVG = template.HTML(sb.String())
	return c
}

// latencyRangeChart draws the p50 and p95 of the wait or the run time ("wait",
// "run") per bucket; its n is every job the percentiles cover over the range.
func latencyRangeChart(a timeAxis, bs []bucket, what string) chart {
	var c chart
	pick := func(b bucket) (n int64, p50, p95 *float64) {
		if what == "wait" {
			return b.WaitN, b.WaitP50, b.WaitP95
		}
		return b.RunN, b.RunP50, b.RunP95
	}
	top := 0.0
	for _, b := range bs {
		n, p50, p95 := pick(b)
		c.N += n
		for _, p := range []*float64{p50, p95} {
			if p != nil {
				top = max(top, *p)
			}
		}
	}
	if top <= 0 {
		top = 1
	}
	top = niceCeil(top)
	var sb strings.Builder
	open(&sb, "chart-"+what, what+" time p50 and p95 per "+a.per)
	axis(&sb, secs(&top), "0")
	lo, hi := make([]float64, len(bs)), make([]float64, len(bs))
	for i, b := range bs {
		n, p50, p95 := pick(b)
		title := fmt.Sprintf("%s: no %s times", a.span(b), what)
		lo[i], hi[i] = math.NaN(), math.NaN()
		if n > 0 && p50 != nil && p95 != nil {
			title = fmt.Sprintf("%s: %s p50 %s, p95 %s (n = %s)", a.span(b), what, secs(p50), secs(p95), num(n))
			lo[i], hi[i] = *p50/top, *p95/top
		}
		a.column(&sb, "bucket", b, title)
		sb.WriteString(`</g>`)
	}
	a.line(&sb, "line p95", bs, hi)
	a.line(&sb, "line p50", bs, lo)
	timeLabels(&sb, a.label(), "now")
	sb.WriteString(`</svg>`)
	c.SVG = template.HTML(sb.String())
	return c
}

// line draws ys (in [0, 1], NaN: none) at the middle of their buckets, broken at
// a missing value and between buckets that are not next to each other.
func (a timeAxis) line(sb *strings.Builder, class string, bs []bucket, ys []float64) {
	plotW := float64(chartW - padL)
	var pts []point
	for i, b := range bs {
		if i > 0 && b.At.Sub(bs[i-1].At) > a.step+a.step/2 {
			pts = append(pts, point{X: math.NaN(), Y: math.NaN()})
		}
		mid := (a.x(b.At) + a.x(b.At.Add(a.step))) / 2
		pts = append(pts, point{X: (mid - padL) / plotW, Y: math.Min(1, ys[i])})
	}
	polyline(sb, class, pts)
}

// sparkline draws counts (equal slices of [from, to]) as small bars, each with its
// count on hover: the errors page's burst shape of one group.
func sparkline(counts []int64, from, to time.Time) template.HTML {
	const w, h = 96, 20
	var top, total int64
	for _, n := range counts {
		top = max(top, n)
		total += n
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="spark" viewBox="0 0 %d %d" role="img" aria-label="%s failures over the range, most %s in a slice">`,
		w, h, num(total), num(top))
	top = max(top, 1)
	if len(counts) == 0 {
		return template.HTML(sb.String() + `</svg>`)
	}
	slice := to.Sub(from) / time.Duration(len(counts))
	bw := float64(w) / float64(len(counts))
	layout, end := "15:04", "15:04"
	if slice%time.Minute != 0 {
		layout, end = "15:04:05", "15:04:05" // 2.5-minute slices of an hour
	}
	if to.Sub(from) > 24*time.Hour {
		layout = "Mon " + layout
	}
	for i, n := range counts {
		at := from.Add(time.Duration(i) * slice).UTC()
		bh := float64(n) / float64(top) * h
		if n > 0 {
			bh = math.Max(bh, 1) // one failure still shows
		}
		fmt.Fprintf(&sb, `<g><title>%s–%s UTC: %s</title><rect class="hit" x="%.1f" y="0" width="%.1f" height="%d"/>`+
			`<rect class="bad" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></g>`,
			at.Format(layout), at.Add(slice).Format(end), num(n), float64(i)*bw, bw, h,
			float64(i)*bw+0.5, h-bh, math.Max(bw-1, 0.5), bh)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}
