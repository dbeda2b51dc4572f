package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Bulk actions on every job a filter matches (sql/functions/52_bulk.sql; issue 34:
// "Retry every failed job of this queue and kind" retried the permanent failures the
// list had filtered out).

// The filter of the issue: queue emails, kind echo, failed, error text 421.
const emails421 = `{"queue": "emails", "kind": "echo", "states": ["failed"], "error": "421"}`

// bulkScenario is the dead letters: in queue emails, kind echo, jobs that
// failed for good with a transient "smtp 421" and jobs that failed with a permanent
// "550 mailbox unavailable", which must never be resent; one job that failed with a
// 421 and then succeeded (its row keeps the stale error); and 421 failures that the
// filter leaves out (another queue, another kind, a cancelled job).
type bulkScenario struct {
	transient, permanent []int64
	recovered            int64
	elsewhere            []int64
}

// newBulkScenario builds a bulkScenario with this many transient and permanent
// failures, their ids interleaved (every third a 550 until they run out), as
// failures arrive.
func newBulkScenario(t testing.TB, b *testkit.DB, transient, permanent int) bulkScenario {
	t.Helper()
	var s bulkScenario
	ctx := b.Ctx
	// The recovered job first, alone in its queue: 421, a retry, then success.
	require.NoError(t, b.Pool.QueryRow(ctx, `select id from pgrun.enqueue_job('echo', '{"n": 0}', queue => 'emails', max_attempts => 3)`).
		Scan(&s.recovered))
	testkit.ExecAll(t, b,
		`select pgrun.fail_job(c.id, c.attempt, '{"message": "smtp 421 4.7.0 try again later"}', retryable => true)
		 from pgrun.claim_jobs('emails', 'w-scenario', 10, '1 minute') c`,
		`update pgrun.jobs set run_at = now() where queue = 'emails'`,
		`select pgrun.complete_job(c.id, c.attempt) from pgrun.claim_jobs('emails', 'w-scenario', 10, '1 minute') c`)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, s.recovered))

	type made struct {
		ID   int64
		Gone bool
	}
	rows, err := b.Pool.Query(ctx, `
		select (pgrun.enqueue_job(case when g <= $1 + $2 then 'echo' else 'other' end,
		                          jsonb_build_object('n', g, 'gone', g <= $1 + $2 and g % 3 = 0 and g / 3 <= $2),
		                          queue => 'emails')).id as id,
		       g <= $1 + $2 and g % 3 = 0 and g / 3 <= $2 as gone
		from generate_series(1, $1::int + $2::int + 3) g`, transient, permanent)
	require.NoError(t, err)
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[made])
	require.NoError(t, err)
	for i, m := range all {
		switch {
		case i >= transient+permanent:
			s.elsewhere = append(s.elsewhere, m.ID) // kind other
		case m.Gone:
			s.permanent = append(s.permanent, m.ID)
		default:
			s.transient = append(s.transient, m.ID)
		}
	}
	require.Len(t, s.permanent, permanent, "the scenario's arithmetic")
	for {
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, `
			select count(pgrun.fail_job(c.id, c.attempt,
			         jsonb_build_object('message', case when (c.args ->> 'gone')::boolean then '550 5.1.1 mailbox unavailable'
			                                            else 'smtp 421 4.7.0 try again later' end),
			         retryable => false))
			from pgrun.claim_jobs('emails', 'w-scenario', 10000, '1 minute') c`).Scan(&n))
		if n == 0 {
			break
		}
	}
	var other, cancelled int64
	require.NoError(t, b.Pool.QueryRow(ctx, `select id from pgrun.enqueue_job('echo', '{}', queue => 'other')`).Scan(&other))
	testkit.ExecAll(t, b, `select pgrun.fail_job(c.id, c.attempt, '{"message": "smtp 421 elsewhere"}', retryable => false)
		from pgrun.claim_jobs('other', 'w-scenario', 10, '1 minute') c`)
	require.NoError(t, b.Pool.QueryRow(ctx, `select id from pgrun.enqueue_job('echo', '{}', queue => 'emails', run_at => now() + interval '1 hour')`).
		Scan(&cancelled))
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.cancel_job(%d, 'smtp 421 gave up')`, cancelled))
	s.elsewhere = append(s.elsewhere, other, cancelled)
	return s
}

// idsOf runs sql and returns its one column of ids, sorted.
func idsOf(t testing.TB, p *pgxpool.Pool, sql string, args ...any) []int64 {
	t.Helper()
	rows, err := p.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err, sql)
	slices.Sort(ids)
	return ids
}

// digest sums up every job row and the count of events: equal digests, nothing
// changed.
func digest(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	var d string
	require.NoError(t, p.QueryRow(context.Background(), `select
		coalesce(md5(string_agg(row_to_json(j)::text, ',' order by j.id)), '') || ':' ||
		(select count(*) from pgrun.job_events)
		from pgrun.jobs j`).Scan(&d))
	return d
}

// bulkBatch is one row a bulk function returns.
type bulkBatch struct {
	Matched int              `db:"matched"`
	Changed int              `db:"changed"`
	Skipped map[string]int64 `db:"skipped"`
	LastID  *int64           `db:"last_id"`
}

// bulk runs sql, a call of a bulk function, on p: one batch.
func bulk(t testing.TB, p *pgxpool.Pool, sql string, args ...any) bulkBatch {
	t.Helper()
	rows, err := p.Query(context.Background(), sql, args...)
	require.NoError(t, err, sql)
	got, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[bulkBatch])
	require.NoError(t, err, sql)
	return got
}

// The scenario: the filter's retry redrives the 421 failures of the queue
// and kind, every one of them and nothing else. The permanent 550s stay failed, and
// so do 421 failures of another queue or kind; the job whose 421 was followed by a
// success is not matched by its stale error. The dry run says the same numbers and
// changes nothing; the batches page on by last_id.
func TestBulkRetryTouchesExactlyWhatTheFilterMatches(t *testing.T) {
	b := testkit.Setup(t)
	s := newBulkScenario(t, b, 1520, 177)

	require.Equal(t, s.transient, idsOf(t, b.Pool, `select pgrun.jobs_matching($1, max_jobs => 10000)`, emails421),
		"jobs_matching lists exactly the transient failures")
	before := digest(t, b.Pool)
	dry := bulk(t, b.Pool, `select * from pgrun.retry_matching($1, dry_run => true, max_jobs => 10000)`, emails421)
	require.Equal(t, bulkBatch{Matched: 1520, Changed: 1520, Skipped: map[string]int64{}, LastID: &s.transient[len(s.transient)-1]}, dry)
	require.Equal(t, before, digest(t, b.Pool), "a dry run changes nothing")

	// Without the state, the cancelled 421 matches too (and would be retried), the
	// stale error still not.
	wide := idsOf(t, b.Pool, `select pgrun.jobs_matching('{"queue": "emails", "error": "421"}', max_jobs => 10000)`)
	require.NotContains(t, wide, s.recovered, "a stale error does not match")
	require.Len(t, wide, 1520+3+1, "the transient failures, kind other's three and the cancelled job")

	var after int64
	var calls, changed int
	for {
		got := bulk(t, b.Pool, `select * from pgrun.retry_matching($1, after_id => $2, max_jobs => 500)`, emails421, after)
		calls++
		changed += got.Changed
		require.Empty(t, got.Skipped)
		if got.LastID == nil {
			require.Zero(t, got.Matched)
			break
		}
		require.Greater(t, *got.LastID, after, "the cursor moves up")
		after = *got.LastID
	}
	require.Equal(t, 1520, changed)
	require.Equal(t, 5, calls, "500 + 500 + 500 + 20, then the empty end")
	require.Equal(t, s.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where status = 'queued' and queue = 'emails'`),
		"exactly the transient failures are queued again")
	require.Equal(t, s.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where status = 'failed' and queue = 'emails' and kind = 'echo'`),
		"every permanent failure is still failed")
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, s.recovered))
	for _, id := range s.elsewhere {
		require.Contains(t, []pgrun.JobStatus{pgrun.StatusFailed, pgrun.StatusCancelled}, testkit.JobStatus(t, b, id), "job %d", id)
	}
	require.Equal(t, 1520, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events where event = 'job.retried'`))
	require.Zero(t, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where id = any ($1) and (failures <> 0 or finished_at is not null)`, s.transient),
		"a full attempt budget again, as retry_job gives")

	// Done: the same filter matches nothing now.
	require.Zero(t, bulk(t, b.Pool, `select * from pgrun.retry_matching($1, dry_run => true)`, emails421).Matched)
}

// A retry skips, and counts by reason, what it cannot redrive: a job whose unique
// key an active job holds (or an older job of the batch takes), one that is not
// failed or cancelled, and one that another transaction redrove while the retry
// waited for it (no_longer_matches).
func TestBulkRetrySaysWhyItSkipped(t *testing.T) {
	b := testkit.Setup(t)
	failOne := func(key string) int64 {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('echo', '{}', queue => 'skip', unique_key => nullif($1, ''))`, key).Scan(&id))
		testkit.ExecAll(t, b, `select pgrun.fail_job(c.id, c.attempt, '{"message": "boom"}', retryable => false)
			from pgrun.claim_jobs('skip', 'w', 10, '1 minute') c`)
		return id
	}
	plain, raced := failOne(""), failOne("")
	firstK, secondK := failOne("k"), failOne("k") // the same key, both failed: one may hold it again
	heldM := failOne("m")
	var holder, queued int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('echo', '{}', queue => 'elsewhere', unique_key => 'm')`).Scan(&holder))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('echo', '{}', queue => 'skip', run_at => now() + interval '1 hour')`).Scan(&queued))

	filter := `{"queue": "skip"}`
	dry := bulk(t, b.Pool, `select * from pgrun.retry_matching($1, dry_run => true)`, filter)
	require.Equal(t, 6, dry.Matched)
	require.Equal(t, 3, dry.Changed, "plain, raced and the first of key k")
	require.Equal(t, map[string]int64{"unique_key_held": 2, "not_failed_or_cancelled": 1}, dry.Skipped)

	// Another transaction redrives one job and holds it; the retry waits for it and
	// then leaves it.
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck // after the commit below: a no-op
	_, err = tx.Exec(b.Ctx, `select pgrun.retry_job($1)`, raced)
	require.NoError(t, err)
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid uint32
	require.NoError(t, conn.QueryRow(b.Ctx, `select pg_backend_pid()`).Scan(&pid))
	result := make(chan bulkBatch, 1)
	failed := make(chan error, 1)
	go func() {
		rows, err := conn.Query(b.Ctx, `select * from pgrun.retry_matching($1)`, filter)
		if err == nil {
			var got bulkBatch
			if got, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[bulkBatch]); err == nil {
				result <- got
				return
			}
		}
		failed <- err
	}()
	testkit.WaitUntilBlocked(t, b, pid)
	require.NoError(t, tx.Commit(b.Ctx))
	var got bulkBatch
	select {
	case got = <-result:
	case err := <-failed:
		t.Fatal(err)
	case <-b.Ctx.Done():
		t.Fatal("the retry did not return")
	}
	require.Equal(t, 6, got.Matched)
	require.Equal(t, 2, got.Changed, "plain and the first of key k")
	require.Equal(t, map[string]int64{"unique_key_held": 2, "not_failed_or_cancelled": 1, "no_longer_matches": 1}, got.Skipped)
	for id, want := range map[int64]pgrun.JobStatus{plain: pgrun.StatusQueued, raced: pgrun.StatusQueued,
		firstK: pgrun.StatusQueued, secondK: pgrun.StatusFailed, heldM: pgrun.StatusFailed, holder: pgrun.StatusQueued} {
		require.Equal(t, want, testkit.JobStatus(t, b, id), "job %d", id)
	}
	require.Equal(t, 1, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events where job_id = $1 and event = 'job.retried'`, raced),
		"redriven once, by the other transaction")
}

// A bulk cancel cancels the unfinished jobs the filter matches, as cancel_job does
// each: a running job's runner hears it on pgrun_cancel, the children of a cancelled
// parent go too, and a finished job is left (already_finished).
func TestBulkCancelMatching(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('mail', '{"to": "x"}', queue => 'out') from generate_series(1, 3)`,
		`select pgrun.enqueue_job('mail', '{"to": "y"}', queue => 'out') from generate_series(1, 2)`)
	running := testkit.ClaimN(t, b.Pool, "out", "w1", 1, "1 minute")
	parent := testkit.ClaimN(t, b.Pool, "out", "w1", 1, "1 minute")
	require.Len(t, running, 1)
	require.Len(t, parent, 1)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "part"}, {"kind": "part"}]'::jsonb, worker => 'w1')`,
		parent[0].ID, parent[0].Attempt)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusWaiting, testkit.JobStatus(t, b, parent[0].ID))
	listener := testkit.Listen(t, b, "pgrun_cancel")
	var done int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('mail', '{"to": "x"}', queue => 'out')`).Scan(&done))
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.cancel_job(%d)`, done))

	// A y job held by another transaction (as a claim holds a job for a moment) is
	// skipped as busy rather than waited for.
	var held int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(id) from pgrun.jobs where queue = 'out' and args ->> 'to' = 'y'`).Scan(&held))
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck // after the rollback below: a no-op
	_, err = tx.Exec(b.Ctx, `select 1 from pgrun.jobs where id = $1 for update`, held)
	require.NoError(t, err)
	got := bulk(t, b.Pool, `select * from pgrun.cancel_matching('{"queue": "out", "arg": "to", "arg_value": "y"}', max_jobs => 1)`)
	require.Equal(t, bulkBatch{Matched: 1, Changed: 0, Skipped: map[string]int64{"busy": 1}, LastID: &held}, got)
	require.NoError(t, tx.Rollback(b.Ctx))

	got = bulk(t, b.Pool, `select * from pgrun.cancel_matching('{"queue": "out", "arg": "to", "arg_value": "x"}', reason => 'sender blocked')`)
	require.Equal(t, bulkBatch{Matched: 4, Changed: 3, Skipped: map[string]int64{"already_finished": 1}, LastID: &done}, got)
	require.Equal(t, 2, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where queue = 'out' and status = 'queued'`),
		"the y jobs are not matched")
	n := testkit.NextNotification(t, listener, 10*time.Second)
	require.Equal(t, fmt.Sprintf("%d:%d", running[0].ID, running[0].Attempt), n.Payload, "the running job's runner is told")
	require.Equal(t, 2, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where parent_id = $1 and status = 'cancelled'`, parent[0].ID),
		"the waiting parent's children are cancelled with it")
	require.Equal(t, 3, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events
		where event = 'job.cancelled' and message = 'sender blocked'`))
}

