package top

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"github.com/pgrun/pgrun"
)

// Channels are the channels the engine notifies on (grep pg_notify sql/functions):
// jobs claimable in a queue, a running job to stop, an operator's worker switch, a
// host's hardware sample. Completions, progress and heartbeats send nothing (the hot
// path stays quiet on purpose): the periodic refresh shows them.
var Channels = []string{pgrun.ChannelJobs, pgrun.ChannelCancel, "pgrun_control", "pgrun_hw"}

const (
	// DefaultInterval is the periodic refresh, for what sends no notification:
	// often enough that a burn-down's counts move, rarely enough that a watching
	// operator costs the database nothing worth measuring.
	DefaultInterval = 2 * time.Second
	// debounceWait gathers a burst of notifications into one refresh: a thousand
	// enqueues in a second make one read, not a thousand.
	debounceWait = 200 * time.Millisecond
	// debounceGap is the least time between two refreshes a notification causes.
	debounceGap = 500 * time.Millisecond
	// readTimeout bounds one snapshot's reads.
	readTimeout = 5 * time.Second
	// resizeCheck is how often the terminal's size is compared with the frame's
	// (no SIGWINCH: it does not exist everywhere Go builds).
	resizeCheck = 250 * time.Millisecond
	// listenRetry is how long the listener waits before reconnecting.
	listenRetry = 2 * time.Second
	// maxJobs is how many running jobs a snapshot reads: more than any screen shows.
	maxJobs = 200
)

// Options configure Run.
type Options struct {
	Pool *pgxpool.Pool
	// Out is the terminal drawn on (stdout); keys are read from /dev/tty.
	Out *os.File
	// Title names what is watched (the database), on the first line.
	Title string
	// Interval is the periodic refresh; 0: DefaultInterval.
	Interval time.Duration
}

// Once writes one frame of every queue, running job (up to 200) and worker to out,
// width columns wide, and returns: `runner top --once`, for scripts and tests.
func Once(ctx context.Context, db Querier, out io.Writer, width int, title string) error {
	s, err := Read(ctx, db, maxJobs)
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, strings.Join(Render(s, Frame{Width: width, Title: title}), "\n")+"\n")
	return err
}

// Run draws the live view full-screen on o.Out until ctx is done or the user
// presses q (or Ctrl-C), then gives the terminal back as it found it. It refreshes
// on the engine's notifications (debounced) and every o.Interval.
func Run(ctx context.Context, o Options) error {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	scr, err := openScreen(o.Out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// In this order: stop the listener, give the terminal back (closing the tty
	// ends the key reader's read), then wait for both goroutines.
	defer func() { cancel(); scr.close(); wg.Wait() }()

	keys := make(chan byte, 16)
	wg.Add(1)
	go func() { defer wg.Done(); scr.readKeys(ctx, keys) }()
	notes := make(chan string, 256)
	var listenFailed listenState
	wg.Add(1)
	go func() { defer wg.Done(); listen(ctx, o.Pool, notes, &listenFailed) }()

	v := &view{scr: scr, title: o.Title, interval: o.Interval, listen: &listenFailed}
	v.refresh(ctx, o.Pool, "start")

	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	sizeTick := time.NewTicker(resizeCheck)
	defer sizeTick.Stop()
	fire := time.NewTimer(time.Hour)
	fire.Stop()
	var d debouncer
	var woken []string
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			switch k {
			case 'q', 'Q', 0x03, 0x04: // q, Ctrl-C, Ctrl-D
				return nil
			case 'r', 'R', 0x0c: // r, Ctrl-L
				v.refresh(ctx, o.Pool, "key")
			}
		case ch := <-notes:
			if !slices.Contains(woken, ch) {
				woken = append(woken, ch)
			}
			if at, ok := d.note(time.Now()); ok {
				fire.Reset(time.Until(at))
			}
		case <-fire.C:
			v.refresh(ctx, o.Pool, strings.Join(woken, ", "))
			d.done(time.Now())
			woken = woken[:0]
		case <-tick.C:
			if !d.pending() { // a notified refresh is coming anyway
				v.refresh(ctx, o.Pool, "")
			}
		case <-sizeTick.C:
			if v.scr.resized() {
				v.paint()
			}
		}
	}
}

