package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/progress"
)

// The long commands' progress bars (job enqueue --count, bench, bulk job retry) are
// drawn on stderr, and only when stderr is a terminal and --no-progress is not
// given: a script, a pipe or a log file sees the commands' output exactly as
// without bars.

const (
	// enqueueChunk is how many jobs one statement of a barred enqueue --count
	// inserts: large enough to keep the batch's speed, small enough that the bar moves.
	enqueueChunk = 2000
)

// addNoProgressFlag adds --no-progress to a long command.
func addNoProgressFlag(cmd *cobra.Command, off *bool) {
	cmd.Flags().BoolVar(off, "no-progress", false, "draw no progress bar (one is drawn on stderr only when it is a terminal)")
}

// newBar returns a bar of total steps on w, drawn only when w is a terminal and off
// (--no-progress) is false.
func newBar(w io.Writer, label string, total int, off bool) *progress.Bar {
	return progress.New(w, label, int64(total), progress.Enabled(w, off))
}

// enqueueWithBar enqueues specs as one statement, as job enqueue --count always did;
// with a bar it goes in statements of enqueueChunk jobs inside one transaction, so
// that the bar moves and the jobs still all commit together, or none.
func enqueueWithBar(ctx context.Context, c *pgrun.Client, specs []pgrun.JobSpec, stderr io.Writer, off bool) ([]*pgrun.Job, error) {
	if len(specs) <= enqueueChunk || !progress.Enabled(stderr, off) {
		return c.EnqueueMany(ctx, specs)
	}
	tx, err := c.Pool().Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
	b := newBar(stderr, "enqueue", len(specs), off)
	defer b.Done() // also on an error, so that its message starts a line of its own
	jobs := make([]*pgrun.Job, 0, len(specs))
	for lo := 0; lo < len(specs); lo += enqueueChunk {
		chunk, err := c.EnqueueManyTx(ctx, tx, specs[lo:min(lo+enqueueChunk, len(specs))])
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, chunk...)
		b.Set(int64(len(jobs)))
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return jobs, nil
}

// barred wraps a bench's completed-jobs counter so that each reading also moves bar.
func barred(completed func() int64, bar *progress.Bar) func() int64 {
	return func() int64 {
		n := completed()
		bar.Set(n)
		return n
	}
}
