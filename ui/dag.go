package ui

import (
	"fmt"
	"html"
	"html/template"
	"sort"
	"strings"
)

// The run page draws a workflow as a layered graph, left to right: a node's layer
// is the longest chain of dependencies before it, and nodes within a layer are
// ordered to keep edges short (a few sweeps of the barycentre heuristic). Plain
// SVG from the server, one <g class="dag-node"> per node linking to its job.

const (
	nodeW    = 168
	nodeH    = 52
	gapX     = 56
	gapY     = 18
	dagPad   = 12
	maxLabel = 22 // characters of a node's name shown; the whole name is its tooltip
)

// dagLayout places nodes: layer (column) and row of each, by index.
type dagLayout struct {
	layer, row []int
	layers     [][]int // node indexes per layer, in row order
}

// layoutDAG computes the layers and the order within them. Dependencies on names
// that are not nodes are ignored, and a cycle (which define_workflow refuses) does
// not loop: a node met again on its own path is treated as a root.
func layoutDAG(nodes []dagNode) dagLayout {
	idx := make(map[string]int, len(nodes))
	for i, n := range nodes {
		idx[n.Name] = i
	}
	deps := make([][]int, len(nodes))
	outs := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, d := range n.Deps {
			if j, ok := idx[d]; ok && j != i {
				deps[i] = append(deps[i], j)
				outs[j] = append(outs[j], i)
			}
		}
	}
	l := dagLayout{layer: make([]int, len(nodes)), row: make([]int, len(nodes))}
	state := make([]byte, len(nodes)) // 0 new, 1 on the path, 2 done
	var depth func(i int) int
	depth = func(i int) int {
		switch state[i] {
		case 2:
			return l.layer[i]
		case 1:
			return 0
		}
		state[i] = 1
		d := 0
		for _, j := range deps[i] {
			d = max(d, depth(j)+1)
		}
		state[i], l.layer[i] = 2, d
		return d
	}
	top := 0
	for i := range nodes {
		top = max(top, depth(i))
	}
	l.layers = make([][]int, top+1)
	for i := range nodes {
		l.layers[l.layer[i]] = append(l.layers[l.layer[i]], i)
	}
	l.number()
	// Barycentre sweeps: order each layer by the mean row of its neighbours in the
	// layer before (forward) or after (backward).
	for sweep := 0; sweep < 4; sweep++ {
		forward := sweep%2 == 0
		for k := range l.layers {
			if forward && k == 0 || !forward && k == len(l.layers)-1 {
				continue
			}
			li := k
			if !forward {
				li = len(l.layers) - 1 - k
			}
			nbr := deps
			if !forward {
				nbr = outs
			}
			bary := map[int]float64{}
			for _, i := range l.layers[li] {
				sum, n := 0.0, 0
				for _, j := range nbr[i] {
					sum += float64(l.row[j])
					n++
				}
				if n > 0 {
					bary[i] = sum / float64(n)
				} else {
					bary[i] = float64(l.row[i])
				}
			}
			sort.SliceStable(l.layers[li], func(a, b int) bool {
				return bary[l.layers[li][a]] < bary[l.layers[li][b]]
			})
			l.number()
		}
	}
	return l
}

// number sets row from the order of each layer.
func (l *dagLayout) number() {
	for _, layer := range l.layers {
		for r, i := range layer {
			l.row[i] = r
		}
	}
}

// dagSVG draws nodes (in spec order) as an SVG graph.
func dagSVG(nodes []dagNode) template.HTML {
	if len(nodes) == 0 {
		return ""
	}
	l := layoutDAG(nodes)
	rows := 0
	for _, layer := range l.layers {
		rows = max(rows, len(layer))
	}
	width := 2*dagPad + len(l.layers)*nodeW + (len(l.layers)-1)*gapX
	height := 2*dagPad + rows*nodeH + (rows-1)*gapY
	// Each layer is centred vertically.
	pos := func(i int) (x, y int) {
		n := len(l.layers[l.layer[i]])
		offset := (rows - n) * (nodeH + gapY) / 2
		return dagPad + l.layer[i]*(nodeW+gapX), dagPad + offset + l.row[i]*(nodeH+gapY)
	}
	idx := make(map[string]int, len(nodes))
	for i, n := range nodes {
		idx[n.Name] = i
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="workflow graph">`,
		width, height, width, height)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto">` +
		`<path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>`)
	for i, n := range nodes {
		for _, d := range n.Deps {
			j, ok := idx[d]
			if !ok || j == i {
				continue
			}
			x1, y1 := pos(j)
			x2, y2 := pos(i)
			sx, sy := float64(x1+nodeW), float64(y1+nodeH/2)
			ex, ey := float64(x2), float64(y2+nodeH/2)
			mid := (sx + ex) / 2
			fmt.Fprintf(&b, `<path class="edge st-%s" d="M%.0f,%.0f C%.0f,%.0f %.0f,%.0f %.0f,%.0f" marker-end="url(#arrow)"/>`,
				cssToken(nodes[j].Status), sx, sy, mid, sy, mid, ey, ex-1, ey)
		}
	}
	for i, n := range nodes {
		x, y := pos(i)
		sub := n.Status
		if n.Kind != "" {
			sub += " · " + n.Kind
		}
		if n.Input {
			sub += " · input"
		}
		if len(n.Children) > 0 {
			var done, all int64
			for st, c := range n.Children {
				all += c
				if st == "succeeded" || st == "skipped" {
					done += c
				}
			}
			sub = fmt.Sprintf("%s · map %d/%d", n.Status, done, all)
		}
		tip := n.Name + ": " + n.Status
		if n.Error != "" {
			tip += " — " + n.Error
		}
		open, closeTag := "<g>", "</g>"
		if n.JobID > 0 {
			open, closeTag = fmt.Sprintf(`<a href="/jobs/%d">`, n.JobID), "</a>"
		}
		b.WriteString(open)
		fmt.Fprintf(&b, `<g class="dag-node st-%s" data-node="%s" data-status="%s" transform="translate(%d,%d)"><title>%s</title>`,
			cssToken(n.Status), html.EscapeString(n.Name), cssToken(n.Status), x, y, html.EscapeString(tip))
		dash := ""
		if n.Optional {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<rect width="%d" height="%d" rx="7"%s/>`, nodeW, nodeH, dash)
		fmt.Fprintf(&b, `<text class="name" x="10" y="21">%s</text>`, html.EscapeString(clip(n.Name, maxLabel)))
		fmt.Fprintf(&b, `<text class="sub" x="10" y="38">%s</text>`, html.EscapeString(clip(sub, 28)))
		if n.Progress >= 0 && (n.Status == "running" || n.Status == "waiting") {
			fmt.Fprintf(&b, `<rect class="bar-bg" x="0" y="%d" width="%d" height="4"/><rect class="bar" x="0" y="%d" width="%d" height="4"/>`,
				nodeH-4, nodeW, nodeH-4, int(n.Progress)*nodeW/100)
		}
		b.WriteString("</g>" + closeTag)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// clip shortens s to n characters with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// cssToken keeps a status usable as a class name (statuses are engine enums; this
// is belt and braces).
func cssToken(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s)
}
