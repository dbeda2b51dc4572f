package top

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func snapshot(queues, jobs, workers int) *Snapshot {
	s := &Snapshot{At: time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)}
	for i := range queues {
		s.Queues = append(s.Queues, Queue{Queue: fmt.Sprintf("q%02d", i), Queued: 3, Running: 1, LiveWorkers: 1,
			JobsPerSec10s: 2.5, JobsPerSec1m: 1.25})
	}
	w := "w1"
	total := int64(8)
	for i := range jobs {
		s.Jobs = append(s.Jobs, RunningJob{ID: int64(100 + i), Queue: "q00", Kind: "resize", Attempt: 1, Worker: &w,
			Runtime: 1500 * time.Millisecond, ProgressCurrent: 2, ProgressTotal: &total})
	}
	for i := range workers {
		s.Workers = append(s.Workers, Worker{ID: fmt.Sprintf("w%d", i), Host: "h", State: "running", Liveness: "live",
			Queues: []string{"q00"}, SinceSeen: time.Second})
	}
	return s
}

func TestRenderShowsEverySectionWithoutAHeightLimit(t *testing.T) {
	s := snapshot(2, 1, 1)
	s.Queues = append(s.Queues, Queue{Queue: "orphan", Queued: 4, Paused: true})
	s.Workers = append(s.Workers, Worker{ID: "gone", Liveness: "dead", State: "running", SinceSeen: time.Minute},
		Worker{ID: "bye", Liveness: "stopped", State: "stopped", SinceSeen: time.Hour})
	out := strings.Join(Render(s, Frame{Width: 200, Title: "db"}), "\n")
	require.Contains(t, out, "pgrun top  db  10:00:00")
	require.Regexp(t, `(?m)^q00\s+3\s+0\s+1\s+0\s+0\s+-\s+1\s+2\.5\s+1\.2\s+0$`, out)
	require.Contains(t, out, "orphan (paused)")
	require.Contains(t, out, "! orphan: 4 queued jobs and no live worker serves this queue")
	require.Contains(t, out, "RUNNING JOBS (1 of 2, longest running first)")
	require.Regexp(t, `(?m)^100\s+q00\s+resize\s+1\s+w1\s+1\.5s\s+\[#####---------------\]\s+25% 2/8$`, out)
	require.Contains(t, out, "WORKERS (1 live, 1 dead, 1 stopped)")
	require.Regexp(t, `(?m)^gone\s+dead\s`, strings.ReplaceAll(out, "     ", " "))
	require.Regexp(t, `(?m)^bye\s+stopped\s`, strings.ReplaceAll(out, "     ", " "))
}

// On a small terminal the frame is exactly its height, every line within its
// width, the status line last, and cut sections say how much they left out.
func TestRenderFitsTheTerminal(t *testing.T) {
	s := snapshot(30, 50, 20)
	for _, size := range [][2]int{{80, 24}, {120, 40}, {40, 12}, {200, 60}} {
		lines := Render(s, Frame{Width: size[0], Height: size[1], Title: "db", Status: "refreshed; q quits"})
		require.Len(t, lines, size[1], "%v", size)
		for _, l := range lines {
			require.LessOrEqual(t, len([]rune(l)), size[0], "%v: %q", size, l)
		}
		require.Equal(t, cut("refreshed; q quits", size[0]), lines[len(lines)-1])
	}
	out := strings.Join(Render(s, Frame{Width: 120, Height: 40}), "\n")
	require.Regexp(t, `\.\.\. \d+ more queues`, out)
	require.Regexp(t, `\.\.\. \d+ more workers`, out)
	require.Regexp(t, `RUNNING JOBS \(\d+ of 30,`, out)

	// A short snapshot leaves the rest of the screen blank, status at the bottom.
	lines := Render(snapshot(1, 0, 0), Frame{Width: 80, Height: 30, Status: "ok"})
	require.Len(t, lines, 30)
	require.Equal(t, "ok", lines[29])
	require.Equal(t, "", lines[28])
}

func TestJobProgressWithoutATotal(t *testing.T) {
	require.Equal(t, "-", jobProgress(RunningJob{ProgressCurrent: 5}))
	zero := int64(0)
	require.Equal(t, "-", jobProgress(RunningJob{ProgressCurrent: 5, ProgressTotal: &zero}))
	ten := int64(10)
	require.Equal(t, "[####################] 100% 12/10", jobProgress(RunningJob{ProgressCurrent: 12, ProgressTotal: &ten}))
}

// A burst of notifications makes one refresh debounceWait after the first, and
// refreshes are at least debounceGap apart.
func TestDebouncerGathersBursts(t *testing.T) {
	var d debouncer
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at, ok := d.note(t0)
	require.True(t, ok)
	require.Equal(t, t0.Add(debounceWait), at)
	for i := range 100 {
		_, ok := d.note(t0.Add(time.Duration(i) * time.Millisecond))
		require.False(t, ok, "joins the scheduled refresh")
	}
	require.True(t, d.pending())
	d.done(at)
	require.False(t, d.pending())

	// The next notification right after: held back to debounceGap after the last.
	next, ok := d.note(at.Add(10 * time.Millisecond))
	require.True(t, ok)
	require.Equal(t, at.Add(debounceGap), next)
	d.done(next)
	// Long after: debounceWait again.
	later := next.Add(time.Minute)
	at, ok = d.note(later)
	require.True(t, ok)
	require.Equal(t, later.Add(debounceWait), at)
}

func TestWarnings(t *testing.T) {
	require.Equal(t, []string{
		"a: 1 queued job and no live worker serves this queue",
		"b: 12 queued jobs of kinds no live worker handles",
		"c: 1 queued job of a kind no live worker handles",
	}, Warnings([]Queue{
		{Queue: "a", Queued: 1, Unhandled: 1},
		{Queue: "b", Queued: 20, Unhandled: 12, LiveWorkers: 2},
		{Queue: "c", Queued: 1, Unhandled: 1, LiveWorkers: 1},
		{Queue: "idle"},
		{Queue: "later", Scheduled: 5}, // not due: nothing to flag
	}))
}
