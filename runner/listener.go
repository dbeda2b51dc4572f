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
	l.Handle(pgrun.ChannelCancel, pgxlisten.HandlerFunc(
		func(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
			// Payload "id:attempt" (a bare id means whichever attempt runs here). It
			// is only a hint: the confirmer checks the database before acting.
			idPart, attPart, _ := strings.Cut(n.Payload, ":")
			id, err := strconv.ParseInt(idPart, 10, 64)
			if err != nil || id <= 0 {
				return nil
			}
			attempt, err := strconv.Atoi(attPart)
			if attPart != "" && (err != nil || attempt < 1) {
				return nil
			}
			r.notifyCancel(cancelKey{id: id, attempt: attempt})
			return nil
		}))
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
