package tests

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// resumeClaim claims n jobs of queue after key (priority, run_at, id), passing models
// as the worker's warm models (nil: none, NULL), and returns their ids in claim
// order.
func resumeClaim(t *testing.T, b *testkit.DB, queue string, n int, models []string, p int16, runAt time.Time, id int64) []int64 {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `select id from pgrun.claim_jobs($1, 'w1', $2, models => $3,
		after_priority => $4, after_run_at => $5, after_id => $6) order by priority, run_at, id`, queue, n, models, p, runAt, id)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// A claim resumed after a key takes, in order, the more urgent priorities' due jobs
// first, then what sorts after the key; it never re-takes what sorts before the key
// within the key's priority (those are found by a claim without a key).
func TestClaimResumesAfterKey(t *testing.T) {
	b := testkit.Setup(t)
	var backlog []*pgrun.Job
	for range 6 {
		j, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("resume"), pgrun.Priority(1))
		require.NoError(t, err)
		backlog = append(backlog, j)
	}
	first := testkit.ClaimN(t, b.Pool, "resume", "w1", 2, "30 seconds")
	require.Equal(t, []int64{backlog[0].ID, backlog[1].ID}, []int64{first[0].ID, first[1].ID})
	key := backlog[1]

	urgent, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("resume"), pgrun.Priority(0))
	require.NoError(t, err)
	early, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("resume"), pgrun.Priority(1),
		pgrun.RunAt(key.RunAt.Add(-time.Minute)))
	require.NoError(t, err)

	got := resumeClaim(t, b, "resume", 3, nil, key.Priority, key.RunAt, key.ID)
	require.Equal(t, []int64{urgent.ID, backlog[2].ID, backlog[3].ID}, got,
		"the more urgent job first, then the backlog after the key")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, early.ID), "below the key: left for a claim from the start")

	require.Len(t, testkit.ClaimN(t, b.Pool, "resume", "w1", 1, "30 seconds"), 1)
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, early.ID), "a claim from the start finds it first")

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('resume', 'w1', 1, after_id => 5)`)
	require.Equal(t, "22023", testkit.SQLState(err), "a partial key is refused: %v", err)
}

// A worker with a model cache and nothing warm passes an empty models list and
// resumes after its key like one without; with a model warm, the key is not used
// (the warm pass takes jobs out of key order), and the claim starts from the queue's
// start.
func TestClaimResumesWithNothingWarmOnly(t *testing.T) {
	b := testkit.Setup(t)
	var backlog []*pgrun.Job
	for range 4 {
		j, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("cache"), pgrun.Priority(1))
		require.NoError(t, err)
		backlog = append(backlog, j)
	}
	key := backlog[1] // as if claimed already: the key sorts after backlog[0]
	claim := func(models []string) []int64 {
		t.Helper()
		return resumeClaim(t, b, "cache", 1, models, key.Priority, key.RunAt, key.ID)
	}
	require.Equal(t, []int64{backlog[2].ID}, claim([]string{}), "nothing warm: resumed after the key")
	require.Equal(t, []int64{backlog[0].ID}, claim([]string{"m"}), "a model warm: from the queue's start")
}
