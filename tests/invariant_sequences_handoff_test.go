package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// The handoff (36_sequences.sql): complete_jobs' hand_over takes the next job of a
// sequence whose head succeeds straight to running under the completing worker, in
// the statement that ends the head, where a claim would have given it to that worker
// all the same; everywhere else the next job is released to the queue as before.

// handoffClaim is a claimed job as the tests below read it back.
type handoffClaim struct {
	ID      int64
	Attempt int32
	Claim   string
}

// claimSq claims up to 10 jobs of queue sq for worker w, in id order, with their
// claim tokens.
func claimSq(t *testing.T, q testkit.Querier) []handoffClaim {
	t.Helper()
	rows, err := q.Query(context.Background(),
		`select id, attempt, claim_id::text from pgrun.claim_jobs('sq', 'w', 10) order by id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[handoffClaim])
	require.NoError(t, err)
	return out
}

// inTx runs fn in a transaction on b's pool and commits it (the setting pgrun.handed
// lives as long as the transaction).
func inTx(t *testing.T, b *testkit.DB, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck // after Commit, a no-op
	fn(tx)
	require.NoError(t, tx.Commit(b.Ctx))
}

// completeHanding completes cs under worker w in one transaction, handing over the
// next jobs of the heads in hand, and returns the setting pgrun.handed it left.
func completeHanding(t *testing.T, b *testkit.DB, cs []handoffClaim, hand []int64, lease *string) string {
	t.Helper()
	var ids []int64
	var attempts []int32
	var claims []string
	for _, c := range cs {
		ids, attempts, claims = append(ids, c.ID), append(attempts, c.Attempt), append(claims, c.Claim)
	}
	var handed string
	inTx(t, b, func(tx pgx.Tx) {
		var done []int64
		require.NoError(t, tx.QueryRow(b.Ctx, `select array_agg(id) from pgrun.complete_jobs($1, $2, null, 'w', $3::uuid[], $4,
			$5::interval) id`, ids, attempts, claims, hand, lease).Scan(&done))
		require.ElementsMatch(t, ids, done, "every head succeeded")
		require.NoError(t, tx.QueryRow(b.Ctx, `select coalesce(current_setting('pgrun.handed', true), '')`).Scan(&handed))
	})
	return handed
}

// A head completed with hand_over passes its sequence to its worker: the next job is
// running under that worker with a claim of its own (attempt 1, a token, the lease
// asked for) and is named in pgrun.handed; a head not named releases its next job to
// the queue; the job after the handed one stays held; and the handed job, completed
// the same way, hands on the one after it.
func TestSequenceHandoffGivesTheNextJobToTheWorkerThatRanTheHead(t *testing.T) {
	b := testkit.Setup(t)
	a := seqJobs(t, b.Pool, "work", "a", "a", "a")
	c := seqJobs(t, b.Pool, "work", "c", "c")
	heads := claimSq(t, b.Pool)
	require.Equal(t, []int64{a[0], c[0]}, []int64{heads[0].ID, heads[1].ID})

	lease := "45 seconds"
	handed := completeHanding(t, b, heads, []int64{a[0]}, &lease)
	require.Equal(t, ","+itoa(a[1])+",", handed)
	require.Equal(t, []string{"succeeded", "running", "pending", "succeeded", "queued"}, statuses(t, b.Pool, a[0], a[1], a[2], c[0], c[1]))
	var worker string
	var attempt int32
	var claim string
	var leaseLen string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select claimed_by, attempt, claim_id::text, (lease_expires_at - started_at)::text
		from pgrun.jobs where id = $1`, a[1]).Scan(&worker, &attempt, &claim, &leaseLen))
	require.Equal(t, "w", worker)
	require.EqualValues(t, 1, attempt)
	require.NotEqual(t, heads[0].Claim, claim, "a claim of its own")
	require.Equal(t, "00:00:45", leaseLen)
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs where sequence_key = 'a' and status = 'running'`))

	// Completed under its own claim (the queue's default lease this time), it hands on.
	handed = completeHanding(t, b, []handoffClaim{{a[1], attempt, claim}}, []int64{a[1]}, nil)
	require.Equal(t, ","+itoa(a[2])+",", handed)
	require.Equal(t, []string{"succeeded", "running"}, statuses(t, b.Pool, a[1], a[2]))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (lease_expires_at - started_at)::text from pgrun.jobs where id = $1`,
		a[2]).Scan(&leaseLen))
	require.Equal(t, "00:00:30", leaseLen, "the default lease")
}

