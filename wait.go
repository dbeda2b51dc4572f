package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// watchRenewal is how often Wait registers its interest again: a registration
// (pgrun.watch_job) lasts a day, and a renewal also reads the job's status, so a
// notification lost to a reconnect costs at most this long.
const watchRenewal = time.Hour

// EmitEvent sends durable event name with payload (marshalled to JSON; nil for
// none), for the caller's tenant: every job awaiting it (runner.AwaitEvent, or
// pgrun.await_event from any language) is queued again, and a job that awaits it
// later gets it at once. The first emit of a name wins: EmitEvent reports whether
// this one was it. pgrun.emit_event in SQL, which works inside any transaction.
func (c *Client) EmitEvent(ctx context.Context, name string, payload any) (bool, error) {
	var raw []byte
	if payload != nil {
		var err error
		if raw, err = json.Marshal(payload); err != nil {
			return false, fmt.Errorf("pgrun: emit event %q: encode the payload: %w", name, err)
		}
	}
	var first bool
	if err := c.pool.QueryRow(ctx, sqlapi.EmitEvent, name, raw).Scan(&first); err != nil {
		return false, dbError("emit event "+strconv.Quote(name), err)
	}
	return first, nil
}

// Wait blocks until job id has finished (succeeded, failed, cancelled or skipped)
// and returns it, or until ctx is done. It listens on channel pgrun_done on a
// connection of its own and registers its interest (pgrun.watch_job), so the job's
// finish is announced the moment it commits: no polling. Usable right after
// [Client.Enqueue] for request/response work. A job that has already finished is
// returned at once. An unknown job is an error matching [ErrNotFound].
//
// From another language: LISTEN pgrun_done; SELECT pgrun.watch_job(id) (the status
// if it has finished, else NULL); then wait for a notification whose payload is the
// id and read the job. A registration lasts a day; Wait renews it every hour.
func (c *Client) Wait(ctx context.Context, id int64) (*Job, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, dbError("wait", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, sqlapi.ListenDone); err != nil {
		return nil, dbError("wait", err)
	}
	defer func() {
		// Back to the pool without the subscription: a new context, since ctx may be
		// done; a connection that cannot say so is closed instead.
		if _, err := conn.Exec(context.WithoutCancel(ctx), sqlapi.UnlistenDone); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	want := strconv.FormatInt(id, 10)
	for {
		var status *string
		if err := conn.QueryRow(ctx, sqlapi.WatchJob, id).Scan(&status); err != nil {
			if sqlState(err) == "P0002" {
				return nil, jobNotFound(id, err)
			}
			return nil, dbError("wait", err)
		}
		if status != nil {
			return getJob(ctx, c.pool, id)
		}
		if done, err := waitForPayload(ctx, conn.Conn().WaitForNotification, want); err != nil {
			return nil, fmt.Errorf("pgrun: wait for job %d: %w", id, err)
		} else if done {
			return getJob(ctx, c.pool, id)
		}
	}
}

// waitForPayload waits for a notification carrying payload want, for at most
// watchRenewal: true when it came, false when it is time to register again.
func waitForPayload(ctx context.Context, next func(context.Context) (*pgconn.Notification, error), want string) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, watchRenewal)
	defer cancel()
	for {
		n, err := next(wctx)
		switch {
		case err == nil && n.Payload == want:
			return true, nil
		case err == nil:
			continue
		case ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded):
			return false, nil
		default:
			return false, err
		}
	}
}
