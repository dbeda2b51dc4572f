package tests

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/pgruntest"
)

// approvalFlow is a workflow of a job, an input node after it, and a job after both.
const approvalFlow = `{"nodes": [
	{"name": "fetch", "kind": "fetch"},
	{"name": "approve", "input": true, "deps": ["fetch"]},
	{"name": "publish", "kind": "publish", "deps": ["approve"], "args": {"ok": {"$from": "approve.output.ok"}}}
]}`

// A workflow through the client: defined, started (once per unique key), its nodes
// listed, an input submitted, and a run that failed redriven; CancelRun ends a run
// and says so when it already has.
func TestClientWorkflow(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	v, err := c.DefineWorkflow(b.Ctx, "approval", json.RawMessage(approvalFlow))
	require.NoError(t, err)
	require.Equal(t, 1, v)
	v, err = c.DefineWorkflow(b.Ctx, "approval", json.RawMessage(approvalFlow))
	require.NoError(t, err)
	require.Equal(t, 1, v, "the same spec again is the same version")

	run, err := c.StartRun(b.Ctx, "approval", map[string]any{"url": "x"}, "doc-1")
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
	same, err := c.StartRun(b.Ctx, "approval", nil, "doc-1")
	require.NoError(t, err)
	require.Equal(t, run.ID, same.ID, "a running run holds its unique key")

	nodes, err := c.RunNodes(b.Ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"fetch", "approve", "publish"}, nodeNames(nodes))
	require.Equal(t, pgrun.StatusQueued, nodes[0].Status)
	require.Equal(t, pgrun.StatusPending, nodes[1].Status)

	now, err := c.SubmitInput(b.Ctx, run.ID, "approve", map[string]any{"ok": true})
	require.NoError(t, err)
	require.False(t, now, "kept until the node is reached")
	_, err = c.SubmitInput(b.Ctx, run.ID, "fetch", map[string]any{})
	requireInvalidInput(t, err, "is not an input node", "")
	_, err = c.SubmitInput(b.Ctx, 999999, "approve", nil)
	require.ErrorIs(t, err, pgrun.ErrRunNotFound)

	pgruntest.WorkOne(b.Ctx, t, b.Pool, "fetch", func(context.Context, *pgrun.Job) (any, error) { return nil, nil })
	failed := pgruntest.WorkOne(b.Ctx, t, b.Pool, "publish", func(_ context.Context, j *pgrun.Job) (any, error) {
		require.JSONEq(t, `{"ok": true}`, string(j.Args), "the input reached the next node")
		return nil, classError{"invalid_args"}
	})
	require.Equal(t, pgrun.StatusFailed, failed.Status)
	got, err := c.GetRun(b.Ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", got.Status)

	retried, err := c.RetryRun(b.Ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "running", retried.Status)
	_, err = c.RetryRun(b.Ctx, run.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable, "a running run")
	pgruntest.WorkOne(b.Ctx, t, b.Pool, "publish", func(context.Context, *pgrun.Job) (any, error) { return nil, nil })
	got, err = c.GetRun(b.Ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", got.Status)

	other, err := c.StartRun(b.Ctx, "approval", nil, "")
	require.NoError(t, err)
	cancelled, err := c.CancelRun(b.Ctx, other.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, "cancelled", cancelled.Status)
	_, err = c.CancelRun(b.Ctx, other.ID, "")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	require.EqualError(t, err, "pgrun: run "+itoa(other.ID)+" already ended (cancelled)")

	for _, call := range []func() error{
		func() error { _, err := c.GetRun(b.Ctx, 999999); return err },
		func() error { _, err := c.CancelRun(b.Ctx, 999999, ""); return err },
		func() error { _, err := c.RetryRun(b.Ctx, 999999); return err },
	} {
		err := call()
		require.ErrorIs(t, err, pgrun.ErrRunNotFound)
		require.EqualError(t, err, "pgrun: run 999999 not found")
	}
	_, err = c.StartRun(b.Ctx, "nosuch", nil, "")
	require.Error(t, err)
	require.False(t, errors.Is(err, pgrun.ErrInvalidInput))
	_, err = c.DefineWorkflow(b.Ctx, "broken", json.RawMessage(`{"nodes": []}`))
	requireInvalidInput(t, err, `"nodes"`, `Write {"nodes"`)
}

func nodeNames(nodes []pgrun.RunNode) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Node
	}
	return names
}

// classError is an error with a failure class, as runner's errors have.
type classError struct{ class string }

func (e classError) Error() string      { return e.class }
func (e classError) ErrorClass() string { return e.class }
