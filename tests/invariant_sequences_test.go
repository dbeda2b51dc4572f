package tests

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// Sequences (issue 35, sql/functions/36_sequences.sql): the jobs of one queue with one
// sequence_key run one at a time, in id order, across all runners; a head that fails
// for good holds the rest until it is retried or cancelled (or, with the queue's
// sequence_on_failure 'continue', lets them go); retries, backoff, sleeps and lost
// leases keep the head the head.

// seqLog records, from the database's side, every job of a sequence that starts
// running or stops (succeeds, fails, is requeued by the reaper...), in the order the
// transitions happened, with the status it left (a start from pending is a handoff):
// a test-only trigger on pgrun.jobs.
var seqLog = []string{
	`create table seq_log (n bigint generated always as identity primary key, job_id bigint, key text, event text,
	   from_status text)`,
	`create function seq_log() returns trigger language plpgsql as $$
	 begin
	   insert into public.seq_log (job_id, key, event, from_status)
	   values (new.id, new.sequence_key, case when new.status = 'running' then 'start' else 'stop' end, old.status::text);
	   return null;
	 end $$`,
	`create trigger seq_log after update of status on pgrun.jobs for each row
	   when (new.sequence_key is not null and (new.status = 'running') <> (old.status = 'running'))
	   execute function public.seq_log()`,
}

// checkSeqLog fails the test if, in seq_log, a job of a sequence started while
// another job of its sequence ran, or started before a job of lower id of its
// sequence had (a job that stopped without finishing may start again: a rerun).
// It returns how many distinct jobs started.
func checkSeqLog(t *testing.T, b *testkit.DB) int {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `select job_id, key, event from seq_log order by n`)
	require.NoError(t, err)
	type ev struct {
		Job   int64  `db:"job_id"`
		Key   string `db:"key"`
		Event string `db:"event"`
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[ev])
	require.NoError(t, err)
	running := map[string]int64{}
	last := map[string]int64{}
	started := map[int64]bool{}
	for i, e := range evs {
		if e.Event == "start" {
			r, busy := running[e.Key]
			require.False(t, busy, "event %d: job %d of sequence %s started while job %d ran", i, e.Job, e.Key, r)
			require.GreaterOrEqual(t, e.Job, last[e.Key], "event %d: job %d of sequence %s started after job %d", i, e.Job, e.Key, last[e.Key])
			running[e.Key], last[e.Key], started[e.Job] = e.Job, e.Job, true
			continue
		}
		require.Equal(t, e.Job, running[e.Key], "event %d: job %d of sequence %s stopped, but it was not the one running", i, e.Job, e.Key)
		delete(running, e.Key)
	}
	return len(started)
}

