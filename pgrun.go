// Package pgrun is a job and workflow engine that lives inside PostgreSQL.
//
// The job state machine, claiming, idempotent transitions and the lease reaper are
// PL/pgSQL functions and triggers in schema pgrun; this package embeds them
// ([Migrate] installs them) and offers [Client], a thin Go binding of the same SQL API
// that any other language can call (docs/sql-api.md):
//
//	client, err := pgrun.NewClient(pool, pgrun.Config{})
//	job, err := client.EnqueueTx(ctx, tx, "resize", ResizeArgs{W: 64}, pgrun.Queue("images"))
//
// enqueueing on the pool or inside the caller's own transaction, reading and listing
// jobs, cancelling and redriving them, queues, schedules, worker control, workflows
// and maintenance. Package runner executes jobs with Go handlers; package pgruntest
// helps test code that enqueues and handles jobs.
package pgrun

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlFiles holds the migrations (tables, types, indexes) and the function set
// (functions, triggers, views) that make up the engine.
//
//go:embed sql/migrations/*.sql sql/functions/*.sql
var sqlFiles embed.FS

// DB is what the client functions run their statements on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx. Passing a transaction makes the enqueue part of it: the job
// and its wake-up exist only if the transaction commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Notification channels the engine uses. Triggers and functions send on them inside
// the writing transaction, so a listener hears only about committed work.
const (
	// ChannelJobs carries a queue name whenever jobs become claimable in it.
	ChannelJobs = "pgrun_jobs"
	// ChannelCancel carries the id of a running job that was cancelled or timed out.
	ChannelCancel = "pgrun_cancel"
)
