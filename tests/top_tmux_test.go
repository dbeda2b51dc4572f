package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// tmuxSession is `runner top` running in a detached tmux session of its own (a
// private server socket), as a person would see it in a terminal.
type tmuxSession struct {
	t    *testing.T
	sock string
	name string
}

// startTop starts `runner top args...` in a 150x45 tmux pane, in a shell that
// prints top's exit status after it and stays, so that the status can be read.
func startTop(t *testing.T, name string, args ...string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("tmux is not installed (apt-get install tmux); CI installs it")
		}
		t.Fatal("tmux is not installed, and CI needs it: .ci/run installs it")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	require.NoError(t, os.WriteFile(conf, nil, 0o600)) // not the user's ~/.tmux.conf
	s := &tmuxSession{t: t, sock: filepath.Join(dir, "sock"), name: name}
	command := runnerBin + " top"
	for _, a := range args {
		command += " '" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	// The shell stays (cat waits on the terminal): tmux may drop what a pane's last
	// process writes just before it exits, so the pane must outlive the echo.
	command += `; echo "top exited $?"; exec cat`
	s.tmux("-f", conf, "new-session", "-d", "-s", name, "-x", "150", "-y", "45", command)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", s.sock, "kill-server").Run() })
	return s
}

func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", s.sock}, args...)...).CombinedOutput()
	require.NoError(s.t, err, "tmux %v: %s", args, out)
	return string(out)
}

// screen is what the pane shows now.
func (s *tmuxSession) screen() string {
	return s.tmux("capture-pane", "-p", "-t", s.name)
}

// waitFor polls the pane until it matches re, failing with the last screen after
// within.
func (s *tmuxSession) waitFor(within time.Duration, re string) string {
	s.t.Helper()
	pat := regexp.MustCompile(re)
	deadline := time.Now().Add(within)
	for {
		scr := s.screen()
		if pat.MatchString(scr) {
			return scr
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after %s the screen does not match %q:\n%s", within, re, scr)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval, not synchronisation
	}
}

// exited waits until runner top exits and returns its exit status, as the shell
// around it prints it once top has given the terminal back, and whether the pane is
// still on the alternate screen ("0": the shell's screen is back). (tmux's own
// pane_dead_status is not always filled in.)
func (s *tmuxSession) exited(within time.Duration) (status string, altScreen string) {
	s.t.Helper()
	scr := s.waitFor(within, `top exited \d+`)
	status = regexp.MustCompile(`top exited (\d+)`).FindStringSubmatch(scr)[1]
	altScreen = strings.TrimSpace(s.tmux("display-message", "-p", "-t", s.name, "#{alternate_on}"))
	return status, altScreen
}

// runner top draws the queues and refreshes them on the engine's notifications
// (the periodic refresh is set to an hour, so only LISTEN can move the numbers),
// shows a running job's progress bar and the workers, and q quits with status 0 and
// gives the terminal back as it was (the shell's screen, cooked mode).
func TestTopUnderTmux(t *testing.T) {
	b := testkit.Setup(t)
	s := startTop(t, "top", "--database-url", b.URL, "--interval", "1h")
	s.waitFor(20*time.Second, `(?m)^pgrun top .*\n(.*\n)*\(no queues yet\)`)

	for range 3 {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", nil, pgrun.Queue("tmuxq"))
		require.NoError(t, err)
	}
	s.waitFor(10*time.Second, `(?m)^tmuxq\s+3\s+0\s+0\s`)
	s.waitFor(10*time.Second, `(?m)^! tmuxq: 3 queued jobs and no live worker serves this queue`)

	// A live worker claims one and reports progress; the next enqueue wakes top.
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.worker_heartbeat('w-tmux', 'host-t', 7, '{tmuxq}')`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('tmuxq', 'w-tmux', 1)`).Scan(&id))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_progress($1, 5, 10)`, id)
	require.NoError(t, err)
	for range 4 {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", nil, pgrun.Queue("tmuxq"))
		require.NoError(t, err)
	}
	scr := s.waitFor(10*time.Second, `(?m)^tmuxq\s+6\s+0\s+1\s`)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+tmuxq\s+resize\s+1\s+w-tmux\s+\S+\s+\[##########----------\]\s+50%% 5/10`, id), scr)
	require.Contains(t, scr, "WORKERS (1 live, 0 dead, 0 stopped)")
	require.NotContains(t, scr, "no live worker serves", "the worker serves the queue now")
	require.Contains(t, scr, "notified on pgrun_jobs")

	s.tmux("send-keys", "-t", s.name, "q")
	status, alt := s.exited(10 * time.Second)
	require.Equal(t, "0", status)
	require.Equal(t, "0", alt, "the terminal is back on the shell's screen")
	// And out of raw mode: a line typed now is echoed, then read whole by cat.
	s.tmux("send-keys", "-t", s.name, "typed-after-top", "Enter")
	s.waitFor(10*time.Second, `(?m)^typed-after-top\n^typed-after-top$`)
}

// Ctrl-C quits too (in raw mode it arrives as a key, not as a signal).
func TestTopQuitsOnCtrlC(t *testing.T) {
	b := testkit.Setup(t)
	s := startTop(t, "top-ctrl-c", "--database-url", b.URL)
	s.waitFor(20*time.Second, `q quits`)
	s.tmux("send-keys", "-t", s.name, "C-c")
	status, alt := s.exited(10 * time.Second)
	require.Equal(t, "0", status)
	require.Equal(t, "0", alt)
}
