package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A runner never fails a job whose kind it has no handler for: claim_jobs hands out
// only the kinds a worker handles, so the job stays queued (for a runner that does),
// and queue_stats counts it as unhandled.
func TestUnknownKindsStayQueued(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.StartRunner(t, r)
	var resize int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('resize', '{"w": 64}')`).Scan(&resize))
	echo, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"after": "resize"})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the echo job ran", func() bool { return testkit.JobStatus(t, b, echo.ID) == pgrun.StatusSucceeded })
	testkit.Eventually(t, 10*time.Second, "the runner advertised its kinds", func() bool {
		var unhandled int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select unhandled from pgrun.queue_stats where queue = 'default'`).Scan(&unhandled))
		return unhandled == 1
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, resize)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Attempt, "never claimed")
	require.Zero(t, j.Failures)

	// From SQL: a worker in any language passes its kinds.
	var none int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('default', 'py-worker', 10, kinds => array['echo'])`).Scan(&none))
	require.Zero(t, none, "nothing of other kinds")
	var got int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('default', 'py-worker', 10, kinds => array['resize'])`).Scan(&got))
	require.Equal(t, resize, got)
}

// One bad report does not poison a batch: a result the server refuses (a NUL
// character in a string) fails that job alone, for good, with class bad_result and
// the server's reason; the other jobs of the batch complete once.
func TestBadResultFailsOnlyItsJob(t *testing.T) {
	b := testkit.Setup(t)
	gate := make(chan struct{})
	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 30}}})
	testkit.Handle(t, r, "result", func(ctx context.Context, j *runner.Job[struct{ Bad bool }]) (any, error) {
		<-gate // finish together, so the completions share a batch
		if j.Args.Bad {
			return map[string]string{"text": "nul \x00 here"}, nil
		}
		return map[string]int{"ok": 1}, nil
	})
	testkit.StartRunner(t, r)
	specs := make([]pgrun.JobSpec, 28)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "result", Args: map[string]bool{"Bad": i == 13}}
	}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "all running", func() bool { return testkit.CountStatus(t, b, pgrun.StatusRunning) == 28 })
	close(gate)
	testkit.Eventually(t, 15*time.Second, "all finished", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded)+testkit.CountStatus(t, b, pgrun.StatusFailed) == 28
	})
	require.Equal(t, 27, testkit.CountStatus(t, b, pgrun.StatusSucceeded))
	bad, err := pgrun.GetJob(b.Ctx, b.Pool, jobs[13].ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, bad.Status)
	require.Contains(t, string(bad.Error), `"class": "bad_result"`)
	require.Contains(t, string(bad.Error), "unsupported Unicode escape sequence", "the server's own reason")
	var attempts int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(attempt) from pgrun.jobs`).Scan(&attempts))
	require.Equal(t, 1, attempts, "nothing ran twice")
}

// A result over max_json_bytes fails its job (bad_result) inside complete_jobs; the
// other jobs of the call succeed.
func TestOversizeResultFailsOnlyItsJob(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop') from generate_series(1, 3)`)
	require.NoError(t, err)
	claims := testkit.ClaimN(t, b.Pool, "default", "w", 3, "30 seconds")
	require.Len(t, claims, 3)
	var finished []int64
	rows, err := b.Pool.Query(b.Ctx, `select pgrun.complete_jobs(array[$1, $2, $3]::bigint[], array[$4, $5, $6]::int[],
		array['{"ok": 1}', jsonb_build_object('big', (select string_agg(md5(i::text), '') from generate_series(1, 40000) i)), null]::jsonb[])`,
		claims[0].ID, claims[1].ID, claims[2].ID, claims[0].Attempt, claims[1].Attempt, claims[2].Attempt)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		finished = append(finished, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []int64{claims[0].ID, claims[1].ID, claims[2].ID}, finished)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, claims[0].ID))
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, claims[2].ID))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, claims[1].ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Contains(t, string(j.Error), `"class": "bad_result"`)
	require.Contains(t, string(j.Error), "over the limit of 1048576 bytes")
}

