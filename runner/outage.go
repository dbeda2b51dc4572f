package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// A runner's background calls (claims, lease renewal, heartbeats, maintenance, the
// listener, telemetry) each retry every second or so while the database is away: a
// failover, a restart, a network cut. Logged one by one, an outage of a minute would
// write hundreds of lines saying the same thing. So the outage is logged once, when
// the first call finds the database unreachable, and once more when a call gets
// through again, with how long it lasted and how many calls failed meanwhile.
//
// After an outage the runner settles before it claims again (see settle): it records
// the completions it buffered, and hands back the jobs the database shows as running
// under its id that it does not hold (a claim whose answer was lost in flight, or one
// a failover undid and the runner gave up).

// While the database is unreachable, the calls that retry on their own (the
// fetchers' claims, the listener's reconnection) wait outageWait between attempts:
// jittered, from about 50 ms doubling up to 2 s, so that a fleet of runners does not
// knock in step, and a short blip costs little. The first call that gets through
// ends the outage (ok) and wakes every fetcher at once (recovered): after a restart
// the runner claims as soon as any of its connections works again, not at the end of
// its own wait.
const (
	outageRetryMin = 50 * time.Millisecond
	outageRetryMax = 2 * time.Second
)

// outageWait is the wait before retry n (from 0) of a call that found the database
// unreachable: outageRetryMin doubled n times, at most outageRetryMax, of which a
// random part of up to half is taken off ("equal jitter").
func outageWait(n int) time.Duration {
	d := outageRetryMax
	if n < 8 {
		d = min(outageRetryMin<<n, outageRetryMax)
	}
	return d - rand.N(d/2+1)
}

// outage tracks whether the database is reachable, as the runner's calls find it.
type outage struct {
	log *slog.Logger
	now func() time.Time
	// settle is poked when a call gets through after an outage.
	settle chan struct{}
	// wait is outageWait, the fetchers' wait between claims while the database is
	// unreachable; a test may stretch it to show what woke a fetcher.
	wait func(n int) time.Duration
	// back is closed when the outage ends (recovered); a new one is made when the next
	// begins. Guarded by mu.
	back chan struct{}

	down      atomic.Bool // fast path for ok(): false while all is well
	unsettled atomic.Bool // an outage happened and the runner has not settled since

	mu     sync.Mutex
	since  time.Time // when the first call failed
	failed int64     // calls failed since
	ended  time.Time // when the last outage ended
	quiet  bool      // this outage reopened the last one (see outageMerge)
	total  atomic.Int64
	count  atomic.Int64 // outages so far
}

func newOutage(log *slog.Logger) *outage {
	back := make(chan struct{})
	close(back)
	return &outage{log: log, now: time.Now, settle: make(chan struct{}, 1), wait: outageWait, back: back}
}

// recovered returns a channel that is closed once the database is found reachable
// again: already closed when no outage is under way.
func (o *outage) recovered() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.back
}

// outageMerge is how soon after an outage ended a failed call reopens it rather than
// begin a new one: the pool's connections that died in the outage are found dead at
// their next use, just after the listener's new connection got through, and they
// are the same outage, not another to log and count.
const outageMerge = time.Second

// fail records a failed call, named what, with error err. It returns true if err
// says the database is unreachable: the outage is logged (when it begins) and
// counted, and the caller should not log the failure itself. Other errors are the
// caller's to log.
func (o *outage) fail(what string, err error) bool {
	if !unreachable(err) {
		return false
	}
	o.total.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down.Load() {
		o.failed++
		return true
	}
	now := o.now()
	o.back = make(chan struct{})
	o.down.Store(true)
	o.unsettled.Store(true)
	if o.quiet = !o.ended.IsZero() && now.Sub(o.ended) < outageMerge; o.quiet {
		o.since = now
		o.failed++
		return true
	}
	o.since, o.failed = now, 1
	o.count.Add(1)
	o.log.Warn("database unreachable; background calls retry quietly until it is back", "call", what, "err", err)
	return true
}

// ok records that a call which began at began got through. The first after an
// outage logs its end and asks for the runner to settle. A call that began before
// the outage was noticed says nothing about the database now (it may have committed
// just before the server went away), so it does not end the outage.
func (o *outage) ok(began time.Time) {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	if !o.down.Load() || began.Before(o.since) {
		o.mu.Unlock()
		return
	}
	o.down.Store(false)
	close(o.back) // every fetcher waiting out a retry claims now
	o.ended = o.now()
	took, failed, quiet := o.ended.Sub(o.since), o.failed, o.quiet
	o.mu.Unlock()
	if !quiet {
		o.log.Warn("database reachable again", "after", took.Round(time.Millisecond), "failed_calls", failed)
	}
	select {
	case o.settle <- struct{}{}:
	default:
	}
}

