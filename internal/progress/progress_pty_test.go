//go:build linux

package progress

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// On a terminal (a pseudo-terminal here, as under ssh or tmux) bars are on unless
// --no-progress turns them off, and a bar's frames reach the terminal.
func TestBarsAreOnOnATerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR, 0)
	require.NoError(t, err)
	defer tty.Close()

	require.True(t, Enabled(tty, false))
	require.False(t, Enabled(tty, true), "--no-progress")

	b := New(tty, "enqueue", 4, Enabled(tty, false))
	b.Set(2)
	b.Done()
	require.NoError(t, ptmx.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 4096)
	got := ""
	for !strings.Contains(got, "enqueue [") || !strings.Contains(got, "2/4") {
		k, err := ptmx.Read(buf)
		require.NoError(t, err)
		got += string(buf[:k])
	}
}