// Retryability is decided in SQL from the class a worker reports: permanent classes
// end the job whatever attempts are left; others retry; retryable => false forces it.
func TestPermanentClassesAreDecidedInSQL(t *testing.T) {
	b := testkit.Setup(t)
	for _, tc := range []struct {
		error     string
		retryable string
		want      pgrun.JobStatus
	}{
		{`{"class": "invalid_args", "message": "w must be positive"}`, "null", pgrun.StatusFailed},
		{`{"class": "bad_result", "message": "x"}`, "null", pgrun.StatusFailed},
		{`{"class": "invalid_args", "message": "x"}`, "true", pgrun.StatusFailed},
		{`{"class": "rate_limited", "message": "x"}`, "null", pgrun.StatusQueued},
		{`{"message": "plain"}`, "null", pgrun.StatusQueued},
		{`{"message": "plain"}`, "false", pgrun.StatusFailed},
	} {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', queue => 'perm')`).Scan(&id))
		c := testkit.ClaimN(t, b.Pool, "perm", "w", 1, "30 seconds")
		require.Len(t, c, 1)
		var status string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status::text from pgrun.fail_job($1, $2, $3::jsonb, $4::boolean)`,
			c[0].ID, c[0].Attempt, tc.error, nilIfNull(tc.retryable)).Scan(&status))
		require.Equal(t, string(tc.want), status, "%s retryable=%s", tc.error, tc.retryable)
		_, err := b.Pool.Exec(b.Ctx, `delete from pgrun.jobs where id = $1`, id)
		require.NoError(t, err)
	}
}

func nilIfNull(s string) *string {
	if s == "null" {
		return nil
	}
	return &s
}

// Every job gets a wall-clock backstop: the queue's default_timeout, else an hour;
// 0 means none, for a job or a queue.
func TestDefaultTimeoutBackstop(t *testing.T) {
	b := testkit.Setup(t)
	timeoutOf := func(sql string) *string {
		var s *string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select timeout::text from (`+sql+`) j`).Scan(&s))
		return s
	}
	require.Equal(t, "01:00:00", *timeoutOf(`select * from pgrun.enqueue_job('noop')`))
	require.Equal(t, "00:05:00", *timeoutOf(`select * from pgrun.enqueue_job('noop', timeout => '5 minutes')`))
	require.Nil(t, timeoutOf(`select * from pgrun.enqueue_job('noop', timeout => '0')`), "0: no timeout")
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('slow', default_timeout => '0'), pgrun.set_queue('quick', default_timeout => '10 seconds')`)
	require.NoError(t, err)
	require.Nil(t, timeoutOf(`select * from pgrun.enqueue_job('noop', queue => 'slow')`))
	require.Equal(t, "00:00:10", *timeoutOf(`select * from pgrun.enqueue_job('noop', queue => 'quick')`))
	require.Equal(t, "00:02:00", *timeoutOf(`select * from pgrun.enqueue_job('noop', queue => 'slow', timeout => '2 minutes')`))

	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Timeout(pgrun.NoTimeout))
	require.NoError(t, err)
	require.Nil(t, job.Timeout)
	job, err = pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	require.Equal(t, time.Hour, *job.Timeout)
}

// A waiting parent past its timeout fails (class timeout) with an event saying why,
// and what is left of its children is cancelled; while children keep finishing it is
// spared (a finishing child is its sign of life).
func TestWaitingParentTimesOut(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2031, 3, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var pid int64
	var pattempt int
	c.QueryRow(`select id from pgrun.enqueue_job('coordinator', queue => 'coord', timeout => '10 minutes')`, nil, &pid)
	c.QueryRow(`select attempt from pgrun.claim_jobs('coord', 'w', 1)`, nil, &pattempt)
	c.Exec(`select pgrun.defer_job($1, $2, '[{"kind": "part", "queue": "nobody"}, {"kind": "part", "queue": "nobody"}, {"kind": "part", "queue": "nobody"}]')`, pid, pattempt)

	// One child finishes at +9 min: at +15 min the parent is past its timeout but
	// showed life 6 minutes ago, within a 10-minute stall window.
	c.Set(t0.Add(9 * time.Minute))
	c.Exec(`select pgrun.complete_jobs(array_agg(id), array_agg(attempt)) from pgrun.claim_jobs('nobody', 'w', 1)`)
	c.Set(t0.Add(15 * time.Minute))
	c.Exec(`select pgrun.maintain(stall_window => '10 minutes')`)
	require.Equal(t, pgrun.StatusWaiting, testkit.JobStatus(t, b, pid))

	c.Set(t0.Add(20 * time.Minute))
	var out string
	c.QueryRow(`select pgrun.maintain(stall_window => '10 minutes')::text`, nil, &out)
	require.Contains(t, out, `"timed_out": 1`)
	p, err := pgrun.GetJob(b.Ctx, b.Pool, pid)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, p.Status)
	require.Contains(t, string(p.Error), `"class": "timeout"`)
	var cancelled, events int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1 and status = 'cancelled'`, pid).Scan(&cancelled))
	require.Equal(t, 2, cancelled, "what was left of its children")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events where job_id = $1
		and event = 'job.failed' and fields ->> 'class' = 'timeout' and message like 'waited%'`, pid).Scan(&events))
	require.Equal(t, 1, events)
}

// Nothing orphaned, nothing infinite: events for a job that does not exist, a
// parent_id that does not exist and a run_at of +-infinity are refused with a clear
// error, and nothing is written.
func TestOrphansAndInfinitiesAreRefused(t *testing.T) {
	b := testkit.Setup(t)
	before := testkit.Counts(t, b.Pool)
	for _, tc := range []struct{ sql, code, says string }{
		{`select pgrun.emit(987654, 'note')`, "P0002", "job 987654 does not exist"},
		{`insert into pgrun.job_events (job_id, event) values (987654, 'note')`, "23503", "job_events_job_fk"},
		{`select pgrun.enqueue_job('noop', parent_id => 987654)`, "22023", "parent job 987654 does not exist"},
		{`insert into pgrun.jobs (kind, parent_id) values ('noop', 987654)`, "22023", "parent job 987654 does not exist"},
		{`select pgrun.enqueue_job('noop', run_at => 'infinity')`, "22023", "run_at infinity is not a finite time"},
		{`select pgrun.enqueue_job('noop', run_at => '-infinity')`, "22023", "run_at -infinity is not a finite time"},
		{`select pgrun.enqueue_jobs('[{"kind": "noop", "run_at": "infinity"}]')`, "22023", "not a finite time"},
		{`select pgrun.enqueue_job('noop', args => jsonb_build_object('blob', repeat(md5('x'), 40000)))`, "22023", "over the limit of 1048576 bytes"},
	} {
		_, err := b.Pool.Exec(b.Ctx, tc.sql)
		pe := testkit.PgError(t, err, tc.sql)
		require.Equal(t, tc.code, pe.Code, tc.sql)
		require.Contains(t, pe.Message+pe.ConstraintName, tc.says, tc.sql)
	}
	require.Equal(t, before, testkit.Counts(t, b.Pool))
}

// Worker control off is carried out by SQL: the host's running jobs of the queue are
// requeued at once without spending an attempt, and each worker is told on
// pgrun_cancel. A worker in any language gets it by honouring the notification.
func TestWorkerControlOffRequeuesInSQL(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.worker_heartbeat('py-1', 'host-y', 1, array['default', 'other'])`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop'), pgrun.enqueue_job('noop', queue => 'other')`)
	require.NoError(t, err)
	mine := testkit.ClaimN(t, b.Pool, "default", "py-1", 1, "30 seconds")
	other := testkit.ClaimN(t, b.Pool, "other", "py-1", 1, "30 seconds")
	require.Len(t, mine, 1)
	require.Len(t, other, 1)
	l := testkit.Listen(t, b, "pgrun_cancel")

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_worker_control('host-y', 'default', 'off')`)
	require.NoError(t, err)
	j, err := pgrun.GetJob(b.Ctx, b.Pool, mine[0].ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Failures, "no attempt spent")
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, other[0].ID), "other queues go on")
	n := testkit.NextNotification(t, l, 5*time.Second)
	require.Equal(t, kitCancelPayload(mine[0]), n.Payload)
	var events int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events where job_id = $1 and event = 'job.requeued'`, mine[0].ID).Scan(&events))
	require.Equal(t, 1, events)
}