// A bulk delete removes the finished jobs the filter matches with their events, and
// leaves an unfinished one (not_finished).
func TestBulkDeleteMatching(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('old', '{}', queue => 'del') from generate_series(1, 4)`)
	testkit.ExecAll(t, b, `select pgrun.fail_job(c.id, c.attempt, '{"message": "x"}', retryable => false)
		from pgrun.claim_jobs('del', 'w', 3, '1 minute') c`)
	before := testkit.Counts(t, b.Pool)
	got := bulk(t, b.Pool, `select * from pgrun.delete_matching('{"queue": "del"}')`)
	require.Equal(t, 4, got.Matched)
	require.Equal(t, 3, got.Changed)
	require.Equal(t, map[string]int64{"not_finished": 1}, got.Skipped)
	after := testkit.Counts(t, b.Pool)
	require.Equal(t, before["jobs"]-3, after["jobs"])
	require.Less(t, after["job_events"], before["job_events"], "their events go with them")
	require.Zero(t, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.job_events e where not exists (select 1 from pgrun.jobs j where j.id = e.job_id)`))
}

// Every input is bounded: a filter or a batch out of bounds is refused with 22023, a
// message naming it and a hint, and changes nothing.
func TestBulkBoundsRefuseBadInput(t *testing.T) {
	b := testkit.Setup(t)
	newBulkScenario(t, b, 3, 1)
	for _, sql := range []string{
		`select * from pgrun.retry_matching('[]')`,
		`select * from pgrun.retry_matching('{"queue": "emails", "bogus": 1}')`,
		`select * from pgrun.retry_matching('{"states": ["failed", "nope"]}')`,
		`select * from pgrun.retry_matching('{"states": []}')`,
		`select * from pgrun.retry_matching('{"queue": 7}')`,
		`select * from pgrun.retry_matching(jsonb_build_object('error', repeat('x', 201)))`,
		`select * from pgrun.retry_matching('{"error": ""}')`,
		`select * from pgrun.retry_matching('{"args": [1]}')`,
		`select * from pgrun.retry_matching('{"arg_value": "x"}')`,
		`select * from pgrun.retry_matching('{"created_from": "yesterday-ish"}')`,
		`select * from pgrun.retry_matching('{"finished_to": "infinity"}')`,
		`select * from pgrun.retry_matching('{"created_from": "2030-01-02T00:00Z", "created_to": "2030-01-01T00:00Z"}')`,
		`select * from pgrun.retry_matching('{"parent": 1.5}')`,
		`select * from pgrun.retry_matching('{"id_min": 0}')`,
		`select * from pgrun.retry_matching('{"id_min": 9, "id_max": 3}')`,
		`select * from pgrun.retry_matching(jsonb_build_object('args', jsonb_build_object('k', repeat('x', 9000))))`,
		`select * from pgrun.retry_matching('{"queue": "emails"}', max_jobs => 0)`,
		`select * from pgrun.retry_matching('{"queue": "emails"}', max_jobs => 10001)`,
		`select * from pgrun.retry_matching('{"queue": "emails"}', after_id => -1)`,
		`select * from pgrun.cancel_matching('{"queue": "emails"}', reason => repeat('x', 2001))`,
		`select * from pgrun.delete_matching('{"queue": "emails"}', max_jobs => null)`,
		`select pgrun.jobs_matching('{"kind": 1}')`,
	} {
		testkit.Refused(t, b, b.Pool, "22023", sql)
		_, err := b.Pool.Exec(b.Ctx, sql)
		pe := testkit.PgError(t, err, sql)
		require.NotEmpty(t, pe.Hint, sql)
	}
	// At the bounds, taken.
	bulk(t, b.Pool, `select * from pgrun.retry_matching(jsonb_build_object('error', repeat('x', 200)), max_jobs => 10000)`)
	bulk(t, b.Pool, `select * from pgrun.cancel_matching('{"queue": "emails"}', dry_run => true, max_jobs => 1, reason => repeat('x', 2000))`)
}

