package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Run is one row of pgrun.runs: an execution of a DAG workflow (docs/workflows.md).
type Run struct {
	ID         int64           `db:"id"`
	Workflow   string          `db:"workflow"`
	Version    int             `db:"version"`
	Input      json.RawMessage `db:"input"`
	Status     string          `db:"status"` // running, succeeded, failed, cancelled
	UniqueKey  *string         `db:"unique_key"`
	Output     json.RawMessage `db:"output"`
	Error      json.RawMessage `db:"error"`
	CreatedAt  time.Time       `db:"created_at"`
	FinishedAt *time.Time      `db:"finished_at"`
	// Tenant is the run's tenant in the tenant mode; nil with the mode off.
	Tenant *string `db:"tenant"`
}

// RunNode is one node of a run, from the run_status view.
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

// Workflow is one version of a workflow definition, a row of pgrun.workflows.
type Workflow struct {
	Name      string          `db:"name"`
	Version   int             `db:"version"`
	Spec      json.RawMessage `db:"spec"` // {"nodes": [...]}, as DefineWorkflow stored it
	CreatedAt time.Time       `db:"created_at"`
}

// Workflow returns version version of workflow name (a run's Workflow and Version
// name the one it runs), or an error matching [ErrWorkflowNotFound].
func (c *Client) Workflow(ctx context.Context, name string, version int) (*Workflow, error) {
	rows, err := c.pool.Query(ctx, sqlapi.GetWorkflow, name, version)
	if err != nil {
		return nil, dbError("get workflow "+name, err)
	}
	w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Workflow])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, newError([]error{ErrWorkflowNotFound}, "workflow %s version %d not found", name, version)
	}
	return w, dbError("get workflow "+name, err)
}

// DefineWorkflow checks spec (a JSON object {"nodes": [...]}, see docs/workflows.md)
// and stores it as the next version of name (pgrun.define_workflow). Defining the
// newest spec again changes nothing. Returns the version.
func (c *Client) DefineWorkflow(ctx context.Context, name string, spec any) (int, error) {
	return defineWorkflow(ctx, c.pool, name, spec)
}

func defineWorkflow(ctx context.Context, db DB, name string, spec any) (int, error) {
	raw, err := marshalObject(spec)
	if err != nil {
		return 0, invalidInput("define workflow %s: %v", name, err)
	}
	var v int
	if err := db.QueryRow(ctx, sqlapi.DefineWorkflow, name, raw).Scan(&v); err != nil {
		return 0, dbError("define workflow "+name, err)
	}
	return v, nil
}

// StartRun starts a run of workflow's newest version with input (pgrun.start_run),
// creating every node's job atomically. With a uniqueKey held by a running run, that
// run is returned instead.
func (c *Client) StartRun(ctx context.Context, workflow string, input any, uniqueKey string) (*Run, error) {
	return startRun(ctx, c.pool, workflow, input, uniqueKey)
}

func startRun(ctx context.Context, db DB, workflow string, input any, uniqueKey string) (*Run, error) {
	raw, err := marshalObject(input)
	if err != nil {
		return nil, invalidInput("start %s: %v", workflow, err)
	}
	rows, err := db.Query(ctx, sqlapi.StartRun, workflow, raw, uniqueKey)
	if err != nil {
		return nil, dbError("start "+workflow, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if err != nil {
		return nil, dbError("start "+workflow, err)
	}
	return r, nil
}

// GetRun returns run id, or an error matching [ErrRunNotFound].
func (c *Client) GetRun(ctx context.Context, id int64) (*Run, error) {
	return getRun(ctx, c.pool, id)
}

func getRun(ctx context.Context, db DB, id int64) (*Run, error) {
	rows, err := db.Query(ctx, sqlapi.GetRun, id)
	if err != nil {
		return nil, dbError("get run", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, runNotFound(id, nil)
	}
	return r, dbError("get run", err)
}

// RunNodes returns the nodes of run id in creation order (none for an unknown run).
func (c *Client) RunNodes(ctx context.Context, id int64) ([]RunNode, error) {
	return runNodes(ctx, c.pool, id)
}

func runNodes(ctx context.Context, db DB, id int64) ([]RunNode, error) {
	rows, err := db.Query(ctx, sqlapi.RunNodes, id)
	if err != nil {
		return nil, dbError("nodes of run", err)
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByName[RunNode])
	return nodes, dbError("nodes of run", err)
}

// SubmitInput gives an input node its payload (pgrun.submit_input). It reports
// whether the node took it now (it was waiting) rather than keeping it for later. An
// unknown run gives [ErrRunNotFound]; a node that takes no input, [ErrInvalidInput].
func (c *Client) SubmitInput(ctx context.Context, runID int64, node string, payload any) (bool, error) {
	return submitInput(ctx, c.pool, runID, node, payload)
}

func submitInput(ctx context.Context, db DB, runID int64, node string, payload any) (bool, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return false, invalidInput("input for node %s of run %d: %v", node, runID, err)
	}
	var now bool
	if err := db.QueryRow(ctx, sqlapi.SubmitInput, runID, node, raw).Scan(&now); err != nil {
		return false, runError(runID, "input for node "+node+" of run", err)
	}
	return now, nil
}

// CancelRun cancels a running run and its unfinished nodes (pgrun.cancel_run). A run
// that already ended is returned unchanged with an error matching [ErrFinished].
func (c *Client) CancelRun(ctx context.Context, runID int64, reason string) (*Run, error) {
	return cancelRun(ctx, c.pool, runID, reason)
}

func cancelRun(ctx context.Context, db DB, runID int64, reason string) (*Run, error) {
	r, err := runTransition(ctx, db, "cancel run", runID, sqlapi.CancelRun, runID, reason)
	if errors.Is(err, errUnchanged) {
		return r, newError([]error{ErrFinished}, "run %d already ended (%s)", runID, r.Status)
	}
	return r, err
}

// RetryRun redrives a failed or cancelled run (pgrun.retry_run): every failed or
// cancelled node is retried and the run is running again. A running or succeeded run
// is returned unchanged with an error matching [ErrNotRetryable].
func (c *Client) RetryRun(ctx context.Context, runID int64) (*Run, error) {
	r, err := runTransition(ctx, c.pool, "retry run", runID, sqlapi.RetryRun, runID)
	if errors.Is(err, errUnchanged) {
		return r, newError([]error{ErrNotRetryable}, "run %d is %s: only failed and cancelled runs can be retried", runID, r.Status)
	}
	return r, err
}

// runTransition runs a statement returning the run, or no row when the run was not
// in a state it applies to; then the current run is returned with errUnchanged.
func runTransition(ctx context.Context, db DB, op string, runID int64, sql string, args ...any) (*Run, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err == nil {
		var r *Run
		r, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
		if err == nil {
			return r, nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			cur, err := getRun(ctx, db, runID)
			if err != nil {
				return nil, err
			}
			return cur, errUnchanged
		}
	}
	return nil, runError(runID, op, err)
}

// runError turns the SQL API's P0002 for a run into [ErrRunNotFound], and any other
// error into the client's form for op on run id.
func runError(id int64, op string, err error) error {
	if sqlState(err) == "P0002" {
		return runNotFound(id, err)
	}
	return dbError(fmt.Sprintf("%s %d", op, id), err)
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
