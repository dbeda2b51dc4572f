package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// A completion that queues a workflow's next node reports that node's queue in its
// own transaction (the setting pgrun.readied), so that the runner that completed it
// can wake its fetcher for that queue as soon as the completion commits; a plain
// completion reports none, and the report does not outlive the transaction.
func TestCompletionReportsTheQueuesItReadied(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "two", `{"nodes": [{"name": "a", "kind": "x", "queue": "first"},
		{"name": "b", "kind": "x", "queue": "second", "deps": ["a"]}]}`)
	_, err := pgrun.StartRun(b.Ctx, b.Pool, "two", nil, "")
	require.NoError(t, err)
	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "x", nil, pgrun.Queue("plain"))
	require.NoError(t, err)
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	complete := func(queue string) string {
		c := testkit.ClaimN(t, conn, queue, "w", 1, "1 hour")
		require.Len(t, c, 1)
		var readied string
		require.NoError(t, conn.QueryRow(b.Ctx, `select coalesce(current_setting('pgrun.readied', true), '')
			from (select count(*) from pgrun.complete_jobs($1, $2, null, 'w')) done`,
			[]int64{c[0].ID}, []int32{c[0].Attempt}).Scan(&readied))
		return readied
	}
	require.Equal(t, ",second,", complete("first"))
	var after string
	require.NoError(t, conn.QueryRow(b.Ctx, `select coalesce(current_setting('pgrun.readied', true), '')`).Scan(&after))
	require.Empty(t, after, "the report ends with its transaction")
	require.Empty(t, complete("plain"))
}