// Three runner processes work a queue of 10,000 jobs in 50 sequences, and one that
// holds some is killed with SIGKILL in the middle: every job succeeds, and no job of a
// sequence ever starts while another of its sequence runs, nor before one enqueued
// ahead of it (the killed runner's jobs run again, as themselves, once the engine
// takes them back). The runners take next jobs by handoff as they complete heads; one handed
// to the killed runner comes back with its lease like any claim.
func TestSequencesRunOneAtATimeInOrderThroughSIGKILL(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, seqLog...)
	const jobs, keys = 10000, 50
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'sleep',
		'queue', 'seq', 'args', jsonb_build_object('ms', 20), 'sequence_key', 'account:' || (i %% %d)) order by i))
		from generate_series(1, %d) i`, keys, jobs))
	require.Equal(t, keys, countRows(t, b, `select count(*) from pgrun.jobs where status = 'queued'`), "one head per sequence")

	var procs []*testkit.Proc
	var workers []string
	for i := range 3 {
		workers = append(workers, fmt.Sprintf("seq-%d", i))
		procs = append(procs, startWorker(t, b, "--queues", "seq=20", "--lease", "2s", "--worker-id", workers[i]))
	}
	testkit.Eventually(t, 2*time.Minute, "a third of the jobs done", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) >= jobs/3
	})
	// Several, so that some are still in their handlers, not in a report already on
	// its way.
	killed, _ := stopHolding(t, b, procs, workers, 4, 10*time.Second)
	require.NoError(t, procs[killed].Cmd.Process.Signal(syscall.SIGKILL))
	testkit.Eventually(t, 4*time.Minute, "every job succeeded", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == jobs
	})

	require.Equal(t, jobs, checkSeqLog(t, b))
	require.Positive(t, countRows(t, b, `select count(*) from pgrun.jobs where attempt > 1`),
		"the kill left jobs of sequences running, which ran again")
	require.Positive(t, countRows(t, b, `select count(*) from seq_log where event = 'start' and from_status = 'pending'`),
		"the runners took next jobs of sequences by handoff, as they completed their heads")
}

// seqJobs enqueues one job of kind for each key (in order) in queue sq, and returns
// their ids.
func seqJobs(t *testing.T, q testkit.Querier, kind string, keys ...string) []int64 {
	t.Helper()
	ids := make([]int64, len(keys))
	for i, k := range keys {
		require.NoError(t, q.QueryRow(context.Background(),
			`select id from pgrun.enqueue_job($1, queue => 'sq', max_attempts => 2, sequence_key => $2)`, kind, k).Scan(&ids[i]))
	}
	return ids
}

// statuses reads the statuses of ids, in order.
func statuses(t *testing.T, q testkit.Querier, ids ...int64) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), `select status::text from unnest($1::bigint[]) with ordinality u(id, i)
		join pgrun.jobs j using (id) order by u.i`, ids)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// holdReason reads sequence_hold_reason of job id.
func holdReason(t *testing.T, q testkit.Querier, id int64) *string {
	t.Helper()
	var r *string
	require.NoError(t, q.QueryRow(context.Background(), `select pgrun.sequence_hold_reason(j) from pgrun.jobs j where id = $1`, id).Scan(&r))
	return r
}

// claimIDs claims up to 10 jobs of queue sq and returns their ids and attempts.
func claimIDs(t *testing.T, q testkit.Querier) []testkit.Claim {
	t.Helper()
	return testkit.ClaimN(t, q, "sq", "w", 10, "30 seconds")
}

func completeClaims(t *testing.T, q testkit.Querier, cs ...testkit.Claim) {
	t.Helper()
	for _, c := range cs {
		_, err := q.Exec(context.Background(), `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c.ID, c.Attempt)
		require.NoError(t, err)
	}
}

func failClaim(t *testing.T, q testkit.Querier, c testkit.Claim, retryable bool) {
	t.Helper()
	_, err := q.Exec(context.Background(), `select pgrun.fail_job($1, $2, '{"message": "boom"}', $3)`, c.ID, c.Attempt, retryable)
	require.NoError(t, err)
}

// A head that fails for good holds the rest of its sequence, each held job saying
// why, and new jobs of the sequence join them; retried, it is the head again and the
// sequence goes on in order.
func TestSequenceFailedHeadHoldsTheRestUntilRetried(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "noop", "k", "k", "k", "other")
	require.Equal(t, []string{"queued", "pending", "pending", "queued"}, statuses(t, b.Pool, ids...))
	require.Equal(t, fmt.Sprintf("behind job %d of sequence k, which is queued", ids[0]), *holdReason(t, b.Pool, ids[1]))
	require.Nil(t, holdReason(t, b.Pool, ids[0]))

	got := claimIDs(t, b.Pool)
	require.Equal(t, []int64{ids[0], ids[3]}, []int64{got[0].ID, got[1].ID}, "one head per sequence")
	failClaim(t, b.Pool, got[0], false)
	completeClaims(t, b.Pool, got[1])
	require.Equal(t, []string{"failed", "pending", "pending", "succeeded"}, statuses(t, b.Pool, ids...))
	want := fmt.Sprintf("behind job %d of sequence k, which failed for good (retry or cancel it)", ids[0])
	require.Equal(t, want, *holdReason(t, b.Pool, ids[2]))
	require.Empty(t, claimIDs(t, b.Pool), "nothing of the held sequence is claimable")
	late := seqJobs(t, b.Pool, "noop", "k")[0]
	require.Equal(t, "pending", statuses(t, b.Pool, late)[0], "a new job of a held sequence is held too")

	var key, status, reason string
	var head, held int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select sequence_key, head_id, head_status, held, reason from pgrun.sequences('sq')`).
		Scan(&key, &head, &status, &held, &reason))
	require.Equal(t, []any{"k", ids[0], "failed", int64(3), want}, []any{key, head, status, held, reason})

	_, err := b.Pool.Exec(b.Ctx, `select pgrun.retry_job($1)`, ids[0])
	require.NoError(t, err)
	require.Equal(t, []string{"queued", "pending", "pending"}, statuses(t, b.Pool, ids[0], ids[1], ids[2]))
	for _, want := range []int64{ids[0], ids[1], ids[2], late} {
		got := claimIDs(t, b.Pool)
		require.Len(t, got, 1)
		require.Equal(t, want, got[0].ID, "the sequence goes on in order")
		completeClaims(t, b.Pool, got...)
	}
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.sequence_holds`))
}