func kitCancelPayload(c testkit.Claim) string { return fmt.Sprintf("%d:%d", c.ID, c.Attempt) }

// Model affinity is a tiebreak within priority, not above it: a warm job at
// priority 100 does not go before a cold job at priority 0; within a priority the
// warm job goes first.
func TestAffinityIsATiebreakWithinPriority(t *testing.T) {
	b := testkit.Setup(t)
	var coldUrgent, warmLate, coldLate, warmLate2 int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100, model => 'm1')`).Scan(&warmLate))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 0)`).Scan(&coldUrgent))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100)`).Scan(&coldLate))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('embed', queue => 'gpu', priority => 100, model => 'm1')`).Scan(&warmLate2))
	claim := func() int64 {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('gpu', 'g', 1, null, array['m1'])`).Scan(&id))
		return id
	}
	require.Equal(t, coldUrgent, claim(), "priority first")
	require.Equal(t, warmLate, claim(), "then warm within priority 100")
	require.Equal(t, warmLate2, claim(), "warm before the earlier cold one")
	require.Equal(t, coldLate, claim())
}

// runner.Config is validated by runner.New, with one readable error naming the field.
func TestRunnerConfigIsValidated(t *testing.T) {
	b := testkit.Setup(t)
	for _, tc := range []struct {
		cfg  runner.Config
		says string
	}{
		{runner.Config{Lease: time.Nanosecond}, "lease 1ns is too short"},
		{runner.Config{Lease: -time.Second}, "lease -1s is too short"},
		{runner.Config{ShutdownGrace: -5 * time.Second}, "shutdown grace -5s is negative"},
		{runner.Config{WorkerID: strings.Repeat("w", 3000)}, "worker id is 3000 characters"},
		{runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1 << 40}}}, "workers 1099511627776 is not valid"},
		{runner.Config{PollInterval: time.Microsecond}, "poll interval 1µs is too short"},
	} {
		if tc.cfg.Queues == nil {
			tc.cfg.Queues = map[string]runner.QueueConfig{"default": {Workers: 8}}
		}
		_, err := runner.New(b.Pool, tc.cfg)
		require.ErrorContains(t, err, tc.says)
		require.NotContains(t, err.Error(), "\n")
	}
}
