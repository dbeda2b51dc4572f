package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// An ephemeral queue deletes a job, with its events, in the statement that completes
// it; children (their parent counts them) and failed jobs are kept, and other queues
// are untouched.
func TestEphemeralQueueDeletesSucceededJobs(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('fleeting', ephemeral => true)`)
	require.NoError(t, err)
	plain, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	doomed, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	kept, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("lasting"))
	require.NoError(t, err)

	c := testkit.ClaimN(t, b.Pool, "fleeting", "w1", 2, "30 seconds")
	require.Len(t, c, 2)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.emit($1, 'note')`, plain.ID)
	require.NoError(t, err)
	var completed []int64
	rows, err := b.Pool.Query(b.Ctx, `select * from pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		completed = append(completed, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{plain.ID}, completed, "reported as completed")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where id = $1`, plain.ID).Scan(&n))
	require.Zero(t, n, "deleted as it succeeded")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events where job_id = $1`, plain.ID).Scan(&n))
	require.Zero(t, n, "with its events")

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.fail_job($1, $2, '{"message": "no"}', false)`, c[1].ID, c[1].Attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, testkit.JobStatus(t, b, doomed.ID), "failures are kept")

	c = testkit.ClaimN(t, b.Pool, "lasting", "w1", 1, "30 seconds")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, kept.ID), "other queues keep their history")

	// A parent in an ephemeral queue fans out: its children are kept until it is done.
	parent, err := pgrun.Enqueue(b.Ctx, b.Pool, "fan", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	c = testkit.ClaimN(t, b.Pool, "fleeting", "w1", 1, "30 seconds")
	require.Equal(t, parent.ID, c[0].ID)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "noop", "queue": "fleeting"}]')`, c[0].ID, c[0].Attempt)
	require.NoError(t, err)
	c = testkit.ClaimN(t, b.Pool, "fleeting", "w1", 1, "30 seconds")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, c[0].ID), "a child is kept")
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, parent.ID), "and its parent counted it")
}
