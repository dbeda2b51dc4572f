package runner

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// completion is a succeeded attempt waiting to be recorded.
type completion struct {
	id      int64
	attempt int
	result  []byte // JSON, or nil for no result
}

// completer records successes in batches: it takes whatever has queued up since the
// last flush (up to DefaultCompleteBatch) and finishes it with one complete_jobs
// call. Under light load a batch is one job and adds no delay; under heavy load the
// batches grow and the commit cost is shared.
type completer struct {
	r      *Runner
	mu     sync.Mutex
	buf    []completion
	signal chan struct{}
	done   chan struct{}
	closed chan struct{}
}

func newCompleter(r *Runner) *completer {
	return &completer{r: r, signal: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
}

func (c *completer) add(x completion) {
	c.mu.Lock()
	c.buf = append(c.buf, x)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// close asks run to flush what is left and return; it waits for that.
func (c *completer) close() {
	close(c.done)
	<-c.closed
}

func (c *completer) run(ctx context.Context) {
	defer close(c.closed)
	for {
		select {
		case <-c.signal:
			c.flush()
		case <-c.done:
			c.flush()
			return
		case <-ctx.Done():
			c.flush()
			return
		}
	}
}

// flush records everything buffered, in batches.
func (c *completer) flush() {
	for {
		c.mu.Lock()
		n := min(len(c.buf), DefaultCompleteBatch)
		batch := c.buf[:n:n]
		c.buf = c.buf[n:]
		if len(c.buf) == 0 {
			c.buf = nil
		}
		c.mu.Unlock()
		if n == 0 {
			return
		}
		c.complete(batch)
	}
}

func (c *completer) complete(batch []completion) {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	start := time.Now()
	err := c.send(ctx, batch)
	switch {
	case err == nil:
		c.r.stats.completed.Add(int64(len(batch)))
		c.r.log.Debug("completed", "jobs", len(batch), "took", time.Since(start))
	case isRefused(err):
		// One bad result (a value the server will not store) must not poison the
		// batch: complete one by one, and fail only the job the server refuses.
		for _, x := range batch {
			err := c.send(ctx, []completion{x})
			if err == nil {
				c.r.stats.completed.Add(1)
			}
			if err != nil && isRefused(err) {
				c.r.log.Error("the database refused a job's result; failing the job", "job", x.id, "err", err)
				c.r.failReport(ctx, x.id, x.attempt, "bad_result", fmt.Sprintf("result refused: %v", err))
			} else if err != nil {
				c.r.log.Error("could not record a completion; its lease will bring the job back", "job", x.id, "err", err)
			}
		}
	default:
		c.r.log.Error("could not record completions; their leases will bring the jobs back",
			"jobs", len(batch), "err", err)
	}
}

// send records batch with one complete_jobs call, retrying transient errors.
func (c *completer) send(ctx context.Context, batch []completion) error {
	ids := make([]int64, len(batch))
	attempts := make([]int32, len(batch))
	results := make([][]byte, len(batch))
	for i, x := range batch {
		ids[i], attempts[i], results[i] = x.id, int32(x.attempt), x.result
	}
	return withRetry(ctx, func(ctx context.Context) error {
		_, err := c.r.pool.Exec(ctx, `select pgrun.complete_jobs($1, $2, $3::jsonb[], $4)`, ids, attempts, results, c.r.cfg.WorkerID)
		return err
	})
}
