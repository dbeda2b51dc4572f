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

// pgrun.Job scans a row of the binding's own column list (sqlapi.JobColumns: claims,
// GetJob, EnqueueMany) by a hand-written path and any other column list by pgx's
// by-name scan. Both give the same Job, for a row with every nullable column NULL
// and for one with every column set (intervals with months and days included).
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

	// The same columns in the opposite order: not the hand-written path's list.
	cols := strings.Split(sqlapi.JobColumns, ",")
	slices.Reverse(cols)
	byName := `select ` + strings.Join(cols, ",") + ` from pgrun.jobs where id = $1`
	hand := `select ` + sqlapi.JobColumns + ` from pgrun.jobs where id = $1`
	for _, id := range []int64{fresh.ID, full.ID} {
		scan := func(q string) pgrun.Job {
			rows, err := b.Pool.Query(b.Ctx, q, id)
			require.NoError(t, err)
			j, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[pgrun.Job])
			require.NoError(t, err)
			return j
		}
		got, want := scan(hand), scan(byName)
		require.Equal(t, want, got, "job %d", id)
		if id == full.ID {
			require.NotNil(t, got.FailureRatio)
			require.NotNil(t, got.Timeout)
			require.Equal(t, "771h4m5.000006s", got.Timeout.String(), "a month is 30 days, as pgx has it")
			require.Equal(t, "t", *got.Tenant)
		} else {
			require.Nil(t, got.ClaimedBy)
			require.Nil(t, got.DeadlineAt)
		}
	}
}
