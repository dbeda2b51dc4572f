package ui

import (
	"fmt"
	"html"
	"html/template"
	"slices"
	"sort"
	"strings"
)

// The run page draws a workflow as a layered graph, left to right: a node's layer
// is the longest chain of dependencies before it, and nodes within a layer are
// ordered to keep edges short (a few sweeps of the barycentre heuristic). An edge
// that skips layers goes through a slot of its own in each layer it crosses (a
// dummy point, as in Sugiyama's method), ordered with the nodes, so that it runs
// between them and never behind one: within a layer's column it is a straight line
// through its slot, and between columns a curve that stays in the gap. Plain SVG
// from the server, one <g class="dag-node"> per node linking to its job.

const (
	nodeW    = 168
	nodeH    = 52
	gapX     = 56
	gapY     = 18
	dummyH   = 6 // the height of an edge's slot in a layer it crosses
	dagPad   = 12
	maxLabel = 22 // characters of a node's name shown; the whole name is its tooltip
)

// dagEdge is an edge from node from to node to (indexes of the nodes), through the
// dummy vertices via, one per layer between them, in layer order.
type dagEdge struct {
	from, to int
	via      []int
}

// dagLayout places the vertices, the nodes (indexes 0 to len(nodes)-1) and the
// dummies after them: layer (column) and row of each, the vertices of each layer in
// row order, and the edges.
type dagLayout struct {
	nodes      int
	layer, row []int
	layers     [][]int
	edges      []dagEdge
}

