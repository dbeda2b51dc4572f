package testkit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// JobStatus reads one job's status.
func JobStatus(t testing.TB, db *DB, id int64) pgrun.JobStatus {
	t.Helper()
	j, err := pgrun.GetJob(db.Ctx, db.Pool, id)
	require.NoError(t, err)
	return j.Status
}

// CountStatus counts the jobs in status s.
func CountStatus(t testing.TB, db *DB, s pgrun.JobStatus) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(db.Ctx, `select count(*) from pgrun.jobs where status = $1::pgrun.job_status`, string(s)).Scan(&n))
	return n
}

// Claim is one claimed job: its id and the attempt that is its claim token.
type Claim struct {
	ID      int64
	Attempt int32
}

// ClaimN claims up to n jobs of queue for worker with the given lease and returns
// them in id order.
func ClaimN(t testing.TB, q Querier, queue, worker string, n int, lease string) []Claim {
	t.Helper()
	rows, err := q.Query(context.Background(),
		`select id, attempt from pgrun.claim_jobs($1, $2, $3, $4::interval) order by id`, queue, worker, n, lease)
	require.NoError(t, err)
	var out []Claim
	var c Claim
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.Attempt}, func() error {
		out = append(out, c)
		return nil
	})
	require.NoError(t, err)
	return out
}

// ClaimOne claims one job of queue default for worker and returns (id, attempt); it
// fails the test if there is none.
func ClaimOne(t testing.TB, q Querier, worker string, lease string) (int64, int) {
	t.Helper()
	var id int64
	var attempt int
	require.NoError(t, q.QueryRow(context.Background(),
		`select id, attempt from pgrun.claim_jobs('default', $1, 1, $2::interval)`, worker, lease).Scan(&id, &attempt))
	return id, attempt
}

// RowJSON is a job row as JSON text: comparing it before and after a call proves the
// call changed nothing.
func RowJSON(t testing.TB, q Querier, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, q.QueryRow(context.Background(), `select row_to_json(j)::text from pgrun.jobs j where id = $1`, id).Scan(&s))
	return s
}

// Snapshot is everything a call could change about one job: the whole row as JSON
// and the number of its audit events.
type Snapshot struct {
	Row    string
	Events int
}

// Snap takes job id's Snapshot.
func Snap(t testing.TB, q Querier, id int64) Snapshot {
	t.Helper()
	var s Snapshot
	require.NoError(t, q.QueryRow(context.Background(),
		`select row_to_json(j)::text, (select count(*) from pgrun.job_events e where e.job_id = j.id)
		 from pgrun.jobs j where j.id = $1`, id).Scan(&s.Row, &s.Events))
	return s
}

// TableCounts counts the rows of jobs and job_events.
func TableCounts(t testing.TB, db *DB) [2]int {
	t.Helper()
	var c [2]int
	require.NoError(t, db.Pool.QueryRow(db.Ctx, `select (select count(*) from pgrun.jobs), (select count(*) from pgrun.job_events)`).Scan(&c[0], &c[1]))
	return c
}

// Counts counts the rows of every table bad input must leave alone.
func Counts(t testing.TB, q Querier) map[string]int {
	t.Helper()
	var jobs, events, workers, queues, archive int
	require.NoError(t, q.QueryRow(context.Background(), `select
		(select count(*) from pgrun.jobs), (select count(*) from pgrun.job_events),
		(select count(*) from pgrun.workers), (select count(*) from pgrun.queues),
		(select count(*) from pgrun.jobs_archive)`).Scan(&jobs, &events, &workers, &queues, &archive))
	return map[string]int{"jobs": jobs, "job_events": events, "workers": workers, "queues": queues, "jobs_archive": archive}
}

// NullID runs sql, which selects one nullable bigint, and returns it (nil: NULL).
func NullID(t testing.TB, q Querier, sql string, args ...any) *int64 {
	t.Helper()
	var id *int64
	require.NoError(t, q.QueryRow(context.Background(), sql, args...).Scan(&id))
	return id
}
