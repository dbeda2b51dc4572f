package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRenderFitsTheWidthAndSaysWhatIsLeft(t *testing.T) {
	got := Render("enqueue", 5000, 10000, 1200*time.Millisecond, 80)
	require.Equal(t, "enqueue [##################-------------------]  50% 5000/10000 1.2s, ~1.2s left", got)

	require.Equal(t, "retry [----------]   0% 0/3 0s", Render("retry", 0, 3, 0, 30))
	require.Equal(t, "done [###########] 100% 7/7 2m3s", Render("done", 7, 7, 123*time.Second, 32),
		"no estimate once everything is done")

	// A bar never exceeds the width, and past a certain narrowness drops the cells.
	for w := 1; w < 120; w++ {
		require.LessOrEqual(t, len([]rune(Render("burn-down", 123456, 1000000, 95*time.Second, w))), w, "width %d", w)
	}
	require.Equal(t, "x 50% 1/2 1s", Render("x", 1, 2, time.Second, 20)[:12])
	require.NotContains(t, Render("burn-down", 1, 2, time.Second, 30), "[")
}

func TestCellsClampAndHandleNoTotal(t *testing.T) {
	require.Equal(t, "[#####-----]", Cells(5, 10, 10))
	require.Equal(t, "[----------]", Cells(5, 0, 10), "no total: an empty bar")
	require.Equal(t, "[##########]", Cells(50, 10, 10), "over the total: full, never longer")
	require.Equal(t, "[----------]", Cells(-3, 10, 10))
	require.Equal(t, "[#]", Cells(1, 1, 0), "at least one cell")
}

// Bars are drawn only on a terminal: not into a buffer, a file or a pipe, and not
// with --no-progress.
func TestBarsAreOffWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	require.False(t, Enabled(&buf, false))
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	require.False(t, Enabled(f, false), "a regular file")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, Enabled(w, false), "a pipe")

	b := New(w, "enqueue", 10, Enabled(w, false))
	b.Set(5)
	b.Add(5)
	b.Done()
	require.NoError(t, w.Close())
	out, err := readAll(r)
	require.NoError(t, err)
	require.Empty(t, out, "a disabled bar writes nothing")

	var nilBar *Bar
	nilBar.Set(1) // a nil bar is a disabled one
	nilBar.Done()
}

func TestBarRedrawsInPlaceAtMostEveryTenthOfASecond(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(&buf, "retry", 100, true)
	b.now = func() time.Time { return now }
	b.start = now
	b.Set(10)
	b.Set(20) // same instant: no new frame
	now = now.Add(50 * time.Millisecond)
	b.Add(10)
	require.Equal(t, 1, strings.Count(buf.String(), "\r"), buf.String())
	now = now.Add(60 * time.Millisecond)
	b.Set(40)
	require.Equal(t, 2, strings.Count(buf.String(), "\r"))
	require.Contains(t, buf.String(), "40/100")
	b.Done()
	require.True(t, strings.HasSuffix(buf.String(), "\033[K\n"), "Done ends the line: %q", buf.String())
	require.Contains(t, buf.String(), "40/100 100ms\033[K\n")
	b.Set(99) // after Done: nothing more
	require.NotContains(t, buf.String(), "99/100")
}

func readAll(f *os.File) (string, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.String(), err
}
