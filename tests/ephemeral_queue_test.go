package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// An ephemeral queue deletes a job, with its events, in the statement that completes
// it; children (their parent counts them) and failed jobs are kept, and other queues
// are untouched.
func TestEphemeralQueueDeletesSucceededJobs(t *testing.T) {
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `select pgrun.set_queue('fleeting', ephemeral => true)`)
	require.NoError(t, err)
	plain, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	doomed, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	kept, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.Queue("lasting"))
	require.NoError(t, err)

	c := kitClaimN(t, b.pool, "fleeting", "w1", 2, "30 seconds")
	require.Len(t, c, 2)
	_, err = b.pool.Exec(b.ctx, `select pgrun.emit($1, 'note')`, plain.ID)
	require.NoError(t, err)
	var completed []int64
	rows, err := b.pool.Query(b.ctx, `select * from pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].id, c[0].attempt)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		completed = append(completed, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{plain.ID}, completed, "reported as completed")
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs where id = $1`, plain.ID).Scan(&n))
	require.Zero(t, n, "deleted as it succeeded")
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.job_events where job_id = $1`, plain.ID).Scan(&n))
	require.Zero(t, n, "with its events")

	_, err = b.pool.Exec(b.ctx, `select pgrun.fail_job($1, $2, '{"message": "no"}', false)`, c[1].id, c[1].attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, jobStatus(t, b, doomed.ID), "failures are kept")

	c = kitClaimN(t, b.pool, "lasting", "w1", 1, "30 seconds")
	_, err = b.pool.Exec(b.ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].id, c[0].attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, jobStatus(t, b, kept.ID), "other queues keep their history")

	// A parent in an ephemeral queue fans out: its children are kept until it is done.
	parent, err := pgrun.Enqueue(b.ctx, b.pool, "fan", nil, pgrun.Queue("fleeting"))
	require.NoError(t, err)
	c = kitClaimN(t, b.pool, "fleeting", "w1", 1, "30 seconds")
	require.Equal(t, parent.ID, c[0].id)
	_, err = b.pool.Exec(b.ctx, `select pgrun.defer_job($1, $2, '[{"kind": "noop", "queue": "fleeting"}]')`, c[0].id, c[0].attempt)
	require.NoError(t, err)
	c = kitClaimN(t, b.pool, "fleeting", "w1", 1, "30 seconds")
	_, err = b.pool.Exec(b.ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].id, c[0].attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, jobStatus(t, b, c[0].id), "a child is kept")
	require.Equal(t, pgrun.StatusSucceeded, jobStatus(t, b, parent.ID), "and its parent counted it")
}
