//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pgrun/pgrun"
)

// openPTY returns both ends of a pseudo-terminal: what a command writes to tty, a
// person would see; the test reads it from ptmx.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

func client(t *testing.T, pool *pgxpool.Pool) *pgrun.Client {
	t.Helper()
	c, err := pgrun.NewClient(pool, pgrun.Config{})
	require.NoError(t, err)
	return c
}

// readUntil reads the terminal until it has shown want.
func readUntil(t *testing.T, ptmx *os.File, want string) string {
	t.Helper()
	require.NoError(t, ptmx.SetReadDeadline(time.Now().Add(10*time.Second)))
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), want) {
		n, err := ptmx.Read(buf)
		require.NoError(t, err, "read so far: %q", got.String())
		got.Write(buf[:n])
	}
	return got.String()
}

// enqueue --count with a bar inserts in chunks inside one transaction: every job,
// once, and the bar reaches the total on the terminal.
func TestEnqueueWithBarOnATerminal(t *testing.T) {
	_, pool := newCLI(t)
	ptmx, tty := openPTY(t)
	n := 2*enqueueChunk + 7
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "barred"}
	}
	c := client(t, pool)
	jobs, err := enqueueWithBar(context.Background(), c, specs, tty, false)
	require.NoError(t, err)
	require.Len(t, jobs, n)
	require.Equal(t, n, count(t, pool, `select count(distinct id) from pgrun.jobs where queue = 'barred'`))
	readUntil(t, ptmx, fmt.Sprintf("%d/%d", n, n))

	// A failing chunk leaves nothing behind: the chunks share one transaction.
	specs = append(make([]pgrun.JobSpec, 0, n), specs...)
	for i := range specs {
		specs[i].Queue = "atomic"
	}
	specs[n-1].Queue = "Not A Queue"
	_, err = enqueueWithBar(context.Background(), c, specs, tty, false)
	require.Error(t, err)
	require.Zero(t, count(t, pool, `select count(*) from pgrun.jobs where queue = 'atomic'`))
}

// Without a terminal (here a buffer, as in a pipe or a log) the commands print
// exactly their result lines: no bar, no carriage return.
func TestLongCommandsDrawNoBarWithoutATerminal(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("job", "enqueue", "noop", "--count", fmt.Sprint(enqueueChunk+1))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d jobs enqueued (ids 1..%d, queue default)\n", enqueueChunk+1, enqueueChunk+1), out)
	_, err = pool.Exec(context.Background(), `select pgrun.fail_job(j.id, j.attempt, '{"message": "x"}', retryable => false)
		from pgrun.claim_jobs('default', 'w1', 3) j`)
	require.NoError(t, err)
	out, err = c.run("job", "retry", "--queue", "default")
	require.NoError(t, err)
	require.Equal(t, "3 failed jobs queued again\n", out)
}