// The bulk actions are the administrator's: an enqueuer or a worker may neither act
// nor list what a filter matches; pgrun_admin may.
func TestBulkActionsAreAdminOnly(t *testing.T) {
	b := testkit.Setup(t)
	newBulkScenario(t, b, 3, 1)
	calls := []string{
		`select * from pgrun.retry_matching('{"queue": "emails"}')`,
		`select * from pgrun.cancel_matching('{"queue": "emails"}')`,
		`select * from pgrun.delete_matching('{"queue": "emails"}')`,
		`select pgrun.jobs_matching('{"queue": "emails"}')`,
	}
	for _, role := range []string{"pgrun_enqueuer", "pgrun_worker"} {
		p := testkit.AsRole(t, b, role)
		for _, sql := range calls {
			testkit.Denied(t, b, p, sql)
		}
	}
	admin := testkit.AsRole(t, b, "pgrun_admin")
	for _, sql := range calls {
		if strings.HasPrefix(sql, "select * from") {
			sql = strings.Replace(sql, `"}'`, `"}', dry_run => true`, 1)
		}
		testkit.Allowed(t, b, admin, sql)
	}
	got := bulk(t, admin, `select * from pgrun.retry_matching($1)`, emails421)
	require.Equal(t, 3, got.Changed)
}

