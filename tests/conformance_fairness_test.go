package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// Fairness in the worker conformance suite (conformance_test.go): the round-robin
// across keys is the claim's (38_claim_keys.sql), so a worker in any language that
// claims with claim_jobs or claim_job gets it with no logic of its own.

// A queue with fair_by: key A holds 200 queued jobs, key B 10 enqueued after them and a
// job without a key; a worker of one slot claims them in turns, so B's 10 and the
// keyless job are all claimed before 24 of A's (the claim log's order; the Go runner
// claims many at once and buffers them, in the order the claim gives them), and A's
// jobs start in their own priority order.
func TestConformanceFairQueueTakesKeysInTurn(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		recordClaims(t, b)
		testkit.ExecAll(t, b, `select pgrun.set_queue('conf', fair_by => 'concurrency_key')`)
		enqueueKeyed(t, b, "conf", "A", 200, time.Hour, 1, 0)
		enqueueKeyed(t, b, "conf", "", 1, time.Minute)
		enqueueKeyed(t, b, "conf", "B", 10, 0)
		startAdapter(t, a, b, "conf", "conf-"+a.name)
		testkit.Eventually(t, time.Minute, "B's and the keyless jobs done", func() bool {
			var n int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'conf'
				and (concurrency_key = 'B' or concurrency_key is null) and status = 'succeeded'`).Scan(&n))
			return n == 11
		})
		claims := claimLog(t, b, "conf")
		last := max(lastOf(claims, "B", false), 0)
		for i, c := range claims {
			if c.Key == nil {
				last = max(last, i+1)
			}
		}
		require.LessOrEqual(t, claimedBefore(claims, last), 24, "B's and the keyless jobs claimed among the first: %s", keysOf(claims))
		// A's jobs in priority order, claim by claim (the jobs of one claim share its
		// instant, and the log has them in no particular order).
		highest := map[time.Time]int16{}
		var instants []time.Time
		for _, c := range claims {
			if c.Key != nil && *c.Key == "A" {
				if _, ok := highest[c.At]; !ok {
					instants = append(instants, c.At)
				}
				highest[c.At] = max(highest[c.At], c.Priority)
			}
		}
		for _, c := range claims {
			if c.Key != nil && *c.Key == "A" {
				for _, at := range instants {
					if at.Before(c.At) {
						require.LessOrEqual(t, highest[at], c.Priority, "an earlier claim took a less urgent job of A")
					}
				}
			}
		}
	})
}

// keysOf shows the keys of claims in order, for a failure's message.
func keysOf(claims []claimStart) string {
	s := ""
	for _, c := range claims[:min(len(claims), 40)] {
		k := "-"
		if c.Key != nil {
			k = *c.Key
		}
		s += fmt.Sprintf("%s ", k)
	}
	return s
}
