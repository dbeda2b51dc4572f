package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Schedule is one row of pgrun.schedules: a cron schedule that maintain() fires,
// enqueueing one job per slot (docs/operations.md).
type Schedule struct {
	Name       string          `db:"name"`
	Cron       string          `db:"cron"`
	Kind       string          `db:"kind"`
	Args       json.RawMessage `db:"args"`
	Queue      string          `db:"queue"`
	Timezone   string          `db:"timezone"`
	Enabled    bool            `db:"enabled"`
	NextFireAt *time.Time      `db:"next_fire_at"`
	LastFireAt *time.Time      `db:"last_fire_at"`
	LastJobID  *int64          `db:"last_job_id"`
	CreatedAt  time.Time       `db:"created_at"`
	UpdatedAt  time.Time       `db:"updated_at"`
}

// ScheduleSpec describes a schedule for [Client.SetSchedule].
type ScheduleSpec struct {
	// Name identifies the schedule: 1 to 63 characters from a-z, 0-9, _ . : -.
	Name string
	// Cron is a five-field cron expression ("0 2 * * *") or a shorthand such as
	// "@hourly" or "@every 30s".
	Cron string
	// Kind of the jobs it enqueues. Empty: the kind of Args ([JobArgs]).
	Kind string
	// Args of every job, marshalled to a JSON object (nil: {}).
	Args any
	// Queue the jobs go to. Empty: the client's Config.Queue, else "default".
	Queue string
	// Timezone the cron fields are read in, a name from pg_timezone_names. Empty:
	// UTC.
	Timezone string
	// Disabled stores the schedule paused.
	Disabled bool
}

// SetSchedule creates or replaces schedule s.Name (pgrun.set_schedule); its next
// fire time is computed from now. Returns the schedule.
func (c *Client) SetSchedule(ctx context.Context, s ScheduleSpec) (*Schedule, error) {
	if s.Kind == "" {
		s.Kind, _ = KindOf(s.Args)
	}
	if s.Queue == "" {
		s.Queue = c.cfg.Queue
	}
	args, err := marshalObject(s.Args)
	if err != nil {
		return nil, invalidInput("set schedule %s: %v", s.Name, err)
	}
	return c.scheduleCall(ctx, "set schedule", s.Name, sqlapi.SetSchedule,
		s.Name, s.Cron, s.Kind, args, nullText(s.Queue), nullText(s.Timezone), !s.Disabled)
}

// DropSchedule removes schedule name; an unknown name gives [ErrScheduleNotFound].
func (c *Client) DropSchedule(ctx context.Context, name string) error {
	_, err := c.pool.Exec(ctx, sqlapi.DropSchedule, name)
	if sqlState(err) == "P0002" {
		return newError([]error{ErrScheduleNotFound, err}, "schedule %q not found", name)
	}
	return dbError("drop schedule "+name, err)
}

// PauseSchedule stops schedule name firing and keeps everything else; pausing twice
// is harmless. An unknown name gives [ErrScheduleNotFound].
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return c.scheduleCall(ctx, "pause schedule", name, sqlapi.PauseSchedule, name)
}

// ResumeSchedule lets paused schedule name fire again from its next slot: the slots
// missed while it was paused do not fire.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return c.scheduleCall(ctx, "resume schedule", name, sqlapi.ResumeSchedule, name)
}

// Schedules returns every schedule, by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	rows, err := c.pool.Query(ctx, sqlapi.ListSchedules)
	if err != nil {
		return nil, dbError("schedules", err)
	}
	ss, err := pgx.CollectRows(rows, pgx.RowToStructByName[Schedule])
	return ss, dbError("schedules", err)
}

// scheduleCall runs a statement returning one row of pgrun.schedules.
func (c *Client) scheduleCall(ctx context.Context, op, name, sql string, args ...any) (*Schedule, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err == nil {
		var s *Schedule
		s, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Schedule])
		if err == nil {
			return s, nil
		}
	}
	switch {
	case sqlState(err) == "P0002":
		return nil, newError([]error{ErrScheduleNotFound, err}, "schedule %q not found", name)
	case errors.Is(err, pgx.ErrNoRows):
		return nil, newError([]error{ErrScheduleNotFound}, "schedule %q not found", name)
	}
	return nil, dbError(op+" "+name, err)
}
