package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// injectDispatchFault makes every pending -> queued move of a DAG node fail while the
// table pgrun_test_fault has a row, standing in for any error inside a dispatch.
func injectDispatchFault(t *testing.T, b *testkit.DB) (clear func()) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `
		create table public.pgrun_test_fault (on_ boolean);
		insert into public.pgrun_test_fault values (true);
		create function public.pgrun_test_fault() returns trigger language plpgsql as $$
		begin
		  if exists (select 1 from public.pgrun_test_fault) then
		    raise exception 'injected dispatch fault';
		  end if;
		  return new;
		end $$;
		create trigger pgrun_test_fault before update of status on pgrun.jobs
		  for each row when (old.status = 'pending' and new.status = 'queued')
		  execute function public.pgrun_test_fault();`)
	require.NoError(t, err)
	return func() {
		_, err := b.Pool.Exec(b.Ctx, `delete from public.pgrun_test_fault`)
		require.NoError(t, err)
	}
}

// A dispatch that fails never rolls back the completion that caused it: the node's
// success commits, the dispatch waits in the outbox, maintain() retries it with
// backoff, and once it goes through the dependent is released exactly once.
func TestOutboxRetriesFailedDispatchOnce(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "two", `{"nodes": [{"name": "a", "kind": "x"}, {"name": "b", "kind": "x", "deps": ["a"]}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "two", nil, "")
	require.NoError(t, err)
	clear := injectDispatchFault(t, b)
	testkit.Report(t, b, claimOneClaimed(t, b), testkit.Outcome{Result: "a done"})

	states := testkit.NodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusSucceeded, states["a"], "the completion committed")
	require.Equal(t, pgrun.StatusPending, states["b"])
	var attempts int
	var lastError string
	var due time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select attempts, last_error, next_attempt_at from pgrun.outbox`).Scan(&attempts, &lastError, &due))
	require.Equal(t, 1, attempts)
	require.Contains(t, lastError, "injected dispatch fault")

	now := due.Add(time.Second)
	c := testkit.PinClock(t, b, now)
	var out string
	c.QueryRow(`select pgrun.maintain()::text`, nil, &out)
	require.Contains(t, out, `"outbox_retried": 1`)
	clear()
	c.Set(now.Add(2 * time.Hour))
	c.QueryRow(`select pgrun.maintain()::text`, nil, &out)
	require.Contains(t, out, `"outbox_dispatched": 1`)
	states = testkit.NodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusQueued, states["b"])

	// Dispatching again is a no-op: b's dependency count does not go below zero.
	var again bool
	var jobA int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select job_id from pgrun.run_status where run_id = $1 and node = 'a'`, run.ID).Scan(&jobA))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.dispatch($1)`, jobA).Scan(&again))
	require.False(t, again)
	var deps int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select deps_remaining from pgrun.run_status where run_id = $1 and node = 'b'`, run.ID).Scan(&deps))
	require.Zero(t, deps)
}

// A dispatch that keeps failing is flagged poison after its attempts, with an event
// on the job that says why.
func TestOutboxFlagsPoisonAfterRepeatedFailures(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "two", `{"nodes": [{"name": "a", "kind": "x"}, {"name": "b", "kind": "x", "deps": ["a"]}]}`)
	_, err := pgrun.StartRun(b.Ctx, b.Pool, "two", nil, "")
	require.NoError(t, err)
	injectDispatchFault(t, b)
	a := claimOneClaimed(t, b)
	testkit.Report(t, b, a, testkit.Outcome{Result: "a done"})

	now := time.Now().Add(time.Minute)
	c := testkit.PinClock(t, b, now)
	for range 10 {
		now = now.Add(2 * time.Hour)
		c.Set(now)
		c.Exec(`select pgrun.maintain()`)
	}
	var attempts int
	var poisoned *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select attempts, poisoned_at from pgrun.outbox`).Scan(&attempts, &poisoned))
	require.Equal(t, 5, attempts)
	require.NotNil(t, poisoned)
	evs, err := pgrun.Events(b.Ctx, b.Pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, "job.dispatch_poisoned", evs[len(evs)-1].Event)
	require.Contains(t, *evs[len(evs)-1].Message, "injected dispatch fault")
}
