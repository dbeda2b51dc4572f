package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// submit_input on a run that has ended (succeeded, failed or cancelled) is refused
// with 55000, a message naming the run and its status, and a HINT; nothing is written.
//
// Was a BUG (fixed): the payload was stored in run_inputs for a run that would never
// read it, and submit_input returned false as if it were kept for later.
func TestSubmitInputToAnEndedRunIsRefused(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "gate", `{"nodes": [
	  {"name": "a", "kind": "work", "queue": "qa"},
	  {"name": "ask", "input": true, "deps": ["a"]},
	  {"name": "never", "input": true, "deps": ["ask"], "skip_if": {"$eq": [1, 1]}}
	]}`)
	start := func() int64 {
		run, err := pgrun.StartRun(b.Ctx, b.Pool, "gate", nil, "")
		require.NoError(t, err)
		return run.ID
	}
	cancelled := start()
	_, err := pgrun.CancelRun(b.Ctx, b.Pool, cancelled, "")
	require.NoError(t, err)
	failed := start()
	testkit.Report(t, b, dagClaim(t, b, "qa"), testkit.Outcome{Fail: "broke", Permanent: true})
	succeeded := start()
	testkit.Report(t, b, dagClaim(t, b, "qa"), testkit.Outcome{Result: 1})
	_, err = pgrun.SubmitInput(b.Ctx, b.Pool, succeeded, "ask", true)
	require.NoError(t, err)

	for id, status := range map[int64]string{cancelled: "cancelled", failed: "failed", succeeded: "succeeded"} {
		require.Equal(t, status, dagRun(t, b, id).Status)
		var before int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.run_inputs where run_id = $1`, id).Scan(&before))
		_, err := pgrun.SubmitInput(b.Ctx, b.Pool, id, "never", map[string]any{"ok": true})
		require.Equal(t, "55000", testkit.SQLState(err), status)
		pe := testkit.PgError(t, err, status)
		require.Equal(t, fmt.Sprintf("run %d is %s: it takes no more input", id, status), pe.Message)
		require.NotEmpty(t, pe.Hint)
		var after int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.run_inputs where run_id = $1`, id).Scan(&after))
		require.Equal(t, before, after, "%s: nothing written", status)
	}
}
