package testkit

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Proc is a process under test (a `runner` command, psql, a worker in another
// language), its output collected.
type Proc struct {
	Cmd  *exec.Cmd
	logs Buffer
	done chan error
}

// StartProc starts cmd, collecting its output, and kills it at test end (printing
// its output, under name, if the test failed).
func StartProc(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan error, 1)}
	p.Cmd.Stdout, p.Cmd.Stderr = &p.logs, &p.logs
	require.NoError(t, p.Cmd.Start())
	go func() { p.done <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output())
		}
	})
	return p
}

// Output is what the process wrote so far, stdout and stderr interleaved.
func (p *Proc) Output() string { return p.logs.String() }

// Wait returns the process's exit code (128 + the signal for one killed by a
// signal), failing the test if it does not exit within d.
func (p *Proc) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for Cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				return 128 + int(st.Signal())
			}
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(d):
		t.Fatalf("process did not exit within %s", d)
		return -1
	}
}
