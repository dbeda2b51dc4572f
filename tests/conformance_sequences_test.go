package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The conformance suite's sequences (conformance_test.go has the adapters): the rules
// are SQL's, so a worker in any language that claims with claim_jobs runs a sequence's
// jobs one at a time, in enqueue order, and leaves a sequence held by a failure alone,
// with no logic of its own.

// Two workers of each adapter on a queue of three interleaved sequences: every job
// runs, and per sequence one at a time, in id order (the database's own record of
// starts and stops, seqLog), the next starting only after the one before finished.
// Both workers take next jobs by handoff as they complete the ones before (the Go
// runner, and the Python worker's few lines of SQL).
func TestConformanceSequencesRunInOrderOneAtATime(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		testkit.ExecAll(t, b, seqLog...)
		var ids []int64
		for i := range 18 {
			ids = append(ids, enqueueKind(t, b, "sleep", map[string]any{"ms": 30}, pgrun.SequenceKey(fmt.Sprintf("k%d", i%3))))
		}
		startAdapter(t, a, b, "conf", "conf-seq-1-"+a.name)
		startAdapter(t, a, b, "conf", "conf-seq-2-"+a.name)
		for _, id := range ids {
			waitStatus(t, b, id, pgrun.StatusSucceeded)
		}
		require.Equal(t, len(ids), checkSeqLog(t, b))
		for i := 3; i < len(ids); i++ {
			before, after := getJob(t, b, ids[i-3]), getJob(t, b, ids[i])
			require.False(t, after.StartedAt.Before(*before.FinishedAt), "job %d of a sequence started before job %d finished", ids[i], ids[i-3])
		}
		require.Equal(t, 2, countRows(t, b, `select count(distinct claimed_by) from pgrun.jobs`), "both workers served the sequences")
		require.Positive(t, countRows(t, b, `select count(*) from seq_log where event = 'start' and from_status = 'pending'`),
			"the workers took next jobs by handoff (complete_jobs' hand_over, handed_jobs)")
	})
}

// A head that fails for good holds its sequence: the worker leaves the next job
// alone (it is not claimable), and once the head is cancelled the next runs.
func TestConformanceSequenceHeldByAFailureGoesOnWhenCancelled(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a workerAdapter, b *testkit.DB) {
		head := enqueueKind(t, b, "fail", map[string]any{"permanent": true}, pgrun.SequenceKey("k"))
		next := enqueueKind(t, b, "echo", map[string]any{"n": 1}, pgrun.SequenceKey("k"))
		other := enqueueKind(t, b, "echo", map[string]any{"n": 2})
		startAdapter(t, a, b, "conf", "conf-seqfail-"+a.name)
		waitStatus(t, b, head, pgrun.StatusFailed)
		waitStatus(t, b, other, pgrun.StatusSucceeded)
		require.Equal(t, pgrun.StatusPending, testkit.JobStatus(t, b, next), "held behind the failed head")
		require.Equal(t, fmt.Sprintf("behind job %d of sequence k, which failed for good (retry or cancel it)", head),
			*holdReason(t, b.Pool, next))
		_, err := pgrun.Cancel(b.Ctx, b.Pool, head, "give up")
		require.NoError(t, err)
		waitStatus(t, b, next, pgrun.StatusSucceeded)
		require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, b, head))
	})
}