// Where a claim would weigh something, the next job is released to the queue, not
// handed over: the queue has a limit or is paused, the next job is of another kind or
// not due yet, or an operator drained the worker's host. A head whose report is stale
// hands nothing over and moves nothing.
func TestSequenceHandoffOnlyWhereAClaimWouldGiveTheJobToThatWorker(t *testing.T) {
	cases := []struct {
		name  string
		setup []string
		kind  string // the next job's kind
		later bool   // the next job is due in an hour
		want  string // the next job's status after the head succeeded
	}{
		{name: "max_running", setup: []string{`select pgrun.set_queue('sq', max_running => 5)`}, kind: "work", want: "queued"},
		{name: "fairness", setup: []string{`select pgrun.set_queue('sq', fair_by => 'tenant')`}, kind: "work", want: "queued"},
		// Its claims count their jobs in their keys' windows.
		{name: "per-key rate", setup: []string{`select pgrun.set_queue('sq', key_rate_limit => 100)`}, kind: "work", want: "queued"},
		{name: "another kind", kind: "other", want: "queued"},
		{name: "not due", kind: "work", later: true, want: "queued"},
		{name: "host drained", setup: []string{`select pgrun.worker_heartbeat('w', 'h1', 1)`,
			`select pgrun.set_worker_control('h1', 'sq', 'drain')`}, kind: "work", want: "queued"},
		{name: "none of those", kind: "work", want: "running"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := testkit.Setup(t)
			head := seqJobs(t, b.Pool, "work", "k")[0]
			next := seqJobs(t, b.Pool, tc.kind, "k")[0]
			if tc.later {
				testkit.ExecAll(t, b, `update pgrun.jobs set run_at = now() + interval '1 hour' where id = `+itoa(next))
			}
			cs := claimSq(t, b.Pool)
			require.Len(t, cs, 1)
			testkit.ExecAll(t, b, tc.setup...)
			handed := completeHanding(t, b, cs, []int64{head}, nil)
			require.Equal(t, tc.want, statuses(t, b.Pool, next)[0])
			if tc.want == "running" {
				require.Equal(t, ","+itoa(next)+",", handed)
			} else {
				require.Empty(t, handed)
			}
		})
	}

	t.Run("stale report", func(t *testing.T) {
		b := testkit.Setup(t)
		ids := seqJobs(t, b.Pool, "work", "k", "k")
		cs := claimSq(t, b.Pool)
		stale := cs[0]
		stale.Attempt++
		inTx(t, b, func(tx pgx.Tx) {
			var done *[]int64
			require.NoError(t, tx.QueryRow(b.Ctx, `select array_agg(id) from pgrun.complete_jobs(array[$1::bigint], array[$2::int],
				null, 'w', array[$3::uuid], array[$1::bigint]) id`, stale.ID, stale.Attempt, stale.Claim).Scan(&done))
			require.Nil(t, done)
		})
		require.Equal(t, []string{"running", "pending"}, statuses(t, b.Pool, ids...))
	})
}

// The handoff is asked for by the call, never by a session setting: pgrun.handoff set
// by hand before a completion without hand_over hands nothing over.
func TestSequenceHandoffIsNotAskedForByASessionSetting(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "work", "k", "k")
	cs := claimSq(t, b.Pool)
	inTx(t, b, func(tx pgx.Tx) {
		_, err := tx.Exec(b.Ctx, `select set_config('pgrun.handoff', jsonb_build_object('worker', 'w', 'heads',
			jsonb_build_object($1::bigint::text, true))::text, true)`, ids[0])
		require.NoError(t, err)
		_, err = tx.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w', array[$3::uuid])`,
			cs[0].ID, cs[0].Attempt, cs[0].Claim)
		require.NoError(t, err)
	})
	require.Equal(t, []string{"succeeded", "queued"}, statuses(t, b.Pool, ids...))
}

// Bad hand_over arguments are refused with 22023 and a hint, and change nothing.
func TestSequenceHandoffRefusesBadArguments(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "work", "k", "k")
	cs := claimSq(t, b.Pool)
	for _, bad := range []struct{ sql, msg string }{
		{`select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, null, null, array[$1::bigint])`, "without a worker"},
		{`select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w', array[$3::uuid], array[$1::bigint, $1::bigint])`,
			"2 jobs to hand over for 1 ids"},
		{`select pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w', array[$3::uuid], array[$1::bigint], interval '2 days')`,
			"lease 2 days is out of bounds"},
	} {
		args := []any{cs[0].ID, cs[0].Attempt}
		if strings.Contains(bad.sql, "$3") {
			args = append(args, cs[0].Claim)
		}
		_, err := b.Pool.Exec(b.Ctx, bad.sql, args...)
		pe := testkit.PgError(t, err, bad.msg)
		require.Equal(t, "22023", pe.Code, bad.msg)
		require.Contains(t, pe.Message, bad.msg)
		require.NotEmpty(t, pe.Hint)
	}
	require.Equal(t, []string{"running", "pending"}, statuses(t, b.Pool, ids...))
}

// handed_jobs returns, with its claim token, only a job the transaction's setting lists
// that runs under the worker asked for: a setting written by hand that names another
// worker's job returns nothing, and a worker login may ask for its own worker id only.
func TestSequenceHandedJobsAreTheWorkersOwn(t *testing.T) {
	b := testkit.Setup(t)
	seqJobs(t, b.Pool, "work", "k")
	mine := claimSq(t, b.Pool)[0]
	seqJobs(t, b.Pool, "work", "other")
	var theirs int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('sq', 'x', 1)`).Scan(&theirs))
	inTx(t, b, func(tx pgx.Tx) {
		_, err := tx.Exec(b.Ctx, `select set_config('pgrun.handed', ',' || $1::bigint || ',' || $2::bigint || ',', true)`,
			mine.ID, theirs)
		require.NoError(t, err)
		rows, err := tx.Query(b.Ctx, `select id, attempt, claim_id::text from pgrun.handed_jobs('w')`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[handoffClaim])
		require.NoError(t, err)
		require.Equal(t, []handoffClaim{mine}, got)
	})
	login, p := testkit.NewRole(t, b, "pgrun_worker")
	_, err := p.Exec(b.Ctx, `select pgrun.worker_heartbeat('mine-'||$1, 'h', 1)`, login)
	require.NoError(t, err)
	_, err = p.Exec(b.Ctx, `select * from pgrun.handed_jobs('x')`)
	require.Equal(t, "42501", testkit.SQLState(err), "another login's worker id: %v", err)
}
