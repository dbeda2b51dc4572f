package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// claimParent enqueues and claims a coordinator job.
func claimParent(t *testing.T, b *testkit.DB) (int64, int) {
	t.Helper()
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "coordinator", nil, pgrun.Queue("coord"))
	require.NoError(t, err)
	var id int64
	var attempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs('coord', 'w', 1)`).Scan(&id, &attempt))
	return id, attempt
}

// Deferring inserts the children and parks the parent in one step: a bad child spec
// rejects the whole defer and leaves the parent running with no children.
func TestDeferIsAtomic(t *testing.T) {
	b := testkit.Setup(t)
	id, attempt := claimParent(t, b)
	before := testkit.RowJSON(t, b.Pool, id)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "part"}, {"kind": "part", "queue": "Bad Queue"}]')`, id, attempt)
	require.Equal(t, "22023", testkit.SQLState(err))
	require.Equal(t, before, testkit.RowJSON(t, b.Pool, id))
	var children int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1`, id).Scan(&children))
	require.Zero(t, children)

	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status from pgrun.defer_job($1, $2, '[{"kind": "part"}, {"kind": "part"}, {"kind": "part"}]')`, id, attempt).Scan(&status))
	require.Equal(t, "waiting", status)
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.EqualValues(t, 3, *j.ProgressTotal)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1 and status = 'queued'`, id).Scan(&children))
	require.Equal(t, 3, children)
	// A duplicate defer is stale.
	var isNull bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "part"}]') is null`, id, attempt).Scan(&isNull))
	require.True(t, isNull)
}

// Each child that succeeds moves the parent's progress; the parent succeeds with the
// last one.
func TestFanInCountsChildrenAndFinishesParent(t *testing.T) {
	b := testkit.Setup(t)
	id, attempt := claimParent(t, b)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "part"}, {"kind": "part"}, {"kind": "part"}]')`, id, attempt)
	require.NoError(t, err)
	n := 0
	testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome {
		n++
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.EqualValues(t, n-1, j.ProgressCurrent, "progress before child %d", n)
		return testkit.Succeed(c)
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.EqualValues(t, 3, j.ProgressCurrent)
	require.JSONEq(t, `{"children": 3, "children_failed": 0}`, string(j.Result))
}

// The parent fails as soon as the failed share reaches its failure_ratio, keeps the
// first three distinct child errors, and cancels the children still unfinished.
func TestFailureRatioFailsParentEarly(t *testing.T) {
	b := testkit.Setup(t)
	id, attempt := claimParent(t, b)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, (select jsonb_agg(jsonb_build_object('kind', 'part', 'args', jsonb_build_object('n', i))) from generate_series(1, 10) i), 0.3)`, id, attempt)
	require.NoError(t, err)
	// Fail children one by one: errors "e1", "e1", "e2" -> 3 of 10 = 0.3 -> parent fails.
	for i, msg := range []string{"e1", "e1", "e2"} {
		c := claimOneClaimed(t, b)
		testkit.Report(t, b, c, testkit.Outcome{Fail: msg, Permanent: true})
		if i < 2 {
			require.Equal(t, pgrun.StatusWaiting, testkit.JobStatus(t, b, id))
		}
	}
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Contains(t, string(j.Error), `"child_errors": ["e1", "e2"]`)
	var cancelled int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1 and status = 'cancelled'`, id).Scan(&cancelled))
	require.Equal(t, 7, cancelled)
}

// claimOneClaimed claims one job of queue default.
func claimOneClaimed(t *testing.T, b *testkit.DB) testkit.Claimed {
	t.Helper()
	var c testkit.Claimed
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt, kind from pgrun.claim_jobs('default', 'w', 1)`).Scan(&c.ID, &c.Attempt, &c.Kind))
	return c
}

// Cancelling a parent cancels its unfinished descendants, grandchildren included.
func TestCancelParentCascades(t *testing.T) {
	b := testkit.Setup(t)
	id, attempt := claimParent(t, b)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "part", "queue": "coord"}, {"kind": "part"}]')`, id, attempt)
	require.NoError(t, err)
	// The first child becomes a coordinator itself.
	var child int64
	var cattempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs('coord', 'w', 1)`).Scan(&child, &cattempt))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "grandchild"}]')`, child, cattempt)
	require.NoError(t, err)

	_, err = pgrun.Cancel(b.Ctx, b.Pool, id, "stop everything")
	require.NoError(t, err)
	var active int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status in ('pending', 'queued', 'running', 'waiting')`).Scan(&active))
	require.Zero(t, active)
	require.Equal(t, 4, testkit.CountStatus(t, b, pgrun.StatusCancelled))
}
