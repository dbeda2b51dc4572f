package runner

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"github.com/pgrun/pgrun"
)

// listenReconnectDelay is how long the listener waits before reconnecting after
// its connection broke; the 1 s poll covers the gap.
const listenReconnectDelay = time.Second

// listen holds one connection LISTENing on the jobs and cancel channels (pgxlisten
// reconnects it) until ctx is done. Job notifications wake the queue's fetcher;
// cancel notifications go to the confirmer, which stops the job's handler if the
// database shows it is no longer this runner's to run.
func (r *Runner) listen(ctx context.Context) {
	connect := r.listenConnect(ctx) // nil: behind a pooler, poll only (pooler.go)
	if connect == nil {
		return
	}
	l := &pgxlisten.Listener{
		Connect: connect,
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil && !r.down.fail("listen", err) {
				r.log.Warn("listener", "err", err)
			}
		},
		ReconnectDelay: listenReconnectDelay,
	}
	l.Handle(pgrun.ChannelJobs, backlogWaker{r: r})
	l.Handle(pgrun.ChannelCancel, cancelHearer{r: r})
	_ = l.Listen(ctx)
}

// backlogWaker wakes the named queue's fetcher per notification, and every fetcher
// when the listener (re)connects, since notifications may have been missed.
type backlogWaker struct{ r *Runner }

func (w backlogWaker) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	w.r.wake(n.Payload)
	return nil
}

// A (re)connection is also the listener's news that the database is back: after an
// outage it has the runner settle (outage.go) at once.
func (w backlogWaker) HandleBacklog(context.Context, string, *pgx.Conn) error {
	w.r.down.ok(time.Now())
	w.r.wakeAll()
	return nil
}

// cancelHearer queues each cancel notification for the confirmer and, when the
// listener (re)connects, has every job this runner holds confirmed at once: a job
// cancelled before LISTEN was in place (at start, or while the listener reconnected)
// sent a notification nobody heard, and without this its handler would run on until
// the next lease renewal instead of stopping within a second.
type cancelHearer struct{ r *Runner }

func (h cancelHearer) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	// Payload "id:attempt" (a bare id means whichever attempt runs here). It is only
	// a hint: the confirmer checks the database before acting.
	idPart, attPart, _ := strings.Cut(n.Payload, ":")
	id, err := strconv.ParseInt(idPart, 10, 64)
	if err != nil || id <= 0 {
		return nil
	}
	attempt, err := strconv.Atoi(attPart)
	if attPart != "" && (err != nil || attempt < 1) {
		return nil
	}
	h.r.notifyCancel(cancelKey{id: id, attempt: attempt})
	return nil
}

func (h cancelHearer) HandleBacklog(ctx context.Context, _ string, _ *pgx.Conn) error {
	held := h.r.heldKeys()
	for len(held) > 0 {
		n := min(len(held), 1000)
		h.r.confirm(ctx, held[:n])
		held = held[n:]
	}
	return nil
}

// heldKeys names every attempt this runner holds: running and waiting in a buffer.
func (r *Runner) heldKeys() []cancelKey {
	r.mu.Lock()
	keys := make([]cancelKey, 0, len(r.running))
	for id, e := range r.running {
		keys = append(keys, cancelKey{id: id, attempt: e.job.Attempt})
	}
	fetchers := make([]*fetcher, 0, len(r.fetchers))
	for _, f := range r.fetchers {
		fetchers = append(fetchers, f)
	}
	r.mu.Unlock()
	for _, f := range fetchers {
		for _, j := range f.bufferedJobs() {
			keys = append(keys, cancelKey{id: j.ID, attempt: j.Attempt})
		}
	}
	return keys
}
