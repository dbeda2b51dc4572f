package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `runner queue show` names what `queue list` only counts: the key at its limit with
// its use, the sequence a failure holds with why its next job waits, and why the due
// jobs are not claimed.
func TestQueueShowSaysWhatHoldsTheQueue(t *testing.T) {
	c, pool := newCLI(t)
	ctx := context.Background()
	_, err := c.run("queue", "set", "api", "--concurrency-limit", "1", "--key-rate-limit", "5", "--key-rate-period", "1h",
		"--fair-by", "concurrency_key")
	require.NoError(t, err)
	for _, stmt := range []string{
		`select pgrun.worker_heartbeat('w', 'h', 1, array['api'])`,
		`select pgrun.enqueue_job('noop', queue => 'api', concurrency_key => 'acct') from generate_series(1, 3)`,
		`select pgrun.enqueue_job('ship', queue => 'api', sequence_key => 'order:9', max_attempts => 1)`,
		`select pgrun.enqueue_job('ship', queue => 'api', sequence_key => 'order:9', max_attempts => 1)`,
		`select count(*) from pgrun.claim_jobs('api', 'w', 10)`,
		`select pgrun.fail_job(id, attempt, '{"message": "declined"}', false) from pgrun.jobs
		   where sequence_key = 'order:9' and status = 'running'`,
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	var head int64
	require.NoError(t, pool.QueryRow(ctx, `select id from pgrun.jobs where sequence_key = 'order:9' and status = 'failed'`).Scan(&head))

	out, err := c.run("queue", "show", "api")
	require.NoError(t, err)
	s := squash(out)
	require.Contains(t, s, "per key, running 1 (1 key)")
	require.Contains(t, s, "per key, rate 5/1h0m0s (1 key)")
	require.Contains(t, s, "fair by concurrency_key")
	require.Regexp(t, `acct 1/1 1/5 in (59m\d+s|1h0m0s) 0 2`, s, "the key at its limit: running, rate window, room, queued")
	require.Contains(t, s, fmt.Sprintf("order:9 %d (failed) 1 %d behind job %d of sequence order:9, which failed for good",
		head, head+1, head))
	require.Contains(t, s, "concurrency key acct is at its limit (1/1 running)")

	out, err = c.run("queue", "list")
	require.NoError(t, err)
	require.Contains(t, out, "runner queue show QUEUE")
	_, err = c.run("queue", "show", "nope")
	require.ErrorContains(t, err, `queue "nope" not found`)
	_, err = c.run("queue", "show", "api", "--rows", "0")
	require.ErrorContains(t, err, "--rows 0 is not valid")
	require.False(t, strings.Contains(out, "pgrun."), "no SQL in the output")
}
