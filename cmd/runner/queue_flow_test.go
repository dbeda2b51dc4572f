package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `runner queue set` takes the flow control settings (fair_by, key_rate_limit and
// key_rate_period, priority_aging, sequence_on_failure), `runner queue list` shows
// them with their use (jobs held by their sequence, keys at their limit), and
// `runner job why` says why a queued job is not claimed.
func TestQueueFlowSettingsAndJobWhy(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("queue", "set", "api", "--fair-by", "concurrency_key", "--key-rate-limit", "2",
		"--key-rate-period", "1m", "--priority-aging", "30s", "--sequence-on-failure", "continue")
	require.NoError(t, err)
	for _, line := range []string{"fair by           concurrency_key", "key rate limit    2/1m0s",
		"priority aging    30s", "sequence on failure  continue"} {
		require.Contains(t, squash(out), squash(line))
	}
	_, err = c.run("queue", "set", "api", "--fair-by", "kind")
	require.ErrorContains(t, err, "fair_by 'kind' of queue api is not valid")

	for range 3 {
		_, err = c.run("job", "enqueue", "noop", "--queue", "api", "--concurrency-key", "acct")
		require.NoError(t, err)
	}
	_, err = pool.Exec(context.Background(), `select count(*) from pgrun.claim_jobs('api', 'w', 10)`)
	require.NoError(t, err)
	out, err = c.run("queue", "list")
	require.NoError(t, err)
	require.Contains(t, out, "FAIR BY")
	require.Contains(t, out, "KEYS AT LIMIT")
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "api ") {
			row = squash(l)
		}
	}
	require.Contains(t, row, "2/1m0s (1 key) concurrency_key 30s continue 0 1", "key rate in use by one key, at its limit")

	var id string
	require.NoError(t, pool.QueryRow(context.Background(), `select min(id)::text from pgrun.jobs where status = 'queued'`).Scan(&id))
	out, err = c.run("job", "why", id)
	require.NoError(t, err)
	require.Contains(t, out, "the rate window of key acct is full (2/2) until")
	out, err = c.run("job", "get", id)
	require.NoError(t, err)
	require.Contains(t, out, "not claimed")
}

// squash collapses runs of spaces, so a table's alignment does not matter to a test.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
