package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
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

// A runner that never polls starts every node of a chain once its upstream has
// completed: what wakes its fetchers is the completion itself (the completer, and the
// notification), not the poll.
func TestRunnerStartsDependentsWithoutPolling(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "chain", `{"nodes": [{"name": "a", "kind": "noop", "queue": "wf.one"},
		{"name": "b", "kind": "noop", "queue": "wf.two", "deps": ["a"]},
		{"name": "c", "kind": "noop", "queue": "wf.one", "deps": ["b"]}]}`)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"wf.one": {Workers: 4}, "wf.two": {Workers: 4}},
		PollInterval: time.Hour,
	})
	testkit.StartRunner(t, r)
	var runs []int64
	for range 20 {
		run, err := pgrun.StartRun(b.Ctx, b.Pool, "chain", nil, "")
		require.NoError(t, err)
		runs = append(runs, run.ID)
	}
	testkit.Eventually(t, 30*time.Second, "every run to succeed", func() bool {
		var left int
		require.NoError(t, b.Pool.QueryRow(context.Background(), `select count(*) from pgrun.runs
			where id = any ($1) and status <> 'succeeded'`, runs).Scan(&left))
		return left == 0
	})
	var early int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs d join pgrun.jobs u
		on u.run_id = d.run_id and ((u.node = 'a' and d.node = 'b') or (u.node = 'b' and d.node = 'c'))
		where d.run_id = any ($1) and d.started_at < u.finished_at`, runs).Scan(&early))
	require.Zero(t, early, "a node started before its upstream finished")
}
