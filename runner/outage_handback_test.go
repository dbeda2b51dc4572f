package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A claim that committed but never reached its runner (the connection died with the
// answer in flight) is handed back as soon as the runner is through to the database
// again, not after its 30 s lease, and runs; the dead flag the outage earned the
// runner clears at once. The lost claim is made here by claiming under the runner's
// id; the outage by killing the runner's sessions.
func TestRunnerHandsBackALostClaimWhenItReconnects(t *testing.T) {
	b := testkit.Setup(t)
	victim := testdb.PoolFor(t, b.URL+"&application_name=victim")
	ran := make(chan pgrun.ClaimID, 1)
	r := testkit.NewRunner(victim, runner.Config{WorkerID: "w-lost", MaintenanceInterval: -1})
	testkit.Handle(t, r, "lost", func(_ context.Context, j *runner.Job[struct{}]) (any, error) {
		ran <- j.ClaimID
		return nil, nil
	})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "the runner to register", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.workers where id = 'w-lost'`).Scan(&n))
		return n == 1
	})
	// The outage is noticed by the runner's LISTEN connection breaking (idle pool
	// connections that die are replaced without an error), so kill only once it
	// listens on both channels.
	testkit.Eventually(t, 10*time.Second, "the runner to listen", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = 'victim' and state = 'idle'
			  and query ilike 'listen %'`).Scan(&n))
		return n == 1
	})

	// The lost claim: running under the runner's id, with the default 30 s lease. It is
	// claimed in a queue the runner does not serve, then moved to its queue, so that
	// the runner cannot have claimed it itself.
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('lost', queue => 'elsewhere')`)
	require.NoError(t, err)
	var id int64
	var lost pgrun.ClaimID
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, claim_id from pgrun.claim_jobs('elsewhere', 'w-lost', 1)`).Scan(&id, &lost))
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set queue = 'default' where id = $1`, id)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.workers set flagged_dead_at = now() where id = 'w-lost'`)
	require.NoError(t, err)

	began := time.Now()
	var killed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
		where datname = current_database() and application_name = 'victim'`).Scan(&killed))
	require.Positive(t, killed)

	var again pgrun.ClaimID
	select {
	case again = <-ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("the lost claim was not handed back within 10 s (job %d: %s)", id, testkit.JobStatus(t, b, id))
	}
	t.Logf("lost claim handed back and run %s after the outage", time.Since(began).Round(time.Millisecond))
	require.NotEqual(t, lost, again, "it ran under a claim of its own")
	testkit.Eventually(t, 10*time.Second, "the job to succeed", func() bool { return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, 2, j.Attempt)
	require.Zero(t, j.Failures, "the hand-back spent no attempt")
	require.Zero(t, j.LeaseExpiries, "it did not wait for its lease")
	evs, err := pgrun.Events(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, "job.released", evs[0].Event)
	var flagged *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select flagged_dead_at from pgrun.workers where id = 'w-lost'`).Scan(&flagged))
	require.Nil(t, flagged, "the dead flag cleared when the runner came back")
	require.EqualValues(t, 1, r.Stats().Outages)
}