// The CLI takes the page's filters: --error among them selects by error text, and
// --dry-run prints the count and changes nothing.
func TestBulkCLIDryRunAndErrorFilter(t *testing.T) {
	b := testkit.Setup(t)
	s := newBulkScenario(t, b, 30, 7)
	runner := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(b.Ctx, runnerBin, append(args, "--database-url", b.URL)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	before := digest(t, b.Pool)
	out := runner("job", "retry", "--queue", "emails", "--kind", "echo", "--error", "421", "--dry-run")
	require.Equal(t, "dry run: 30 jobs match (queue emails, kind echo, states failed, error \"421\"): 30 would be queued again; nothing changed\n", out)
	out = runner("job", "cancel", "--queue", "emails", "--error", "MAILBOX", "--state", "failed,queued", "--dry-run")
	require.Equal(t, "dry run: 7 jobs match (queue emails, states failed,queued, error \"MAILBOX\"): 0 would be cancelled, 7 would not (7 already finished); nothing changed\n", out)
	require.Equal(t, before, digest(t, b.Pool), "a dry run changes nothing")

	out = runner("job", "retry", "--queue", "emails", "--kind", "echo", "--error", "421")
	require.Equal(t, "30 failed jobs queued again\n", out)
	require.Equal(t, s.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'queued'`))
	require.Equal(t, s.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`))

	out = runner("job", "cancel", "--queue", "emails", "--kind", "echo", "--reason", "paused campaign")
	require.Equal(t, "30 jobs cancelled\n", out, "by default the unfinished jobs the filter matches")
	_, err := exec.CommandContext(b.Ctx, runnerBin, "job", "cancel", "--database-url", b.URL).CombinedOutput()
	require.Error(t, err, "no ID and no filter")
	out2, err := exec.CommandContext(b.Ctx, runnerBin, "job", "retry", "--error", strings.Repeat("x", 201), "--database-url", b.URL).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out2), "job filter error")
}

