package runner

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// listenReconnectDelay is how long the listener waits between attempts to learn
// whether the pool goes through a pooler (pooler.go); the poll covers the gap.
const listenReconnectDelay = time.Second

// listen holds one connection LISTENing on the jobs and cancel channels (pgxlisten
// reconnects it) until ctx is done. Job notifications wake the queue's fetcher;
// cancel notifications go to the confirmer, which stops the job's handler if the
// database shows it is no longer this runner's to run.
//
// The same connection carries the runner's liveness (bindSession): held open for the
// runner's life, it holds the worker's session lock, so that the database sees the
// runner die the moment its process does.
//
// A connection that broke is replaced at once: the first attempt waits for nothing,
// so that the session lock is taken again before maintenance can take the gap for a
// death (pgrun.session_confirm). Attempts that fail wait outageWait, jittered from
// about 50 ms up to 2 s, and the first that gets through (HandleBacklog, once LISTEN
// is in place) ends the outage for the whole runner, waking its fetchers.
func (r *Runner) listen(ctx context.Context) {
	connect := r.listenConnect(ctx) // nil: behind a pooler, poll only (pooler.go)
	if connect == nil {
		return
	}
	var attempts atomic.Int64
	l := &pgxlisten.Listener{
		Connect: r.listenRetry(connect, &attempts),
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil && !r.down.fail("listen", err) {
				r.log.Warn("listener", "err", err)
			}
		},
		// Negative: no wait of pgxlisten's own between attempts; listenRetry waits.
		ReconnectDelay: -1,
	}
	l.Handle(pgrun.ChannelJobs, backlogWaker{r: r, attempts: &attempts})
	l.Handle(pgrun.ChannelCancel, cancelHearer{r: r})
	_ = l.Listen(ctx)
}

// listenRetry wraps connect with the listener's waits between attempts and the
// session binding. attempts counts them from the last time LISTEN was in place
// (backlogWaker resets it): a connection that is made and then refuses LISTEN (a
// standby) is retried with waits too, not in a tight loop.
func (r *Runner) listenRetry(connect func(context.Context) (*pgx.Conn, error), attempts *atomic.Int64) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		if n := attempts.Add(1) - 1; n > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(outageWait(int(n - 1))):
			}
		}
		conn, err := connect(ctx)
		if err != nil {
			return nil, err
		}
		if err := r.bindSession(ctx, conn); err != nil {
			conn.Close(ctx)
			return nil, err
		}
		return conn, nil
	}
}

// backlogWaker wakes the named queue's fetcher per notification, and every fetcher
// when the listener (re)connects, since notifications may have been missed.
type backlogWaker struct {
	r        *Runner
	attempts *atomic.Int64 // the listener's connection attempts (listenRetry)
}

func (w backlogWaker) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	w.r.wake(n.Payload)
	return nil
}

// A (re)connection is also the listener's news that the database is back: after an
// outage it has the runner settle (outage.go) at once.
func (w backlogWaker) HandleBacklog(context.Context, string, *pgx.Conn) error {
	w.attempts.Store(0)
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

// bindSession ties this runner's liveness to conn, the listener's connection, which
// it holds for its life (pgrun.bind_worker_session: a session-level advisory lock on
// its worker id). When this process dies, the server ends the session, the lock goes
// with it, and maintenance hands the runner's jobs back within a round or two
// (pgrun.reap_lost_sessions) instead of waiting out their leases. Where no lock can
// be held (the connection goes through a pooler; another session holds it; an error
// other than an unreachable database) the runner goes on without one, and its
// leases bound how soon its jobs come back if it dies. It returns an error only for
// an unreachable database: then the connection is no good and is made again.
func (r *Runner) bindSession(ctx context.Context, conn *pgx.Conn) error {
	bind := func() (state string, err error) {
		err = conn.QueryRow(ctx, sqlapi.BindWorkerSession, r.cfg.WorkerID, int32(conn.PgConn().PID())).Scan(&state)
		return state, err
	}
	state, err := bind()
	if err == nil && state == "unregistered" {
		// The heartbeat Run sends before anything else did not get through.
		r.heartbeat(ctx, "running")
		state, err = bind()
	}
	if err != nil {
		if unreachable(err) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("could not tie this runner's liveness to its database session; if it dies, its leases bound how soon its jobs come back",
			"err", err)
		return nil
	}
	switch state {
	case "bound":
		r.log.Debug("liveness bound to the listen session", "backend_pid", conn.PgConn().PID())
	case "revived":
		// Its jobs were handed back while the session was gone: renewing now tells
		// their handlers (ErrLeaseLost) instead of at the next renewal.
		r.log.Warn("this runner's database session had been seen gone and it was judged dead: the jobs it held were handed back, and their handlers are stopped")
		r.renew(ctx)
	case "held":
		r.log.Warn("another session holds this runner's session lock (an earlier connection the server has not yet seen close, or a worker id that hashes alike); " +
			"until the listener reconnects, if it dies its leases bound how soon its jobs come back")
	case "pooled":
		r.log.Info("the listen connection goes through a pooler, where no session lock can be held; if this runner dies, its leases bound how soon its jobs come back")
	default:
		r.log.Warn("liveness not bound to the listen session", "state", state)
	}
	return nil
}