// Cancelling a failed head that holds its sequence, cancelling a queued head, or
// deleting a failed head (retention) each let the next job go.
func TestSequenceCancelledOrDeletedHeadLetsTheNextGo(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "noop", "k", "k", "k", "k")
	c := claimIDs(t, b.Pool)
	failClaim(t, b.Pool, c[0], false)
	var cancelled string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.cancel_job($1, 'give up')).status`, ids[0]).Scan(&cancelled))
	require.Equal(t, "cancelled", cancelled, "a failed head that holds its sequence can be cancelled")
	require.Equal(t, []string{"cancelled", "queued", "pending", "pending"}, statuses(t, b.Pool, ids...))

	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1)`, ids[1])
	require.NoError(t, err)
	require.Equal(t, []string{"queued", "pending"}, statuses(t, b.Pool, ids[2], ids[3]))

	c = claimIDs(t, b.Pool)
	failClaim(t, b.Pool, c[0], false)
	require.Equal(t, "pending", statuses(t, b.Pool, ids[3])[0])
	_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.jobs where id = $1`, ids[2]) // as prune_history does
	require.NoError(t, err)
	require.Equal(t, "queued", statuses(t, b.Pool, ids[3])[0])
	var done bool // a cancel of a failed job that holds nothing still changes nothing
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cancel_job($1) is null`, ids[0]).Scan(&done))
	require.True(t, done)
}

