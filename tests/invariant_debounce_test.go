package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// Debounce and throttle (issue 35, sql/functions/22_debounce.sql): the enqueues of one
// debounce_key within a window fold into one job, exactly, however many enqueuers race.

// debounced enqueues one spec of kind reindex in queue dq with debounce_key key and
// window, edge and args as given, and returns its pgrun.enqueued row.
func debounced(t *testing.T, q testkit.Querier, key, window, edge string, args string) pgrun.Enqueued {
	t.Helper()
	rows, err := q.Query(context.Background(), `select * from pgrun.enqueue_specs(array[pgrun.job_spec('reindex',
		args => $1::jsonb, queue => 'dq', debounce_key => $2, debounce => $3::interval, debounce_edge => $4)])`,
		args, key, window, edge)
	require.NoError(t, err)
	e, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[pgrun.Enqueued])
	require.NoError(t, err)
	return e
}

// Twenty enqueuers of one key, at once, each in its own transaction: one job, holding
// the args of the enqueue that committed last and due when the last window ends; the
// one enqueuer that created it is told so, the others that they folded.
func TestDebounceTrailingFoldsConcurrentEnqueuesIntoOneJob(t *testing.T) {
	b := testkit.Setup(t)
	// order records the enqueuers in the order they held the key's lock: each writes
	// its row before committing, and the lock is held until the commit.
	testkit.ExecAll(t, b, `create table debounce_order (n bigint generated always as identity, who int)`)
	const enqueuers = 20
	began := time.Now()
	var wg sync.WaitGroup
	got := make([]pgrun.Enqueued, enqueuers)
	errs := make([]error, enqueuers)
	start := make(chan struct{})
	for i := range enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = pgx.BeginFunc(b.Ctx, b.Pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(b.Ctx, `select * from pgrun.enqueue_specs(array[pgrun.job_spec('reindex',
					args => jsonb_build_object('who', $1::int), queue => 'dq', debounce_key => 'reindex:7',
					debounce => '5 seconds')])`, i)
				if err != nil {
					return err
				}
				e, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[pgrun.Enqueued])
				if err != nil {
					return err
				}
				got[i] = e
				_, err = tx.Exec(b.Ctx, `insert into debounce_order (who) values ($1)`, i)
				return err
			})
		}()
	}
	close(start)
	wg.Wait()
	ended := time.Now()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs where debounce_key = 'reindex:7'`), "one job")
	folded := 0
	for _, e := range got {
		require.Equal(t, got[0].ID, e.ID, "every enqueuer got the one job")
		require.False(t, e.Deduplicated)
		if e.Folded {
			folded++
		}
	}
	require.Equal(t, enqueuers-1, folded, "all but the creator folded")

	var last int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select who from debounce_order order by n desc limit 1`).Scan(&last))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, got[0].ID)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"who": %d}`, last), string(j.Args), "the last committed args win")
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.WithinRange(t, j.RunAt, began.Add(5*time.Second-time.Second), ended.Add(5*time.Second+time.Second),
		"due when the last window ends")
	require.True(t, j.RunAt.After(j.CreatedAt.Add(5*time.Second-time.Millisecond)), "the window moved on")
}

// A job whose window has ended (due), or that has started, is not folded into: the
// next enqueue of the key starts a new window with a new job. The Go client reports
// Folded.
func TestDebounceTrailingStartsANewWindowOnceTheLastEnded(t *testing.T) {
	b := testkit.Setup(t)
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, "reindex", map[string]int{"v": 1}, pgrun.Queue("dq"),
		pgrun.Debounce("reindex:8", time.Minute))
	require.NoError(t, err)
	require.False(t, first.Folded)
	again, err := pgrun.Enqueue(b.Ctx, b.Pool, "reindex", map[string]int{"v": 2}, pgrun.Queue("dq"),
		pgrun.Debounce("reindex:8", time.Minute))
	require.NoError(t, err)
	require.True(t, again.Folded)
	require.Equal(t, first.ID, again.ID)
	require.JSONEq(t, `{"v": 2}`, string(again.Args))

	testkit.ExecAll(t, b, fmt.Sprintf(`update pgrun.jobs set run_at = now() - interval '1 second' where id = %d`, first.ID))
	fresh := debounced(t, b.Pool, "reindex:8", "1 minute", "trailing", `{"v": 3}`)
	require.False(t, fresh.Folded, "a due job's window has ended")
	require.NotEqual(t, first.ID, fresh.ID)

	c := testkit.ClaimN(t, b.Pool, "dq", "w", 10, "30 seconds") // the first; the fresh one is not due
	require.Len(t, c, 1)
	testkit.ExecAll(t, b, fmt.Sprintf(`update pgrun.jobs set run_at = now() + interval '1 minute' where id = %d`, first.ID))
	require.Equal(t, fresh.ID, debounced(t, b.Pool, "reindex:8", "1 minute", "trailing", `{"v": 4}`).ID,
		"the latest job is folded into, never one that ran")
	j, err := pgrun.GetJob(b.Ctx, b.Pool, first.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"v": 2}`, string(j.Args), "a claimed job keeps its args")
}

