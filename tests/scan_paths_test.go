package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
)

// A job row of the binding's own column list (sqlapi.JobColumns: claims, GetJob,
// ListJobs, EnqueueMany) is decoded from its wire bytes (pgrun.AppendJobs for many
// rows, Job.ScanRow for one); a row the decoder does not take (text format under the
// simple protocol) is scanned into a hand-written list of fields, and any other
// column list by pgx's by-name scan. All give the same Job, for a row with every
// nullable column NULL and for one with every column set (intervals with months and
// days, an array of errors, a claimed job's lease), read alone or together.
func TestJobScanPathsAgree(t *testing.T) {
	b := testkit.Setup(t)
	fresh, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	full, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", map[string]any{"a": 1})
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set claimed_by = 'w', lease_expires_at = now() + interval '30 s',
		heartbeat_at = now(), timeout = interval '1 mon 2 days 03:04:05.000006', started_at = now() - interval '1 s',
		finished_at = now(), result = '{"r": true}', error = '{"message": "m"}', progress_total = 7,
		parent_id = $2, run_id = 42, node = 'n', model = 'm', unique_key = 'k', meta = '{"x": 1}',
		children_failed = 1, child_errors = array['e1', 'e2'], failure_ratio = 0.25, dispatched_at = now(),
		concurrency_key = 'c', model_required = true, tenant = 't', deadline_at = now() + interval '1 h',
		claim_id = gen_random_uuid(), lease_length = interval '45 s'
		where id = $1`, full.ID, fresh.ID)
	require.NoError(t, err)
	ids := []int64{fresh.ID, full.ID}

	// The same columns in the opposite order: not the decoder's list.
	cols := strings.Split(sqlapi.JobColumns, ",")
	slices.Reverse(cols)
	byName := `select ` + strings.Join(cols, ",") + ` from pgrun.jobs where id = any ($1) order by id`
	hand := `select ` + sqlapi.JobColumns + ` from pgrun.jobs where id = any ($1) order by id`
	query := func(q string, args ...any) pgx.Rows {
		rows, err := b.Pool.Query(b.Ctx, q, args...)
		require.NoError(t, err)
		return rows
	}
	want, err := pgx.CollectRows(query(byName, ids), pgx.RowTo[pgrun.Job])
	require.NoError(t, err)
	require.Len(t, want, 2)

	perRow, err := pgx.CollectRows(query(hand, ids), pgx.RowTo[pgrun.Job])
	require.NoError(t, err)
	require.Equal(t, want, perRow, "Job.ScanRow")

	together, err := pgrun.AppendJobs(nil, query(hand, ids))
	require.NoError(t, err)
	require.Equal(t, want, together, "AppendJobs")

	// Under the simple protocol the values come as text: the decoder steps aside.
	simple, err := pgrun.AppendJobs(nil, query(hand, pgx.QueryExecModeSimpleProtocol, ids))
	require.NoError(t, err)
	require.Equal(t, want, simple, "AppendJobs, simple protocol")

	for _, j := range []pgrun.Job{together[0], together[1]} {
		if j.ID == full.ID {
			require.NotNil(t, j.FailureRatio)
			require.NotNil(t, j.Timeout)
			require.Equal(t, "771h4m5.000006s", j.Timeout.String(), "a month is 30 days, as pgx has it")
			require.Equal(t, "t", *j.Tenant)
			require.Equal(t, []string{"e1", "e2"}, j.ChildErrors)
			require.JSONEq(t, `{"x": 1}`, string(j.Meta))
		} else {
			require.Nil(t, j.ClaimedBy)
			require.Nil(t, j.DeadlineAt)
			require.Equal(t, []string{}, j.ChildErrors)
		}
	}
	// JSON values of different jobs share a block, capped: appending to one job's
	// args must not write into the next job's bytes.
	before := string(together[1].Args)
	_ = append(together[0].Args, "xxxxxxxx"...)
	require.Equal(t, before, string(together[1].Args))
}

// Enqueueing returns pgrun.enqueued rows (the job, then deduplicated), decoded the
// same way: the flag comes through, and the job equals what reading it back gives.
func TestEnqueuedScanPathsAgree(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	specs := []pgrun.JobSpec{
		{Kind: "noop", UniqueKey: "k1", Meta: map[string]any{"m": 1}},
		{Kind: "noop", UniqueKey: "k1"},
		{Kind: "other", Args: map[string]any{"a": "b"}},
	}
	jobs, err := c.EnqueueMany(b.Ctx, specs)
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.False(t, jobs[0].Deduplicated)
	require.True(t, jobs[1].Deduplicated, "the second spec of the same key")
	require.Equal(t, jobs[0].ID, jobs[1].ID)
	for _, j := range []*pgrun.Job{jobs[0], jobs[2]} {
		got, err := c.GetJob(b.Ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, *got, *j)
	}
}

// The decoder is what reads a claim: scanning 200 claimed jobs allocates less than
// once per job (0.17 when measured), where pgx's per-column scan allocated over
// fifteen times (a regression to it shows here, not in a timing). Not parallel:
// AllocsPerRun counts the whole process's allocations.
func TestClaimScanAllocations(t *testing.T) {
	b := testkit.NewDB(t)
	specs := make([]pgrun.JobSpec, 200)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "scan", Args: map[string]int{"i": i}}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select count(*) from pgrun.claim_jobs('scan', 'w', 200)`)
	require.NoError(t, err)
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	q := `select ` + sqlapi.JobColumns + ` from pgrun.jobs where queue = 'scan' order by id`
	dst := make([]pgrun.Job, 0, 200)
	var n int
	allocs := testing.AllocsPerRun(5, func() {
		rows, err := conn.Query(b.Ctx, q)
		require.NoError(t, err)
		got, err := pgrun.AppendJobs(dst[:0], rows)
		require.NoError(t, err)
		n = len(got)
		require.Equal(t, "running", string(got[0].Status))
		require.NotNil(t, got[0].LeaseExpiresAt)
	})
	require.Equal(t, 200, n)
	require.Less(t, allocs/float64(n), 1.0, "allocations per claimed job")
}
