package pgrun

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// WorkerMode is an operator's switch for the runners of a host on a queue
// (pgrun.set_worker_control).
type WorkerMode string

// The modes of worker control.
const (
	// WorkerOn: claim as usual.
	WorkerOn WorkerMode = "on"
	// WorkerDrain: claim nothing more; jobs in flight finish.
	WorkerDrain WorkerMode = "drain"
	// WorkerOff: claim nothing, and put the host's jobs in flight back in their
	// queue at once, without spending an attempt; their handlers are cancelled.
	WorkerOff WorkerMode = "off"
)

// WorkerControl is one row of pgrun.worker_control: the mode set for a host on a
// queue ("*": every queue).
type WorkerControl struct {
	Host      string     `db:"host"`
	Queue     string     `db:"queue"`
	Mode      WorkerMode `db:"mode"`
	UpdatedAt time.Time  `db:"updated_at"`
}

// Worker is one row of the worker_status view: a registered runner (or a worker in
// another language that heartbeats).
type Worker struct {
	ID            string        `db:"id"`
	Host          string        `db:"host"`
	PID           int           `db:"pid"`
	State         string        `db:"state"` // running, draining, stopped
	Queues        []string      `db:"queues"`
	Models        []string      `db:"models"` // warm on it
	Version       *string       `db:"version"`
	StartedAt     time.Time     `db:"started_at"`
	LastSeen      time.Time     `db:"last_seen"`
	SinceSeen     time.Duration `db:"since_seen"`
	Cadence       time.Duration `db:"cadence"` // how often it heartbeats
	FlaggedDeadAt *time.Time    `db:"flagged_dead_at"`
	// Alive: not stopped, not flagged dead, heard from within three cadences.
	Alive bool `db:"alive"`
	// Kinds it has handlers for; nil: any.
	Kinds   []string `db:"kinds"`
	Running int64    `db:"running"` // jobs it holds
	// Liveness is "live" (Alive), "stopped" (it said so at shutdown) or "dead"
	// (silent for three cadences, or flagged), whether or not it held jobs.
	Liveness string `db:"liveness"`
}

// SetWorkerControl sets the mode of host's runners for queue ("*": every queue; the
// stricter of a queue's own mode and the "*" mode applies). Runners obey at their
// next claim; [WorkerOff] also takes their running jobs back at once.
func (c *Client) SetWorkerControl(ctx context.Context, host, queue string, mode WorkerMode) error {
	_, err := c.pool.Exec(ctx, sqlapi.SetWorkerControl, host, queue, string(mode))
	return dbError("worker control", err)
}

// WorkerControls returns every mode an operator set, by host and queue.
func (c *Client) WorkerControls(ctx context.Context) ([]WorkerControl, error) {
	rows, err := c.pool.Query(ctx, sqlapi.ListWorkerControl)
	if err != nil {
		return nil, dbError("worker controls", err)
	}
	wc, err := pgx.CollectRows(rows, pgx.RowToStructByName[WorkerControl])
	return wc, dbError("worker controls", err)
}

// Workers returns the registered workers, by id.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	rows, err := c.pool.Query(ctx, sqlapi.ListWorkers)
	if err != nil {
		return nil, dbError("workers", err)
	}
	ws, err := pgx.CollectRows(rows, pgx.RowToStructByName[Worker])
	return ws, dbError("workers", err)
}