// layoutDAG computes the layers, the edges' dummies and the order within layers.
// Dependencies on names that are not nodes are ignored (a name listed twice counts
// once), and a cycle (which define_workflow refuses) does not loop: a node met again
// on its own path is treated as a root, and an edge that goes back is drawn direct.
func layoutDAG(nodes []dagNode) dagLayout {
	idx := make(map[string]int, len(nodes))
	for i, n := range nodes {
		idx[n.Name] = i
	}
	deps := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, d := range n.Deps {
			if j, ok := idx[d]; ok && j != i && !slices.Contains(deps[i], j) {
				deps[i] = append(deps[i], j)
			}
		}
	}
	l := dagLayout{nodes: len(nodes), layer: make([]int, len(nodes))}
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
	// The vertices' neighbours in the layer before (in) and after (out): a dummy has
	// one of each, the previous and next point of its edge.
	in := make([][]int, len(nodes))
	out := make([][]int, len(nodes))
	for i := range nodes {
		for _, j := range deps[i] {
			e := dagEdge{from: j, to: i}
			prev := j
			for k := l.layer[j] + 1; k < l.layer[i]; k++ {
				v := len(l.layer)
				l.layer = append(l.layer, k)
				in, out = append(in, []int{prev}), append(out, nil)
				out[prev] = append(out[prev], v)
				e.via = append(e.via, v)
				prev = v
			}
			if l.layer[i] > l.layer[j] {
				in[i] = append(in[i], prev)
				out[prev] = append(out[prev], i)
			}
			l.edges = append(l.edges, e)
		}
	}
	l.row = make([]int, len(l.layer))
	l.layers = make([][]int, top+1)
	for v, k := range l.layer {
		l.layers[k] = append(l.layers[k], v)
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
			nbr := in
			if !forward {
				nbr = out
			}
			bary := map[int]float64{}
			for _, v := range l.layers[li] {
				sum, n := 0.0, 0
				for _, u := range nbr[v] {
					sum += float64(l.row[u])
					n++
				}
				if n > 0 {
					bary[v] = sum / float64(n)
				} else {
					bary[v] = float64(l.row[v])
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
		for r, v := range layer {
			l.row[v] = r
		}
	}
}

// height is vertex v's height in its layer's column.
func (l *dagLayout) height(v int) int {
	if v < l.nodes {
		return nodeH
	}
	return dummyH
}

// place returns each vertex's top left corner and the drawing's size: layers side
// by side, each layer's vertices stacked in row order with gapY between them and
// centred vertically.
func (l *dagLayout) place() (x, y []int, width, height int) {
	x, y = make([]int, len(l.layer)), make([]int, len(l.layer))
	tall := make([]int, len(l.layers))
	for k, layer := range l.layers {
		for r, v := range layer {
			if r > 0 {
				tall[k] += gapY
			}
			tall[k] += l.height(v)
		}
		height = max(height, tall[k])
	}
	for k, layer := range l.layers {
		at := dagPad + (height-tall[k])/2
		for _, v := range layer {
			x[v], y[v] = dagPad+k*(nodeW+gapX), at
			at += l.height(v) + gapY
		}
	}
	return x, y, 2*dagPad + len(l.layers)*nodeW + (len(l.layers)-1)*gapX, 2*dagPad + height
}

// edgePath is the SVG path of e: from the middle of its source's right side,
// through each dummy's slot (a straight line across that layer's column), to the
// middle of its target's left side, with a curve across each gap between columns
// whose control points stay in the gap.
func (l *dagLayout) edgePath(e dagEdge, x, y []int) string {
	var b strings.Builder
	px, py := float64(x[e.from]+nodeW), float64(y[e.from]+nodeH/2)
	fmt.Fprintf(&b, "M%.0f,%.0f", px, py)
	curve := func(ex, ey float64) {
		mid := (px + ex) / 2
		fmt.Fprintf(&b, " C%.0f,%.0f %.0f,%.0f %.0f,%.0f", mid, py, mid, ey, ex, ey)
		px, py = ex, ey
	}
	for _, v := range e.via {
		cy := float64(y[v] + dummyH/2)
		curve(float64(x[v]), cy)
		px = float64(x[v] + nodeW)
		fmt.Fprintf(&b, " L%.0f,%.0f", px, cy)
	}
	curve(float64(x[e.to]-1), float64(y[e.to]+nodeH/2))
	return b.String()
}

// dagSVG draws nodes (in spec order) as an SVG graph.
func dagSVG(nodes []dagNode) template.HTML {
	if len(nodes) == 0 {
		return ""
	}
	l := layoutDAG(nodes)
	x, y, width, height := l.place()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="workflow graph">`,
		width, height, width, height)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto">` +
		`<path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>`)
	for _, e := range l.edges {
		fmt.Fprintf(&b, `<path class="edge st-%s" data-from="%s" data-to="%s" d="%s" marker-end="url(#arrow)"/>`,
			cssToken(nodes[e.from].Status), html.EscapeString(nodes[e.from].Name), html.EscapeString(nodes[e.to].Name),
			l.edgePath(e, x, y))
	}
	for i, n := range nodes {
		tip := n.Name + ": " + n.Status
		if n.Total > 0 {
			tip += fmt.Sprintf(" — %s of %s children done", num(n.Done), num(n.Total))
			if n.ChildrenFailed > 0 {
				tip += fmt.Sprintf(", %s failed", num(n.ChildrenFailed))
			}
		}
		if n.Error != "" {
			tip += " — " + n.Error
		}
		open, closeTag := "<g>", "</g>"
		if n.JobID > 0 {
			open, closeTag = fmt.Sprintf(`<a href="/jobs/%d">`, n.JobID), "</a>"
		}
		b.WriteString(open)
		fmt.Fprintf(&b, `<g class="dag-node st-%s" data-node="%s" data-status="%s" transform="translate(%d,%d)"><title>%s</title>`,
			cssToken(n.Status), html.EscapeString(n.Name), cssToken(n.Status), x[i], y[i], html.EscapeString(tip))
		dash := ""
		if n.Optional {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<rect width="%d" height="%d" rx="7"%s/>`, nodeW, nodeH, dash)
		fmt.Fprintf(&b, `<text class="name" x="10" y="21">%s</text>`, html.EscapeString(clip(n.Name, maxLabel)))
		b.WriteString(`<text class="sub" x="10" y="38">` + nodeSub(n) + `</text>`)
		if n.Progress >= 0 && (n.Status == "running" || n.Status == "waiting") {
			fmt.Fprintf(&b, `<rect class="bar-bg" x="0" y="%d" width="%d" height="4"/><rect class="bar" x="0" y="%d" width="%d" height="4"/>`,
				nodeH-4, nodeW, nodeH-4, int(n.Progress)*nodeW/100)
		}
		b.WriteString("</g>" + closeTag)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// nodeSub is the second line of node n (escaped SVG text): its state and kind, or
// for a map node that fanned out its children done of all, and failed if any
// ("waiting · 20k/60k · 3 failed").
func nodeSub(n dagNode) string {
	if n.Total == 0 {
		sub := n.Status
		if n.Kind != "" {
			sub += " · " + n.Kind
		}
		if n.Input {
			sub += " · input"
		}
		if n.Map {
			sub += " · map"
		}
		return html.EscapeString(clip(sub, 28))
	}
	sub := html.EscapeString(fmt.Sprintf("%s · %s/%s", n.Status, shortCount(n.Done), shortCount(n.Total)))
	if n.ChildrenFailed > 0 {
		sub += ` · <tspan class="failed">` + shortCount(n.ChildrenFailed) + ` failed</tspan>`
	}
	return sub
}

// shortCount renders n in at most five characters: 950, 9,950, 20k, 1.2M.
func shortCount(n int64) string {
	switch {
	case n < 10_000:
		return num(n)
	case n < 1_000_000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1e6)
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