// view is the live view's state: the last snapshot and how it was read.
type view struct {
	scr      *screen
	title    string
	interval time.Duration
	listen   *listenState
	snap     *Snapshot
	why      string // what caused the last refresh
	err      error
}

// refresh reads a snapshot (keeping the last one when that fails) and paints it.
func (v *view) refresh(ctx context.Context, pool *pgxpool.Pool, why string) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	s, err := Read(rctx, pool, maxJobs)
	cancel()
	if ctx.Err() != nil {
		return
	}
	v.err = err
	if err == nil {
		v.snap, v.why = s, why
	}
	v.paint()
}

// paint draws the last snapshot at the terminal's size.
func (v *view) paint() {
	w, h := v.scr.size()
	status := v.status()
	if v.snap == nil {
		v.scr.draw([]string{cut("pgrun top  "+v.title, w), "", cut(status, w)})
		return
	}
	v.scr.draw(Render(v.snap, Frame{Width: w, Height: h, Title: v.title, Status: status}))
}

// status is the frame's last line.
func (v *view) status() string {
	var b strings.Builder
	switch {
	case v.err != nil:
		fmt.Fprintf(&b, "read failed: %v", v.err)
		if v.snap != nil {
			fmt.Fprintf(&b, " (showing %s)", v.snap.At.Format("15:04:05"))
		}
	case v.why == "" || v.why == "start" || v.why == "key":
		fmt.Fprint(&b, "refreshed")
	default:
		fmt.Fprintf(&b, "notified on %s", v.why)
	}
	if err := v.listen.failed(); err != nil {
		fmt.Fprintf(&b, "; LISTEN failed (%v): refreshing every %s only", err, v.interval)
	} else {
		fmt.Fprintf(&b, "; live on notifications, and every %s", v.interval)
	}
	b.WriteString("; q quits, r refreshes")
	return b.String()
}

// debouncer turns notifications into refreshes: the first of a burst schedules one
// debounceWait later (and at least debounceGap after the previous one); the others
// join it.
type debouncer struct {
	last time.Time // the previous refresh
	due  time.Time // the scheduled one; zero: none
}

// note records a notification at now and returns when to refresh, with false when
// a refresh is scheduled already.
func (d *debouncer) note(now time.Time) (time.Time, bool) {
	if !d.due.IsZero() {
		return d.due, false
	}
	d.due = now.Add(debounceWait)
	if earliest := d.last.Add(debounceGap); d.due.Before(earliest) {
		d.due = earliest
	}
	return d.due, true
}

// pending reports whether a refresh is scheduled.
func (d *debouncer) pending() bool { return !d.due.IsZero() }

// done records a refresh at now.
func (d *debouncer) done(now time.Time) {
	d.last, d.due = now, time.Time{}
}

// listenState is the listener's last failure, nil once it listens again.
type listenState struct {
	mu  sync.Mutex
	err error
}

func (l *listenState) set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

func (l *listenState) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// listen holds one LISTEN connection on Channels (pgxlisten reconnects it) and
// sends each notification's channel to notes, never blocking: a full buffer means
// a refresh is coming anyway. Behind a transaction-mode pooler LISTEN fails, and
// top refreshes on its interval alone (and says so).
func listen(ctx context.Context, pool *pgxpool.Pool, notes chan<- string, state *listenState) {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
			if err == nil {
				state.set(nil)
			}
			return conn, err
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				state.set(err)
			}
		},
		ReconnectDelay: listenRetry,
	}
	for _, c := range Channels {
		l.Handle(c, pgxlisten.HandlerFunc(func(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
			select {
			case notes <- n.Channel:
			default:
			}
			return nil
		}))
	}
	_ = l.Listen(ctx)
}