// With sequence_on_failure 'continue' a head that fails for good lets the next go.
func TestSequenceContinuesPastAFailureWhenItsQueueSaysSo(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "noop", "k", "k")
	testkit.ExecAll(t, b, `select pgrun.set_queue('sq', sequence_on_failure => 'continue')`)
	failClaim(t, b.Pool, claimIDs(t, b.Pool)[0], false)
	require.Equal(t, []string{"failed", "queued"}, statuses(t, b.Pool, ids...))
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.sequence_holds`))
}

// A head put back for later (a retry's backoff, retry_later, a durable sleep: queued
// with a later run_at) or requeued after its lease ran out stays the head: the next
// job of its sequence is not claimable meanwhile, and the head runs again first.
func TestSequenceHeadInBackoffOrWithALostLeaseIsNotOvertaken(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T00:00:00Z")
	c := testkit.PinClock(t, b, t0)
	ids := seqJobs(t, c.Conn, "noop", "k", "k")

	failClaim(t, c.Conn, claimIDs(t, c.Conn)[0], true) // backoff: queued, due later
	require.Equal(t, []string{"queued", "pending"}, statuses(t, c.Conn, ids...))
	require.Empty(t, claimIDs(t, c.Conn), "the successor does not overtake a head in backoff")
	c.Advance(time.Hour)
	got := claimIDs(t, c.Conn)
	require.Equal(t, ids[0], got[0].ID)
	c.Exec(`select pgrun.retry_later($1, $2, '10 minutes')`, got[0].ID, got[0].Attempt)
	require.Empty(t, claimIDs(t, c.Conn), "nor one put back for later")

	c.Advance(time.Hour)
	got = testkit.ClaimN(t, c.Conn, "sq", "w", 10, "30 seconds")
	require.Equal(t, []int64{ids[0]}, []int64{got[0].ID})
	c.Advance(31 * time.Second)
	c.Exec(`select pgrun.maintain()`) // the lease ran out: requeued
	require.Equal(t, []string{"queued", "pending"}, statuses(t, c.Conn, ids...))
	got = claimIDs(t, c.Conn)
	require.Len(t, got, 1)
	require.Equal(t, ids[0], got[0].ID, "the requeued head runs again before its successor")
	completeClaims(t, c.Conn, got...)
	require.Equal(t, []int64{ids[1]}, []int64{claimIDs(t, c.Conn)[0].ID})
}

// Every way in holds a sequence's later jobs behind its first: a plain INSERT of many
// rows, enqueue_jobs and the Go client's EnqueueMany each keep the specs' order, with
// one head per sequence.
func TestSequenceEveryEnqueuePathKeepsOrderWithOneHead(t *testing.T) {
	b := testkit.Setup(t)
	var insertIDs []int64
	rows, err := b.Pool.Query(b.Ctx, `insert into pgrun.jobs (kind, queue, sequence_key)
		values ('noop', 'sq', 'i1'), ('noop', 'sq', 'i2'), ('noop', 'sq', 'i1'), ('noop', 'sq', 'i2'), ('noop', 'sq', 'i1')
		returning id`)
	require.NoError(t, err)
	insertIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []string{"queued", "queued", "pending", "pending", "pending"}, statuses(t, b.Pool, insertIDs...))

	var batchIDs []int64
	rows, err = b.Pool.Query(b.Ctx, `select id from pgrun.enqueue_jobs('[{"kind": "noop", "queue": "sq", "sequence_key": "j1"},
		{"kind": "noop", "queue": "sq", "sequence_key": "j1"}, {"kind": "noop", "queue": "sq"},
		{"kind": "noop", "queue": "sq", "sequence_key": "i1"}, {"kind": "noop", "queue": "sq", "sequence_key": "j2"}]')`)
	require.NoError(t, err)
	batchIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []string{"queued", "pending", "queued", "pending", "queued"}, statuses(t, b.Pool, batchIDs...))

	specs := []pgrun.JobSpec{{Kind: "noop", Queue: "sq", SequenceKey: "g"}, {Kind: "noop", Queue: "sq", SequenceKey: "g"},
		{Kind: "noop", Queue: "sq", SequenceKey: "g"}}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	require.Equal(t, []pgrun.JobStatus{pgrun.StatusQueued, pgrun.StatusPending, pgrun.StatusPending},
		[]pgrun.JobStatus{jobs[0].Status, jobs[1].Status, jobs[2].Status})
	require.Equal(t, "g", *jobs[2].SequenceKey)
	require.Zero(t, countRows(t, b, `select count(*) from (select 1 from pgrun.jobs where status = 'pending'
		group by sequence_key having min(id) < (select min(h.id) from pgrun.jobs h
		  where h.sequence_key = pgrun.jobs.sequence_key and h.status = 'queued')) x`), "a held job before its head")

	// A workflow node takes no sequence_key (the DAG dispatch releases nodes).
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, queue, sequence_key, run_id, node, status)
		values ('noop', 'sq', 'n', 1, 'a', 'pending')`)
	require.Equal(t, "22023", testkit.PgError(t, err, "a node with a sequence_key").Code)
}

// A job of a sequence redriven while another is its sequence's head goes back in line:
// held, it runs after the head and before the jobs enqueued after it.
func TestSequenceRedrivenJobGoesBackInLine(t *testing.T) {
	b := testkit.Setup(t)
	ids := seqJobs(t, b.Pool, "noop", "k", "k", "k")
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1)`, ids[0])
	require.NoError(t, err)
	require.Equal(t, "queued", statuses(t, b.Pool, ids[1])[0])
	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.retry_job($1)).status`, ids[0]).Scan(&status))
	require.Equal(t, "pending", status)
	for _, want := range []int64{ids[1], ids[0], ids[2]} {
		got := claimIDs(t, b.Pool)
		require.Len(t, got, 1)
		require.Equal(t, want, got[0].ID)
		completeClaims(t, b.Pool, got...)
	}
}

// Concurrent enqueuers of one sequence, racing the completion of its heads, never
// make two heads and never leave the sequence without one: every job runs, one at a
// time, in id order.
func TestSequenceConcurrentEnqueuersNeverMakeTwoHeadsOrNone(t *testing.T) {
	b := testkit.Setup(t)
	const writers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop', queue => 'sq', sequence_key => 'hot')`)
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	enqueued := make(chan struct{})
	go func() { wg.Wait(); close(enqueued) }()
	var order []int64
	deadline := time.Now().Add(time.Minute)
	for len(order) < writers*each {
		require.True(t, time.Now().Before(deadline), "ran %d of %d", len(order), writers*each)
		got := claimIDs(t, b.Pool)
		require.LessOrEqual(t, len(got), 1, "two heads")
		if len(got) == 0 {
			select {
			case <-enqueued:
				require.Zero(t, countRows(t, b, `select count(*) from pgrun.jobs where status = 'pending'`),
					"held jobs and no head: the sequence stalled")
			default:
			}
			continue
		}
		order = append(order, got[0].ID)
		completeClaims(t, b.Pool, got...)
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := 1; i < len(order); i++ {
		require.Less(t, order[i-1], order[i], "out of order")
	}
}

