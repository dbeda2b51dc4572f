package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

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