// Without script the dashboard asks on a confirmation page that names the count, and
// the confirmed action goes through every batch: the permanent failures the filter
// leaves out stay failed, and the outcome says how many were changed.
func TestBulkActionFromTheDashboardWithoutScript(t *testing.T) {
	b := testkit.Setup(t)
	s := newBulkScenario(t, b, 1203, 40)
	base := serveUI(t, testkit.AsRole(t, b, "pgrun_admin"), ui.Options{})
	list := "/jobs?queue=emails&kind=echo&state=failed&error=421"

	// The list shows, page by page, exactly the jobs the action will touch.
	var shown []int64
	for q := list; ; {
		p := listPage(t, base, strings.TrimPrefix(q, "/jobs?"))
		for _, j := range p.Data.Jobs {
			shown = append(shown, j.ID)
		}
		if p.Data.Older == 0 {
			break
		}
		q = fmt.Sprintf("%s&before=%d", list, p.Data.Older)
	}
	slices.Sort(shown)
	require.Equal(t, s.transient, shown)

	_, page := get(t, base+list)
	token := csrfFrom(t, page)
	require.Contains(t, page, `data-action="retry-matching"`)
	require.NotContains(t, page, "retry-failed", "no action on queue and kind alone")
	form := url.Values{"csrf": {token}, "return": {list}, "queue": {"emails"}, "kind": {"echo"}, "state": {"failed"},
		"error": {"421"}}
	resp, body := post(t, base+"/actions/retry-matching", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Retry the 1,203 jobs this filter matches (queue emails, kind echo, state failed, error text &#34;421&#34;)?")
	upto := regexp.MustCompile(`name="upto" value="(\d+)"`).FindStringSubmatch(body)
	require.NotNil(t, upto, body)
	require.Equal(t, fmt.Sprint(s.transient[len(s.transient)-1]), upto[1], "the ceiling is the last job counted")
	require.Equal(t, 1243, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`),
		"nothing happens before the confirmation")

	form.Set("upto", upto[1])
	resp, _ = post(t, base+"/actions/retry-matching", withConfirmed(form, token))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, list, resp.Header.Get("Location"))
	_, page = get(t, base+list, "Cookie", resp.Header.Get("Set-Cookie"))
	require.Contains(t, page, "1,203 jobs matched (queue emails, kind echo, state failed, error text &#34;421&#34;): 1,203 queued again.")
	require.Equal(t, s.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'queued'`))
	require.Equal(t, s.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`))

	// The script's steps: the count as JSON, then one batch a request.
	form = url.Values{"csrf": {token}, "return": {list}, "queue": {"emails"}, "kind": {"echo"}, "error": {"mailbox"}}
	resp, body = post(t, base+"/actions/cancel-matching", withMode(form, "ask"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var ask struct {
		Question string
		Matched  int64
		Upto     int64
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ask))
	require.Equal(t, int64(40), ask.Matched)
	require.Contains(t, ask.Question, "none would be cancelled: 40 already finished")
	form.Set("upto", fmt.Sprint(ask.Upto))
	resp, body = post(t, base+"/actions/cancel-matching", withMode(withConfirmed(form, token), "batch"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"done":true`)
	require.Equal(t, s.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and kind = 'echo' and status = 'failed'`))
}

func withMode(v url.Values, mode string) url.Values {
	out := url.Values{"mode": {mode}}
	for k, vs := range v {
		out[k] = vs
	}
	return out
}
