package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// fanInParent enqueues and claims a coordinator, defers it to n children of kind
// "part" in queue "kids" with failure_ratio, and returns the parent's id.
func fanInParent(t *testing.T, b *testkit.DB, n int, ratio float64) int64 {
	t.Helper()
	id, attempt := claimParent(t, b)
	children := make([]map[string]any, n)
	for i := range children {
		children[i] = map[string]any{"kind": "part", "queue": "kids"}
	}
	spec, err := json.Marshal(children)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, $3::jsonb, $4)`, id, attempt, spec, ratio)
	require.NoError(t, err)
	return id
}

// recordTransitions keeps, in public.pgrun_test_transitions, every status change of
// the jobs the test then asks about: an observer of its own, so that "finished once"
// is counted rather than inferred from the final row.
func recordTransitions(t *testing.T, b *testkit.DB) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `
		create table public.pgrun_test_transitions (job_id bigint, old_status text, new_status text);
		create function public.pgrun_test_transitions() returns trigger language plpgsql as $$
		begin
		  insert into public.pgrun_test_transitions values (new.id, old.status, new.status);
		  return null;
		end $$;
		create trigger pgrun_test_transitions after update of status on pgrun.jobs
		  for each row when (old.status is distinct from new.status and new.parent_id is null)
		  execute function public.pgrun_test_transitions();`)
	require.NoError(t, err)
}

// statusChanges lists job id's recorded status changes, "old->new", in order.
func statusChanges(t *testing.T, b *testkit.DB, id int64) []string {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `select old_status || '->' || new_status from public.pgrun_test_transitions
		where job_id = $1 order by ctid`, id)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// inParallel runs each fn at once from its own goroutine (each call takes a pool
// connection of its own) and waits for all of them.
func inParallel(t *testing.T, fns ...func() error) {
	t.Helper()
	start := make(chan struct{})
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn()
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}
}

// execRetried runs sql as the runner reports outcomes: a deadlock or serialization
// failure is tried again (a parent failing cancels its children while another
// transaction finishes some of them, and one of the two is chosen to go back).
func execRetried(b *testkit.DB, sql string, args ...any) error {
	for {
		_, err := b.Pool.Exec(b.Ctx, sql, args...)
		if s := testkit.SQLState(err); s != "40P01" && s != "40001" {
			return err
		}
	}
}

// completeBatch records claims as succeeded with one complete_jobs call.
func completeBatch(b *testkit.DB, batch []testkit.Claim) func() error {
	return func() error {
		ids := make([]int64, len(batch))
		attempts := make([]int32, len(batch))
		for i, c := range batch {
			ids[i], attempts[i] = c.ID, c.Attempt
		}
		return execRetried(b, `select pgrun.complete_jobs($1, $2, null, 'w')`, ids, attempts)
	}
}

// failEach fails claims one fail_job call at a time, for good, each with one of
// three messages.
func failEach(b *testkit.DB, claims []testkit.Claim) func() error {
	return func() error {
		for _, c := range claims {
			msg := fmt.Sprintf(`{"message": "broke %d"}`, c.ID%3)
			if err := execRetried(b, `select pgrun.fail_job($1, $2, $3::jsonb, false, 'w')`, c.ID, c.Attempt, msg); err != nil {
				return err
			}
		}
		return nil
	}
}

// Children completed in batches from several connections at once are each counted
// once, and the parent succeeds once, with the last of them.
func TestFanInConcurrentBatchesFinishParentOnce(t *testing.T) {
	b := testkit.Setup(t)
	recordTransitions(t, b)
	parent := fanInParent(t, b, 600, 1.0)
	claims := testkit.ClaimN(t, b.Pool, "kids", "w", 600, "1 hour")
	require.Len(t, claims, 600)
	batches := make([][]testkit.Claim, 6)
	for i, c := range claims {
		batches[i%6] = append(batches[i%6], c) // every batch spans the whole id range
	}
	var calls []func() error
	for _, batch := range batches {
		calls = append(calls, completeBatch(b, batch))
	}
	inParallel(t, calls...)

	j, err := pgrun.GetJob(b.Ctx, b.Pool, parent)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.EqualValues(t, 600, j.ProgressCurrent)
	require.JSONEq(t, `{"children": 600, "children_failed": 0}`, string(j.Result))
	require.Equal(t, []string{"queued->running", "running->waiting", "waiting->succeeded"}, statusChanges(t, b, parent))
	var undispatched int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs
		where parent_id = $1 and (status <> 'succeeded' or dispatched_at is null)`, parent).Scan(&undispatched))
	require.Zero(t, undispatched, "every child finished and was counted")
}