// The leading edge runs the first enqueue at once and answers the rest of its window
// with it, writing nothing; after the window, the next enqueue is a new first.
func TestDebounceLeadingRunsTheFirstAndDropsTheRestOfItsWindow(t *testing.T) {
	b := testkit.Setup(t)
	first := debounced(t, b.Pool, "ping:1", "1 minute", "leading", `{"n": 1}`)
	require.False(t, first.Folded)
	require.Equal(t, pgrun.StatusQueued, first.Status)
	require.WithinDuration(t, time.Now(), first.RunAt, 5*time.Second, "runs at once")
	before := testkit.Counts(t, b.Pool)
	for n := range 5 {
		e := debounced(t, b.Pool, "ping:1", "1 minute", "leading", fmt.Sprintf(`{"n": %d}`, n+2))
		require.True(t, e.Folded)
		require.Equal(t, first.ID, e.ID)
		require.JSONEq(t, `{"n": 1}`, string(e.Args), "the first is returned as it is")
	}
	require.Equal(t, before, testkit.Counts(t, b.Pool), "a throttled enqueue writes nothing")
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, "reindex", nil, pgrun.Queue("dq"), pgrun.Throttle("ping:1", time.Minute))
	require.NoError(t, err)
	require.True(t, j.Folded)

	// The window is counted from the first's enqueue.
	testkit.ExecAll(t, b, fmt.Sprintf(`update pgrun.jobs set created_at = now() - interval '61 seconds' where id = %d`, first.ID))
	next := debounced(t, b.Pool, "ping:1", "1 minute", "leading", `{"n": 9}`)
	require.False(t, next.Folded)
	require.NotEqual(t, first.ID, next.ID)
}

// With a unique_key as well, the unique key is checked first: a spec whose key an
// active job holds is answered with that job, deduplicated, unfolded (with
// on_conflict 'replace' a queued holder takes the args); only a spec whose unique key
// nobody holds is debounced, and then it may fold into a job holding another key.
func TestDebounceComesAfterTheUniqueKey(t *testing.T) {
	b := testkit.Setup(t)
	spec := func(unique, onConflict, args string) pgrun.Enqueued {
		t.Helper()
		rows, err := b.Pool.Query(b.Ctx, `select * from pgrun.enqueue_specs(array[pgrun.job_spec('reindex',
			args => $1::jsonb, queue => 'dq', unique_key => $2, on_conflict => $3, debounce_key => 'both',
			debounce => '1 minute')])`, args, unique, onConflict)
		require.NoError(t, err)
		e, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[pgrun.Enqueued])
		require.NoError(t, err)
		return e
	}
	first := spec("u1", "ignore", `{"v": 1}`)
	require.False(t, first.Deduplicated || first.Folded)
	dup := spec("u1", "ignore", `{"v": 2}`)
	require.Equal(t, first.ID, dup.ID)
	require.True(t, dup.Deduplicated, "the unique key answered")
	require.False(t, dup.Folded)
	require.JSONEq(t, `{"v": 1}`, string(dup.Args), "a duplicate by unique key is dropped, as without debounce")
	replaced := spec("u1", "replace", `{"v": 3}`)
	require.True(t, replaced.Deduplicated)
	require.JSONEq(t, `{"v": 3}`, string(replaced.Args))

	other := spec("u2", "ignore", `{"v": 4}`)
	require.Equal(t, first.ID, other.ID)
	require.True(t, other.Folded, "no job holds u2: the debounce folds")
	require.False(t, other.Deduplicated)
	require.Equal(t, "u1", *other.UniqueKey, "the job folded into keeps its unique key")
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs`))
}

// Bad debounce input is refused with 22023, a message naming the bad value and a
// HINT, and nothing is written: by every enqueue function, and by a plain INSERT,
// which cannot debounce.
func TestDebounceRefusesBadInputAndWritesNothing(t *testing.T) {
	b := testkit.Setup(t)
	debounced(t, b.Pool, "k", "1 minute", "trailing", `{}`)
	before := testkit.Counts(t, b.Pool)
	for _, c := range []struct{ sql, says string }{
		{`select pgrun.enqueue_job('x', debounce_key => 'k')`, "needs a debounce window"},
		{`select pgrun.enqueue_job('x', debounce => '5 seconds')`, "needs a debounce_key"},
		{`select pgrun.enqueue_job('x', debounce_key => 'k', debounce => '9 milliseconds')`, "out of bounds"},
		{`select pgrun.enqueue_job('x', debounce_key => 'k', debounce => '367 days')`, "out of bounds"},
		{`select pgrun.enqueue_job('x', debounce_key => 'k', debounce => '1 minute', debounce_edge => 'middle')`, "is not valid"},
		{`select pgrun.enqueue_job('x', debounce_edge => 'leading')`, "without debounce"},
		{`select pgrun.enqueue_job('x', debounce_key => 'k', debounce => '1 minute', run_at => now())`, "cannot be combined"},
		{`select pgrun.enqueue_job('x', debounce_key => '', debounce => '1 minute')`, "must not be empty"},
		{`select pgrun.enqueue_job('x', debounce_key => repeat('k', 201), debounce => '1 minute')`, "over the limit of 200"},
		{`select pgrun.enqueue_jobs('[{"kind": "x"}, {"kind": "x", "debounce_key": "k", "debounce": "1 ms"}]')`, "element 1 of the batch"},
		{`insert into pgrun.jobs (kind, debounce_key) values ('x', 'k')`, "a plain INSERT cannot debounce"},
	} {
		_, err := b.Pool.Exec(b.Ctx, c.sql)
		e := testkit.PgError(t, err, c.sql)
		require.Equal(t, "22023", e.Code, c.sql)
		require.Contains(t, e.Message+" "+e.Hint, c.says, c.sql)
		require.NotEmpty(t, e.Hint, c.sql)
	}
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "x", nil, pgrun.Debounce("k", -time.Second))
	require.ErrorIs(t, err, pgrun.ErrInvalidInput)
	require.Equal(t, before, testkit.Counts(t, b.Pool), "nothing refused was written")
	var args json.RawMessage
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select args from pgrun.jobs where debounce_key = 'k'`).Scan(&args))
	require.JSONEq(t, `{}`, string(args), "and nothing was folded")
}
