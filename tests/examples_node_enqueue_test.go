package tests

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// examples/node-enqueue enqueues from Node with `pg` inside the caller's transaction:
// the order and its job commit together, and a rolled-back transaction leaves neither.
// (.ci/run installs the example's node_modules with npm ci.)
func TestNodeEnqueueInTheCallersTransaction(t *testing.T) {
	b := testkit.Setup(t)
	if _, err := os.Stat("../examples/node-enqueue/node_modules/pg"); err != nil {
		t.Fatalf("examples/node-enqueue has no node_modules: run npm ci --prefix examples/node-enqueue (%v)", err)
	}
	out, err := exec.Command("node", "../examples/node-enqueue/enqueue.js", b.URL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	id, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err, "%s", out)
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, "orders", j.Queue)
	require.JSONEq(t, `{"order": 1}`, string(j.Args))

	out, err = exec.Command("node", "../examples/node-enqueue/enqueue.js", b.URL, "--fail").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "rolled back")
	var orders, jobs int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (select count(*) from orders), (select count(*) from pgrun.jobs)`).Scan(&orders, &jobs))
	require.Equal(t, 1, orders, "the rolled-back order was kept")
	require.Equal(t, 1, jobs, "the rolled-back job was kept")
}