// With failures and successes reported at once from several connections, the parent
// fails once, when the failed share has reached failure_ratio and not before; it keeps
// at most three distinct child errors, writes one failure event, and cancels what is
// still unfinished, whose late completions then match nothing.
func TestFanInConcurrentFailuresRespectFailureRatio(t *testing.T) {
	b := testkit.Setup(t)
	recordTransitions(t, b)
	parent := fanInParent(t, b, 300, 0.1) // fails at 30 failed children
	claims := testkit.ClaimN(t, b.Pool, "kids", "w", 300, "1 hour")
	require.Len(t, claims, 300)
	var calls []func() error
	for i := 0; i < 4; i++ {
		calls = append(calls, failEach(b, claims[i*10:(i+1)*10])) // 40 failures in all
	}
	rest := claims[40:]
	for i := 0; i < 4; i++ {
		calls = append(calls, completeBatch(b, rest[i*65:(i+1)*65]))
	}
	inParallel(t, calls...)

	j, err := pgrun.GetJob(b.Ctx, b.Pool, parent)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Equal(t, []string{"queued->running", "running->waiting", "waiting->failed"}, statusChanges(t, b, parent))
	var failed, done, total int
	var errs []string
	var class string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select children_failed, progress_current, progress_total, child_errors,
		error ->> 'class' from pgrun.jobs where id = $1`, parent).Scan(&failed, &done, &total, &errs, &class))
	require.Equal(t, "children_failed", class)
	require.GreaterOrEqual(t, float64(failed)/float64(total), 0.1, "failed before the share reached the ratio")
	require.LessOrEqual(t, failed+done, total)
	require.NotEmpty(t, errs)
	require.LessOrEqual(t, len(errs), 3)
	seen := map[string]bool{}
	for _, e := range errs {
		require.False(t, seen[e], "child_errors repeats %q", e)
		seen[e] = true
	}
	var events int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events
		where job_id = $1 and event = 'job.failed'`, parent).Scan(&events))
	require.Equal(t, 1, events)
	// Every child ended: on its own (counted, unless the parent had failed first) or
	// cancelled with the parent; none is counted that did not end so.
	var unfinished, succeeded, failedKids int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select
		count(*) filter (where status not in ('succeeded', 'failed', 'cancelled')),
		count(*) filter (where status = 'succeeded'), count(*) filter (where status = 'failed')
		from pgrun.jobs where parent_id = $1`, parent).Scan(&unfinished, &succeeded, &failedKids))
	require.Zero(t, unfinished)
	require.LessOrEqual(t, done, succeeded)
	require.LessOrEqual(t, failed, failedKids)
}

// One statement that finishes several children of a parent counts them together: the
// failures in it that reach failure_ratio fail the parent at once, naming the first
// three distinct messages in id order, and the children it did not finish are
// cancelled. (A direct UPDATE stands for any engine statement that finishes many
// jobs at once, such as the reaper's.)
func TestFanInOneStatementReachingTheRatio(t *testing.T) {
	b := testkit.Setup(t)
	parent := fanInParent(t, b, 10, 0.3)
	claims := testkit.ClaimN(t, b.Pool, "kids", "w", 10, "1 hour")
	require.Len(t, claims, 10)
	ids := make([]int64, 6)
	for i := range ids {
		ids[i] = claims[i].ID
	}
	// Children 0 and 1 succeed; 2, 3, 4 and 5 fail with messages a, b, a, c.
	_, err := b.Pool.Exec(b.Ctx, `update pgrun.jobs j
		set status = case when j.id = any ($2) then 'succeeded'::pgrun.job_status else 'failed' end,
		    finished_at = now(),
		    error = case when j.id = any ($2) then null
		                 else jsonb_build_object('message', ($3::text[])[array_position($1, j.id) - 2]) end
		where j.id = any ($1)`, ids, ids[:2], []string{"a", "b", "a", "c"})
	require.NoError(t, err)

	var status string
	var done, failed int
	var errs []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status, progress_current, children_failed, child_errors
		from pgrun.jobs where id = $1`, parent).Scan(&status, &done, &failed, &errs))
	require.Equal(t, "failed", status)
	require.Equal(t, 2, done)
	require.Equal(t, 4, failed)
	require.Equal(t, []string{"a", "b", "c"}, errs)
	var cancelled int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs
		where parent_id = $1 and status = 'cancelled'`, parent).Scan(&cancelled))
	require.Equal(t, 4, cancelled, "the four children still running")
}

// Batches that finish children of the same parents in opposite orders, at once, do
// not deadlock (parents are locked in id order), and both parents finish once.
func TestFanInBatchesAcrossParentsDoNotDeadlock(t *testing.T) {
	b := testkit.Setup(t)
	recordTransitions(t, b)
	p1 := fanInParent(t, b, 200, 1.0)
	p2 := fanInParent(t, b, 200, 1.0)
	claims := testkit.ClaimN(t, b.Pool, "kids", "w", 400, "1 hour")
	require.Len(t, claims, 400)
	of := map[int64][]testkit.Claim{}
	for _, c := range claims { // claims come in id order, and p1's children were inserted first
		p := p2
		if len(of[p1]) < 200 {
			p = p1
		}
		of[p] = append(of[p], c)
	}
	var calls []func() error
	for round := 0; round < 10; round++ {
		lo, hi := round*20, round*20+10
		// complete_jobs updates in array order: p1's children first in one batch, p2's
		// first in the other.
		calls = append(calls,
			completeBatch(b, append(append([]testkit.Claim{}, of[p1][lo:hi]...), of[p2][lo:hi]...)),
			completeBatch(b, append(append([]testkit.Claim{}, of[p2][hi:hi+10]...), of[p1][hi:hi+10]...)))
	}
	inParallel(t, calls...)
	for _, p := range []int64{p1, p2} {
		require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, p))
		require.Equal(t, []string{"queued->running", "running->waiting", "waiting->succeeded"}, statusChanges(t, b, p))
	}
}

// If counting a batch fails, the batch's finishes still commit and each child is
// dispatched on its own: the children of a healthy parent are counted, and the one
// whose dispatch fails waits in the outbox, from which it is counted exactly once.
func TestFanInBatchFaultFallsBackToOneDispatchPerJob(t *testing.T) {
	b := testkit.Setup(t)
	healthy := fanInParent(t, b, 2, 1.0)
	broken := fanInParent(t, b, 2, 1.0)
	// The broken parent cannot succeed while public.pgrun_test_fault has a row.
	_, err := b.Pool.Exec(b.Ctx, fmt.Sprintf(`
		create table public.pgrun_test_fault (on_ boolean);
		insert into public.pgrun_test_fault values (true);
		create function public.pgrun_test_fault() returns trigger language plpgsql as $$
		begin
		  if exists (select 1 from public.pgrun_test_fault) then
		    raise exception 'injected fan-in fault';
		  end if;
		  return new;
		end $$;
		create trigger pgrun_test_fault before update of status on pgrun.jobs
		  for each row when (new.id = %d and new.status = 'succeeded')
		  execute function public.pgrun_test_fault();`, broken))
	require.NoError(t, err)
	claims := testkit.ClaimN(t, b.Pool, "kids", "w", 4, "1 hour")
	require.Len(t, claims, 4)
	require.NoError(t, completeBatch(b, claims)())

	var succeeded int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id in ($1, $2) and status = 'succeeded'`,
		healthy, broken).Scan(&succeeded))
	require.Equal(t, 4, succeeded, "every completion committed")
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, healthy))
	require.Equal(t, pgrun.StatusWaiting, testkit.JobStatus(t, b, broken))
	var outboxed, progress int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.outbox`).Scan(&outboxed))
	require.Equal(t, 1, outboxed, "only the child whose count would finish the broken parent")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select progress_current from pgrun.jobs where id = $1`, broken).Scan(&progress))
	require.Equal(t, 1, progress)

	_, err = b.Pool.Exec(b.Ctx, `delete from public.pgrun_test_fault`)
	require.NoError(t, err)
	var due time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select next_attempt_at from pgrun.outbox`).Scan(&due))
	c := testkit.PinClock(t, b, due.Add(time.Second))
	var out string
	c.QueryRow(`select pgrun.maintain()::text`, nil, &out)
	require.Contains(t, out, `"outbox_dispatched": 1`)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, broken))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select progress_current from pgrun.jobs where id = $1`, broken).Scan(&progress))
	require.Equal(t, 2, progress, "counted once")
	var again bool
	require.NoError(t, b.Pool.QueryRow(context.Background(), `select bool_or(pgrun.dispatch(id)) from pgrun.jobs where parent_id = $1`, broken).Scan(&again))
	require.False(t, again, "a second dispatch of any child is a no-op")
}
