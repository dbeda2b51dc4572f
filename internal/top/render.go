package top

import (
	"bytes"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pgrun/pgrun/internal/progress"
)

// Frame is how one frame is laid out.
type Frame struct {
	Width  int // columns; lines are cut to it
	Height int // lines; 0: as many as the snapshot needs (--once)
	Title  string
	// Status is the frame's last line: when it was read, what woke it, errors.
	Status string
}

// progressCells is the width of a running job's progress bar.
const progressCells = 20

// Render lays snapshot s out as lines, at most f.Width columns and f.Height lines
// (every line when f.Height is 0). When the height is short, queues keep a third
// of the rows, workers a quarter, running jobs the rest, and each cut section ends
// with "... N more".
func Render(s *Snapshot, f Frame) []string {
	warnings := Warnings(s.Queues)
	var running int64
	for _, q := range s.Queues {
		running += q.Running
	}
	live, dead, stopped := 0, 0, 0
	for _, w := range s.Workers {
		switch w.Liveness {
		case "live":
			live++
		case "dead":
			dead++
		default:
			stopped++
		}
	}

	// Rows for each section, given the height.
	qRows, jRows, wRows := len(s.Queues), len(s.Jobs), len(s.Workers)
	if f.Height > 0 {
		// title, blank, queue header, blank, jobs title and header, blank, workers
		// title and header, status: 10 lines, and the warnings.
		room := max(f.Height-10-len(warnings), 3)
		qRows = min(qRows, max(room/3, 1))
		wRows = min(wRows, max(room/4, 1))
		jRows = min(jRows, max(room-qRows-wRows, 1))
		if left := room - qRows - wRows - jRows; left > 0 { // give what jobs leave back
			extra := min(left, len(s.Queues)-qRows)
			qRows += extra
			wRows += min(left-extra, len(s.Workers)-wRows)
		}
	}

	var lines []string
	title := "pgrun top"
	if f.Title != "" {
		title += "  " + f.Title
	}
	lines = append(lines, title+"  "+s.At.Format("15:04:05"), "")

	// Queues.
	lines = append(lines, table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "QUEUE\tQUEUED\tSCHEDULED\tRUNNING\tPENDING\tWAITING\tOLDEST\tWORKERS\tJOBS/s 10s\tJOBS/s 1m\tFAILED 1m\t")
		for i, q := range s.Queues {
			if i == qRows-1 && qRows < len(s.Queues) {
				fmt.Fprintf(tw, "... %d more queues\t\n", len(s.Queues)-i)
				break
			}
			name := q.Queue
			if q.Paused {
				name += " (paused)"
			}
			oldest := "-"
			if q.OldestQueuedAge != nil {
				oldest = Age(*q.OldestQueuedAge)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", name, Count(q, q.Queued), Count(q, q.Scheduled),
				Count(q, q.Running), Count(q, q.Pending), Count(q, q.Waiting), oldest, q.LiveWorkers,
				rate(q.JobsPerSec10s, q.Estimated10s), rate(q.JobsPerSec1m, q.Estimated), Count(q, q.Failed1m))
		}
	})...)
	if len(s.Queues) == 0 {
		lines = append(lines, "(no queues yet)")
	}
	for _, w := range warnings {
		lines = append(lines, "! "+w)
	}

	// Running jobs.
	lines = append(lines, "", fmt.Sprintf("RUNNING JOBS (%d of %d, longest running first)", len(s.Jobs[:jRows]), running))
	lines = append(lines, table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tATTEMPT\tWORKER\tRUNTIME\tPROGRESS\t")
		for _, j := range s.Jobs[:jRows] {
			worker := "-"
			if j.Worker != nil {
				worker = *j.Worker
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t\n", j.ID, j.Queue, j.Kind, j.Attempt, worker, Age(j.Runtime), jobProgress(j))
		}
	})...)

	// Workers.
	lines = append(lines, "", fmt.Sprintf("WORKERS (%d live, %d dead, %d stopped)", live, dead, stopped))
	lines = append(lines, table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "WORKER\tHOST\tSTATE\tQUEUES\tJOBS\tLAST SEEN\t")
		for i, w := range s.Workers {
			if i == wRows-1 && wRows < len(s.Workers) {
				fmt.Fprintf(tw, "... %d more workers\t\n", len(s.Workers)-i)
				break
			}
			state := w.State
			if w.Liveness != "live" {
				state = w.Liveness
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\t\n", w.ID, w.Host, state, strings.Join(w.Queues, ","), w.Running, Age(w.SinceSeen))
		}
	})...)

	if f.Height > 0 {
		for len(lines) < f.Height-1 {
			lines = append(lines, "")
		}
		lines = lines[:min(len(lines), f.Height-1)]
	}
	if f.Status != "" || f.Height > 0 {
		lines = append(lines, f.Status)
	}
	for i, l := range lines {
		lines[i] = cut(l, f.Width)
	}
	return lines
}

// jobProgress is a job's bar and numbers, or "-" when it reports none.
func jobProgress(j RunningJob) string {
	if j.ProgressTotal == nil || *j.ProgressTotal <= 0 {
		return "-"
	}
	total := *j.ProgressTotal
	pct := 100 * float64(min(j.ProgressCurrent, total)) / float64(total)
	return fmt.Sprintf("%s %3.0f%% %d/%d", progress.Cells(j.ProgressCurrent, total, progressCells), pct, j.ProgressCurrent, total)
}

// rate renders jobs per second, "~" when the count behind it was estimated.
func rate(v float64, estimated bool) string {
	s := fmt.Sprintf("%.1f", v)
	if estimated {
		s = "~" + s
	}
	return s
}

// table runs fill on an aligned table and returns its lines.
func table(fill func(tw *tabwriter.Writer)) []string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fill(tw)
	_ = tw.Flush()
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		lines = append(lines, strings.TrimRight(l, " "))
	}
	return lines
}

// cut shortens s to at most width runes (no limit when width is 0 or less).
func cut(s string, width int) string {
	if width <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width])
}
