// Package progress draws the progress bars of the CLI's long commands (job enqueue
// --count, bench, bulk job retry) on stderr, and the bar cells that runner top draws per
// job. A bar is drawn only where a person watches: on a terminal, and not with
// --no-progress; a script or a log file gets the command's result lines alone.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// redrawEvery is the least time between two frames of a bar: fast enough to look
// alive, slow enough that a loop calling Set a million times costs nothing.
const redrawEvery = 100 * time.Millisecond

// estimateAfter is how long a bar runs before it guesses what is left: earlier the
// rate is mostly noise.
const estimateAfter = 500 * time.Millisecond

// Enabled reports whether a bar should be drawn on w: w is a terminal and the user
// did not turn bars off (off: --no-progress).
func Enabled(w io.Writer, off bool) bool {
	return !off && IsTerminal(w)
}

// IsTerminal reports whether w is a terminal (an *os.File on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Bar is one progress bar, redrawn in place on one line. The zero of a disabled
// bar (New with on false) does nothing, so callers need no conditions. A Bar is safe
// for concurrent use.
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	on    bool
	label string
	total int64
	cur   int64
	start time.Time
	drawn time.Time
	width int
	now   func() time.Time
}

// New returns a bar for total steps labelled label, drawn on w when on (see
// Enabled). The bar is as wide as the terminal, or 80 columns.
func New(w io.Writer, label string, total int64, on bool) *Bar {
	b := &Bar{w: w, on: on, label: label, total: total, now: time.Now, width: 80}
	b.start = b.now()
	if f, ok := w.(*os.File); ok && on {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			b.width = cols
		}
	}
	return b
}

// Set records that cur steps are done and redraws if the last frame is older than
// redrawEvery.
func (b *Bar) Set(cur int64) {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = cur
	if now := b.now(); now.Sub(b.drawn) >= redrawEvery {
		b.draw(now)
	}
}

// Add records n more steps done.
func (b *Bar) Add(n int64) {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	cur := b.cur + n
	b.mu.Unlock()
	b.Set(cur)
}

// Done draws the last frame as it stands and ends its line, so that what is
// printed next starts on a line of its own.
func (b *Bar) Done() {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(b.now())
	fmt.Fprint(b.w, "\n")
	b.on = false
}

func (b *Bar) draw(now time.Time) {
	b.drawn = now
	// \r back to the line's start; \033[K clears what a longer frame left.
	fmt.Fprint(b.w, "\r"+Render(b.label, b.cur, b.total, now.Sub(b.start), b.width)+"\033[K")
}

// Render is one frame of a bar, at most width columns:
//
//	enqueue [##########----------]  50% 5000/10000 1.2s, ~1.2s left
//
// The bar takes what the text leaves; the estimate of what is left appears once a
// step is done and estimateAfter has passed. A total of zero or less draws an empty bar.
func Render(label string, cur, total int64, elapsed time.Duration, width int) string {
	cur = max(cur, 0)
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(min(cur, total)) / float64(total)
	}
	info := fmt.Sprintf(" %3.0f%% %d/%d %s", pct, cur, total, round(elapsed))
	if cur > 0 && total > cur && elapsed >= estimateAfter {
		left := time.Duration(float64(elapsed) * float64(total-cur) / float64(cur))
		info += ", ~" + round(left) + " left"
	}
	head := label + " "
	cells := width - len([]rune(head)) - len(info) - 2 // 2: the brackets
	if cells < 10 {
		// Too narrow for a bar worth the name: the numbers alone, cut to fit.
		return cut(head+strings.TrimSpace(info), width)
	}
	return head + Cells(cur, total, min(cells, 40)) + info
}

// Cells draws a bar of width cells between brackets, [#####-----], filled to
// cur/total (none when total is zero or less).
func Cells(cur, total int64, width int) string {
	width = max(width, 1)
	n := 0
	if total > 0 {
		n = int(int64(width) * min(max(cur, 0), total) / total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

// round shortens d for a bar: tenths of a second under a minute, seconds above.
func round(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// cut shortens s to at most width runes.
func cut(s string, width int) string {
	r := []rune(s)
	if len(r) <= max(width, 0) {
		return s
	}
	return string(r[:max(width, 0)])
}
