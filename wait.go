package pgrun

import (
	"context"
	"fmt"
	"strconv"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Wait blocks until job id has finished (succeeded, failed, cancelled or skipped)
// and returns it, or until ctx is done. It listens on channel pgrun_done on a
// connection of its own and registers its interest (pgrun.watch_job), so the job's
// finish is announced the moment it commits: no polling. Usable right after
// [Client.Enqueue] for request/response work. A job that has already finished is
// returned at once. An unknown job is an error matching [ErrNotFound].
//
// From another language: LISTEN pgrun_done; SELECT pgrun.watch_job(id) (the status
// if it has finished, else NULL); then wait for a notification whose payload is the
// id and read the job. A registration lasts a day.
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
	var status *string
	if err := conn.QueryRow(ctx, sqlapi.WatchJob, id).Scan(&status); err != nil {
		if sqlState(err) == "P0002" {
			return nil, jobNotFound(id, err)
		}
		return nil, dbError("wait", err)
	}
	want := strconv.FormatInt(id, 10)
	for status == nil {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgrun: wait for job %d: %w", id, err)
		}
		if n.Payload == want {
			break
		}
	}
	return getJob(ctx, c.pool, id)
}
