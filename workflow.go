package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrRunNotFound: no run has that id.
var ErrRunNotFound = errors.New("pgrun: run not found")

// Run is one row of pgrun.runs: an execution of a DAG workflow.
type Run struct {
	ID         int64           `db:"id"`
	Workflow   string          `db:"workflow"`
	Version    int             `db:"version"`
	Input      json.RawMessage `db:"input"`
	Status     string          `db:"status"`
	UniqueKey  *string         `db:"unique_key"`
	Output     json.RawMessage `db:"output"`
	Error      json.RawMessage `db:"error"`
	CreatedAt  time.Time       `db:"created_at"`
	FinishedAt *time.Time      `db:"finished_at"`
}

const runColumns = `id, workflow, version, input, status::text as status, unique_key, output, error, created_at, finished_at`

// RunNode is one node of a run, from pgrun.run_status.
type RunNode struct {
	Node            string     `db:"node"`
	JobID           int64      `db:"job_id"`
	Kind            string     `db:"kind"`
	Status          JobStatus  `db:"status"`
	DepsRemaining   int        `db:"deps_remaining"`
	Attempt         int        `db:"attempt"`
	ProgressCurrent int64      `db:"progress_current"`
	ProgressTotal   *int64     `db:"progress_total"`
	StartedAt       *time.Time `db:"started_at"`
	FinishedAt      *time.Time `db:"finished_at"`
	ErrorClass      *string    `db:"error_class"`
	ErrorMessage    *string    `db:"error_message"`
}

// DefineWorkflow checks spec (a JSON object {"nodes": [...]}, see docs/workflows.md)
// and stores it as the next version of name (pgrun.define_workflow). Defining the
// newest spec again changes nothing. Returns the version.
func DefineWorkflow(ctx context.Context, db DB, name string, spec any) (int, error) {
	raw, err := marshalObject(spec)
	if err != nil {
		return 0, fmt.Errorf("pgrun: define workflow %s: %w", name, err)
	}
	var v int
	if err := db.QueryRow(ctx, `select pgrun.define_workflow($1, $2::jsonb)`, name, raw).Scan(&v); err != nil {
		return 0, fmt.Errorf("pgrun: define workflow %s: %w", name, err)
	}
	return v, nil
}

// StartRun starts a run of workflow's newest version with input (pgrun.start_run),
// creating every node's job atomically. With a uniqueKey held by a running run, that
// run is returned instead.
func StartRun(ctx context.Context, db DB, workflow string, input any, uniqueKey string) (*Run, error) {
	raw, err := marshalObject(input)
	if err != nil {
		return nil, fmt.Errorf("pgrun: start %s: %w", workflow, err)
	}
	rows, err := db.Query(ctx, `select `+runColumns+` from pgrun.start_run($1, $2::jsonb, nullif($3, ''))`, workflow, raw, uniqueKey)
	if err != nil {
		return nil, fmt.Errorf("pgrun: start %s: %w", workflow, err)
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
}

// GetRun returns run id, or [ErrRunNotFound].
func GetRun(ctx context.Context, db DB, id int64) (*Run, error) {
	rows, err := db.Query(ctx, `select `+runColumns+` from pgrun.runs where id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("pgrun: run %d: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %d: %w", id, ErrRunNotFound)
	}
	return r, err
}

// RunNodes returns the nodes of run id in creation order.
func RunNodes(ctx context.Context, db DB, id int64) ([]RunNode, error) {
	rows, err := db.Query(ctx, `select node, job_id, kind, status::text as status, deps_remaining, attempt,
		progress_current, progress_total, started_at, finished_at, error_class, error_message
		from pgrun.run_status where run_id = $1 order by job_id`, id)
	if err != nil {
		return nil, fmt.Errorf("pgrun: nodes of run %d: %w", id, err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[RunNode])
}

// SubmitInput gives an input node its payload (pgrun.submit_input). It reports
// whether the node took it now (it was waiting) rather than keeping it for later.
func SubmitInput(ctx context.Context, db DB, runID int64, node string, payload any) (bool, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return false, fmt.Errorf("pgrun: input for %s: %w", node, err)
	}
	var now bool
	if err := db.QueryRow(ctx, `select pgrun.submit_input($1, $2, $3::jsonb)`, runID, node, raw).Scan(&now); err != nil {
		return false, runNotFound(runID, fmt.Errorf("pgrun: input for node %s of run %d: %w", node, runID, err))
	}
	return now, nil
}

// CancelRun cancels a running run and its unfinished nodes (pgrun.cancel_run). A run
// that already ended is returned unchanged with [ErrFinished].
func CancelRun(ctx context.Context, db DB, runID int64, reason string) (*Run, error) {
	rows, err := db.Query(ctx, `select `+runColumns+` from pgrun.cancel_run($1, nullif($2, '')) where id is not null`, runID, reason)
	if err != nil {
		return nil, runNotFound(runID, fmt.Errorf("pgrun: cancel run %d: %w", runID, err))
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, runNotFound(runID, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := GetRun(ctx, db, runID)
		if gerr != nil {
			return nil, gerr
		}
		return cur, fmt.Errorf("run %d is %s: %w", runID, cur.Status, ErrFinished)
	}
	return r, err
}

// marshalObject encodes v as JSON, passing json.RawMessage and []byte through.
func marshalObject(v any) ([]byte, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return x, nil
	case []byte:
		return x, nil
	case nil:
		return []byte("{}"), nil
	}
	return json.Marshal(v)
}

// runNotFound turns the SQL API's P0002 for a run into [ErrRunNotFound].
func runNotFound(id int64, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "P0002" {
		return fmt.Errorf("run %d: %w", id, ErrRunNotFound)
	}
	return err
}