// A REPEATABLE READ transaction cannot see what committed after it began, so it never
// makes a head on its own say: what it enqueues is held, and maintain() settles the
// sequence (recheck_sequences) once it has committed.
func TestSequenceEnqueuedInRepeatableReadIsSettledByMaintain(t *testing.T) {
	b := testkit.Setup(t)
	tx, err := b.Pool.BeginTx(b.Ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	id := seqJobs(t, tx, "noop", "rr")[0]
	require.NoError(t, tx.Commit(b.Ctx))
	require.Equal(t, "pending", statuses(t, b.Pool, id)[0])
	require.Contains(t, *holdReason(t, b.Pool, id), "maintain() settles it")
	var out string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain() -> 'steps' -> 'recheck_sequences' ->> 'promoted'`).Scan(&out))
	require.Equal(t, "1", out)
	require.Equal(t, "queued", statuses(t, b.Pool, id)[0])
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.sequence_rechecks`))

	// A head ended in such a transaction moves what it can see, and leaves the rest to
	// the recheck: here its successor was committed before it began.
	next := seqJobs(t, b.Pool, "noop", "rr")[0]
	c := claimIDs(t, b.Pool)
	tx, err = b.Pool.BeginTx(b.Ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	completeClaims(t, tx, c...)
	require.NoError(t, tx.Commit(b.Ctx))
	require.Equal(t, "queued", statuses(t, b.Pool, next)[0])
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.sequence_rechecks`))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.maintain() -> 'steps' -> 'recheck_sequences' ->> 'promoted'`).Scan(&out))
	require.Equal(t, "0", out, "nothing was left to settle")
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.sequence_rechecks`))
}

// An ephemeral queue deletes a head as it succeeds: the next job goes all the same.
func TestSequenceInAnEphemeralQueueGoesOnAsHeadsAreDeleted(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('sq', ephemeral => true)`)
	ids := seqJobs(t, b.Pool, "noop", "k", "k", "k")
	for i := range ids {
		got := claimIDs(t, b.Pool)
		require.Len(t, got, 1)
		require.Equal(t, ids[i], got[0].ID)
		completeClaims(t, b.Pool, got...)
	}
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.jobs`))
}

// An enqueuer (pgrun_enqueuer) enqueues jobs of a sequence and debounced ones with its
// own privileges, by the functions and by a plain INSERT; the parts that write what it
// may not (a promotion, a fold) run as the engine.
func TestSequencesAndDebounceWorkForAnEnqueuer(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "pgrun_enqueuer")
	testkit.Allowed(t, b, p, `select pgrun.enqueue_job('noop', queue => 'sq', sequence_key => 'e')`)
	testkit.Allowed(t, b, p, `insert into pgrun.jobs (kind, queue, sequence_key) values ('noop', 'sq', 'e'), ('noop', 'sq', 'e')`)
	testkit.Allowed(t, b, p, `select pgrun.enqueue_job('noop', queue => 'sq', debounce_key => 'd', debounce => '1 minute')`)
	testkit.Allowed(t, b, p, `select pgrun.enqueue_job('noop', '{"v": 2}', queue => 'sq', debounce_key => 'd', debounce => '1 minute')`)
	testkit.Allowed(t, b, p, `select count(*) from pgrun.sequences()`)
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs where sequence_key = 'e' and status = 'queued'`))
	require.Equal(t, 2, countRows(t, b, `select count(*) from pgrun.jobs where sequence_key = 'e' and status = 'pending'`))
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs where debounce_key = 'd' and args = '{"v": 2}'`))
	testkit.Refused(t, b, p, "22023", `insert into pgrun.jobs (kind, queue, debounce_key) values ('noop', 'sq', 'd')`)
}

// In the tenant mode a sequence is its tenant's: two tenants' jobs with one key in one
// queue are two sequences, and one tenant's plain INSERT is held behind its own head
// only; sequences() lists the caller's own.
func TestSequencesAreEachTenantsOwn(t *testing.T) {
	k := newTenantKit(t)
	a := one[int64](t, k.Ctx, k.acme, `select id from pgrun.enqueue_job('noop', queue => 'sq', sequence_key => 'shared')`)
	g := one[int64](t, k.Ctx, k.globex, `insert into pgrun.jobs (kind, queue, sequence_key) values ('noop', 'sq', 'shared') returning id`)
	a2 := one[int64](t, k.Ctx, k.acme, `insert into pgrun.jobs (kind, queue, sequence_key) values ('noop', 'sq', 'shared') returning id`)
	require.Equal(t, []string{"queued", "queued", "pending"}, statuses(t, k.Pool, a, g, a2))
	require.Equal(t, "shared", one[string](t, k.Ctx, k.acme, `select sequence_key from pgrun.sequences()`))
	require.Zero(t, one[int64](t, k.Ctx, k.globex, `select count(*) from pgrun.sequences()`), "globex holds nothing")
}