// unreachable reports errors that say the database could not be reached or went
// away: no connection, a connection that broke, a server shutting down or starting,
// a standby where a primary was expected (read-only), a call that timed out.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) >= 2 && pe.Code[:2] == "08": // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutdown, crash, starting
			return true
		case pe.Code == "25006": // read-only: a standby, before or during a promotion
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// settleFlushTimeout bounds how long settling waits for buffered completions to be
// recorded before it hands back what is not held (those still buffered count as held).
const settleFlushTimeout = 5 * time.Second

// settleLoop settles the runner whenever a call gets through after an outage, so
// that lost claims are handed back and a dead flag cleared at once, even if no
// fetcher claims (a full runner). Fetchers also settle before claiming.
func (r *Runner) settleLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.down.settle:
			if err := r.settle(ctx); err != nil && ctx.Err() == nil {
				r.down.fail("settle", err)
			}
		}
	}
}

// settle runs once after each outage, before this runner claims again. Reports come
// first: the completions buffered during the outage are recorded (so the jobs they
// finish are not run again). Then, in one call, pgrun.release_unheld hands back every
// job the database shows as running under this worker id whose claim the runner
// does not hold, without spending an attempt: without it such a job would sit running
// for a whole lease. Last, a lease renewal and heartbeat: leases that ran out during
// the outage are renewed (the reaper gives them a grace after a server start or a
// promotion), and a dead flag maintain() set is cleared.
//
// Claims wait while it runs (claimGate), so that a claim cannot land between the
// runner listing what it holds and the database releasing what it does not. It
// returns an error, and stays due, only when the database is unreachable again.
func (r *Runner) settle(ctx context.Context) error {
	if !r.down.unsettled.Load() {
		return nil
	}
	r.settleMu.Lock()
	defer r.settleMu.Unlock()
	if !r.down.unsettled.Load() {
		return nil
	}
	// Nothing to do while the database is still away (a claim's attempt to settle
	// fails fast here rather than waiting on the completions).
	pinged := time.Now()
	if err := r.pool.Ping(ctx); err != nil {
		return err
	}
	r.down.ok(pinged)
	r.claimGate.Lock()
	defer r.claimGate.Unlock()
	began := time.Now()
	fctx, cancel := context.WithTimeout(ctx, settleFlushTimeout)
	reported := r.completer.flush(fctx)
	cancel()
	held := r.heldClaims()
	rows, err := r.pool.Query(ctx, sqlapi.ReleaseUnheld, r.cfg.WorkerID, held)
	var released []int64
	if err == nil {
		released, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		if unreachable(err) || ctx.Err() != nil {
			return err
		}
		// A server without release_unheld (an older schema) or a refusal: claiming
		// must not stop for it; the leases bring back what was lost.
		r.log.Error("handing back unheld claims failed; their leases will bring them back", "err", err)
	}
	r.down.unsettled.Store(false)
	r.log.Info("settled after the outage", "reported", reported, "held", len(held), "handed_back", len(released),
		"jobs", released, "took", time.Since(began).Round(time.Millisecond))
	r.renew(ctx)
	r.wakeAll()
	return nil
}

// heldClaims lists the claims this runner holds: jobs running here, jobs claimed and
// not yet started, and successes not yet recorded.
func (r *Runner) heldClaims() []pgrun.ClaimID {
	r.mu.Lock()
	held := make([]pgrun.ClaimID, 0, len(r.running)+len(r.arriving))
	for _, e := range r.running {
		if !e.job.ClaimID.IsZero() {
			held = append(held, e.job.ClaimID)
		}
	}
	for c := range r.arriving {
		held = append(held, c)
	}
	r.mu.Unlock()
	return append(held, r.completer.pending()...)
}

// arrive records jobs a claim brought back until they start (start forgets them), so
// that a settle in between counts them as held.
func (r *Runner) arrive(jobs []*pgrun.Job) {
	if len(jobs) == 0 {
		return
	}
	r.mu.Lock()
	for _, j := range jobs {
		r.arriving[j.ClaimID] = struct{}{}
	}
	r.mu.Unlock()
}

// retryReachable is withRetry for a call whose caller waits out an outage itself: it
// retries transient errors (a serialization failure, a deadlock, too many
// connections) but returns at once an error that says the database is unreachable,
// so that the fetcher's wait, which the end of the outage cuts short, takes over from
// a retry loop that nothing could wake.
func retryReachable(ctx context.Context, fn func(context.Context) error) error {
	err := withRetry(ctx, func(ctx context.Context) error {
		err := fn(ctx)
		if unreachable(err) {
			return reachError{err}
		}
		return err
	})
	if re, ok := err.(reachError); ok {
		return re.err
	}
	return err
}

// reachError carries an unreachable-database error out of withRetry: it hides the
// error from isTransient (it has no Unwrap), so withRetry returns it at once.
type reachError struct{ err error }

func (e reachError) Error() string { return e.err.Error() }
