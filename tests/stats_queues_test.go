package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// queue_stats counts exactly up to stats_exact_limit() and says when a number is an
// estimate; a small table is sampled whole, so even its estimates are exact.
func TestQueueStatsEstimatesPastTheLimit(t *testing.T) {
	b := testkit.Setup(t)
	var limit int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.stats_exact_limit()`).Scan(&limit))
	_, err := b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, queue) select 'noop', 'small' from generate_series(1, 3)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, queue, run_at) values ('noop', 'small', now() + interval '1 hour')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, queue) select 'noop', 'big' from generate_series(1, $1::int)`, limit+2000)
	require.NoError(t, err)

	type row struct {
		queued, scheduled int
		estimated         bool
	}
	read := func(q string) row {
		var r row
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select queued, scheduled, estimated from pgrun.queue_stats where queue = $1`, q).
			Scan(&r.queued, &r.scheduled, &r.estimated))
		return r
	}
	require.Equal(t, row{queued: 3, scheduled: 1, estimated: false}, read("small"))
	big := read("big")
	require.True(t, big.estimated, "past the limit")
	require.Equal(t, limit+2000, big.queued, "a table this small is sampled whole")
	require.Zero(t, big.scheduled)
}
