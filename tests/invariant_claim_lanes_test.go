package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// laneClaim claims n jobs of queue's lane (with the key after, nil: from the lane's
// start) and returns their ids in claim order.
func laneClaim(t *testing.T, b *testkit.DB, queue string, n, lane int, after *pgrun.Job) []int64 {
	t.Helper()
	var p *int16
	var runAt *time.Time
	var id *int64
	if after != nil {
		p, runAt, id = &after.Priority, &after.RunAt, &after.ID
	}
	rows, err := b.Pool.Query(b.Ctx, `select id from pgrun.claim_jobs($1, 'w1', $2, lane => $3,
		after_priority => $4, after_run_at => $5, after_id => $6) order by priority, run_at, id`,
		queue, n, lane, p, runAt, id)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// A queue gets claim lanes only once its lane index exists, and the refusal names the
// statement that makes it; SetQueue makes it. A claim of a lane takes that lane's
// jobs only (id % lanes), in key order, resuming after the lane's key with the more
// urgent jobs first; a lane the queue does not have (a runner's stale look) claims the
// whole queue from its start; a claim without a lane is unchanged.
func TestClaimLanesTakeTheirOwnJobsInOrder(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_queue('laned', claim_lanes => 4)`)
	pe := testkit.PgError(t, err, "lanes without their index")
	require.Equal(t, "55000", pe.Code)
	require.Contains(t, pe.Hint, "create index concurrently if not exists jobs_lanes_")
	for _, bad := range []int{1, 65} {
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_queue('laned', claim_lanes => $1)`, bad)
		require.Equal(t, "22023", testkit.SQLState(err), "claim_lanes %d: %v", bad, err)
	}
	_, err = c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{ClaimLanes: new(1)})
	require.ErrorIs(t, err, pgrun.ErrInvalidInput)
	var laned int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.queues where claim_lanes is not null`).Scan(&laned))
	require.Zero(t, laned, "refused settings changed nothing")

	q, err := c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{ClaimLanes: new(4)})
	require.NoError(t, err)
	require.Equal(t, 4, *q.ClaimLanes)
	_, err = c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{ClaimLanes: new(4)})
	require.NoError(t, err, "setting the same lanes again finds the index made")

	specs := make([]pgrun.JobSpec, 16)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "laned", Priority: 1}
	}
	jobs, err := c.EnqueueMany(b.Ctx, specs)
	require.NoError(t, err)
	inLane := func(l int64) []*pgrun.Job {
		var in []*pgrun.Job
		for _, j := range jobs {
			if j.ID%4 == l {
				in = append(in, j)
			}
		}
		return in
	}
	ids := func(js ...*pgrun.Job) []int64 {
		var out []int64
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	one := inLane(1)
	require.Len(t, one, 4)
	require.Equal(t, ids(one[0], one[1]), laneClaim(t, b, "laned", 2, 1, nil), "lane 1's first two")

	urgent, err := c.Enqueue(b.Ctx, "noop", nil, pgrun.Queue("laned"), pgrun.Priority(0))
	require.NoError(t, err)
	got := laneClaim(t, b, "laned", 8, int(urgent.ID%4), inLane(urgent.ID % 4)[len(inLane(urgent.ID%4))-1])
	require.Equal(t, []int64{urgent.ID}, got, "after the lane's last key: only the more urgent job of that lane")
	require.Equal(t, ids(one[2], one[3]), laneClaim(t, b, "laned", 8, 1, one[1]), "lane 1 resumed after its key")

	first := func(l int64) int64 { return inLane(l)[0].ID }
	all := laneClaim(t, b, "laned", 1, 7, one[3])
	require.Equal(t, []int64{min(first(0), first(2), first(3))}, all,
		"a lane the queue lacks: the whole queue from its start, the key ignored")

	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('laned', 'w1', 100)`).Scan(&n))
	require.Equal(t, 17-6, n, "a claim without a lane takes what is left in every lane (6 of 17 claimed above)")

	for _, bad := range []int{-1, 64} {
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('laned', 'w1', 1, lane => $1)`, bad)
		require.Equal(t, "22023", testkit.SQLState(err), "lane %d: %v", bad, err)
	}
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.lane_index_ddl('Bad Name', 4)`)
	require.Equal(t, "22023", testkit.SQLState(err))

	laneIndexes := func() (n int) {
		t.Helper()
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_class
			where relname like 'jobs\_lanes\_%' and relkind = 'i'`).Scan(&n))
		return n
	}
	require.Equal(t, 1, laneIndexes())
	q, err = c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{ClaimLanes: new(8)})
	require.NoError(t, err)
	require.Equal(t, 8, *q.ClaimLanes)
	require.Equal(t, 1, laneIndexes(), "another count: a new index, the old one dropped")
	q, err = c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{Reset: []string{"claim_lanes"}})
	require.NoError(t, err)
	require.Nil(t, q.ClaimLanes, "reset: no lanes")
	require.Zero(t, laneIndexes(), "reset: the lane index dropped")
}

// A lane claim reads the queue's lane index, not the whole queue's claim index with
// a filter (which would read every lane's entries to find one lane's), on a table of
// realistic size; a plan check, not a timing.
func TestClaimLanesUseTheLaneIndex(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	_, err = c.SetQueue(b.Ctx, "hot", pgrun.QueueSettings{ClaimLanes: new(4)})
	require.NoError(t, err)
	seedHot(t, b, 50000)
	_, err = b.Pool.Exec(b.Ctx, `analyze pgrun.jobs`)
	require.NoError(t, err)

	conn, plans := explainSession(t, b)
	for _, call := range []string{
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 500, lane => 2)`,
		`select count(*) from pgrun.claim_jobs('hot', 'w1', 500, lane => 3, after_priority => 0::smallint,
		   after_run_at => now() - interval '1 hour', after_id => 1)`,
	} {
		_, err := conn.Exec(b.Ctx, call)
		require.NoError(t, err, call)
	}
	var lanePlans int
	for _, p := range plans() {
		if strings.Contains(p, "(c.id % 4)") {
			lanePlans++
			require.Contains(t, p, "Index Scan using jobs_lanes_", "a lane claim's plan:\n%s", p)
		}
	}
	require.Equal(t, 2, lanePlans, "auto_explain reported both lane claims")
}
