package ui

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// The charts are small inline SVGs drawn on the server: no script, no library, and
// they scale with the page (viewBox). Colours come from CSS classes (app.css).

const (
	chartW = 480
	chartH = 120
	padL   = 56 // room for the axis labels ("1,000/min")
	padB   = 16
)

// throughputChart draws jobs finished per minute as stacked bars (succeeded,
// failed, cancelled), the current minute paler.
func throughputChart(ms []minute) template.HTML {
	top := 1.0
	for _, m := range ms {
		top = max(top, m.Succeeded+m.Failed+m.Cancelled)
	}
	top = niceCeil(top)
	var b strings.Builder
	open(&b, "chart-throughput", "jobs finished per minute, last 16 minutes")
	axis(&b, fmt.Sprintf("%s/min", num(int64(top))), "0")
	plotW := float64(chartW - padL)
	bw := plotW / float64(len(ms))
	plotH := float64(chartH - padB)
	for i, m := range ms {
		x := float64(padL) + float64(i)*bw + 1
		y := plotH
		class := "bar"
		if m.Partial {
			class += " partial"
		}
		fmt.Fprintf(&b, `<g class="%s"><title>%s — %s succeeded, %s failed, %s cancelled%s</title>`, class,
			m.At.UTC().Format("15:04 UTC"), num(int64(math.Round(m.Succeeded))), num(int64(math.Round(m.Failed))),
			num(int64(math.Round(m.Cancelled))), estimatedNote(m))
		for _, part := range []struct {
			v     float64
			class string
		}{{m.Succeeded, "ok"}, {m.Failed, "bad"}, {m.Cancelled, "muted"}} {
			h := part.v / top * plotH
			if h <= 0 {
				continue
			}
			y -= h
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, part.class, x, y, bw-2, h)
		}
		b.WriteString(`</g>`)
	}
	timeLabels(&b, "−15 min", "now")
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func estimatedNote(m minute) string {
	switch {
	case m.Partial:
		return " (this minute so far)"
	case m.Estimated:
		return " (estimated)"
	}
	return ""
}

// failureChart draws the failure rate per minute, failed / (succeeded + failed), as
// a line; minutes without endings leave a gap.
func failureChart(ms []minute) template.HTML {
	top := 0.05
	for _, m := range ms {
		if d := m.Succeeded + m.Failed; d > 0 {
			top = max(top, m.Failed/d)
		}
	}
	top = math.Min(1, niceCeil(top*100)/100)
	var pts []point
	for i, m := range ms {
		if d := m.Succeeded + m.Failed; d > 0 {
			pts = append(pts, point{X: float64(i) / float64(len(ms)-1), Y: m.Failed / d / top})
		} else {
			pts = append(pts, point{X: float64(i) / float64(len(ms)-1), Y: math.NaN()})
		}
	}
	var b strings.Builder
	open(&b, "chart-failrate", "failure rate per minute, last 16 minutes")
	axis(&b, fmt.Sprintf("%.0f%%", top*100), "0%")
	polyline(&b, "line bad", pts)
	timeLabels(&b, "−15 min", "now")
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

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
