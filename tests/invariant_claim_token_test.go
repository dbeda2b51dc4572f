package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// Every claim gets a token of its own: claims of different jobs, and successive
// claims of one job, never share one, and the claim returns it.
func TestEveryClaimGetsItsOwnToken(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_jobs((select jsonb_agg(jsonb_build_object('kind', 'noop')) from generate_series(1, 50)))`)
	var claimed, distinct, null int
	c.QueryRow(`with x as (select * from pgrun.claim_jobs('default', 'w', 50, '30 seconds'))
		select count(*), count(distinct claim_id), count(*) filter (where claim_id is null) from x`, nil,
		&claimed, &distinct, &null)
	require.Equal(t, 50, claimed)
	require.Equal(t, 50, distinct)
	require.Zero(t, null)

	var id int64
	var first pgrun.ClaimID
	c.QueryRow(`select id, claim_id from pgrun.jobs order by id limit 1`, nil, &id, &first)
	var back *int64
	c.QueryRow(`select (pgrun.requeue_job($1, 1, 'again', 'w', $2)).id`, []any{id, first}, &back)
	require.NotNil(t, back)
	var again pgrun.ClaimID
	var attempt int
	c.QueryRow(`select claim_id, attempt from pgrun.claim_jobs('default', 'w2', 1, '30 seconds')`, nil, &again, &attempt)
	require.Equal(t, 2, attempt)
	require.False(t, again.IsZero())
	require.NotEqual(t, first, again, "a second claim of the same job has a new token")
}

// After an asynchronous failover undid a claim, the next claim of the job gets the
// same attempt number again, but not the same token: a report of the undone claim
// (by its token) matches none of the transitions, and the new claim's does.
func TestReportOfAnUndoneClaimNeverFinishesANewerClaim(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}, {"kind": "c"}, {"kind": "d"}, {"kind": "e"}, {"kind": "f"}]')`)
	type claim struct {
		id      int64
		attempt int
		token   pgrun.ClaimID
	}
	claimAll := func() map[int64]claim {
		rows, err := c.Conn.Query(b.Ctx, `select id, attempt, claim_id from pgrun.claim_jobs('default', 'w', 10, '30 seconds')`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[int64]claim{}
		for rows.Next() {
			var x claim
			require.NoError(t, rows.Scan(&x.id, &x.attempt, &x.token))
			out[x.id] = x
		}
		require.NoError(t, rows.Err())
		return out
	}
	old := claimAll()
	require.Len(t, old, 6)
	// What a promoted standby that never received the claims holds: the jobs queued,
	// as they were before.
	c.Exec(`update pgrun.jobs set status = 'queued', attempt = 0, claimed_by = null, claim_id = null,
		lease_expires_at = null, lease_length = null, started_at = null`)
	fresh := claimAll()
	require.Len(t, fresh, 6)
	for id, o := range old {
		require.Equal(t, o.attempt, fresh[id].attempt, "the attempt number is handed out again")
		require.NotEqual(t, o.token, fresh[id].token, "the token is not")
	}
	ids := make([]int64, 0, len(old))
	for id := range old {
		ids = append(ids, id)
	}
	before := map[int64]string{}
	for _, id := range ids {
		before[id] = testkit.RowJSON(t, b.Pool, id)
	}
	// Every report of the old claims, by their tokens (worker and attempt match).
	a, bb, cc, d, e, f := old[ids[0]], old[ids[1]], old[ids[2]], old[ids[3]], old[ids[4]], old[ids[5]]
	var n int
	c.QueryRow(`select count(*) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w', array[$3::uuid])`,
		[]any{a.id, a.attempt, a.token}, &n)
	require.Zero(t, n, "complete_jobs")
	var none *int64
	c.QueryRow(`select (pgrun.fail_job($1, $2, '{"message": "x"}', null, 'w', $3)).id`, []any{bb.id, bb.attempt, bb.token}, &none)
	require.Nil(t, none, "fail_job")
	c.QueryRow(`select (pgrun.retry_later($1, $2, '1 minute', 'x', 'w', $3)).id`, []any{cc.id, cc.attempt, cc.token}, &none)
	require.Nil(t, none, "retry_later")
	c.QueryRow(`select (pgrun.requeue_job($1, $2, 'x', 'w', $3)).id`, []any{d.id, d.attempt, d.token}, &none)
	require.Nil(t, none, "requeue_job")
	c.QueryRow(`select (pgrun.defer_job($1, $2, '[]', 1.0, 'w', $3)).id`, []any{e.id, e.attempt, e.token}, &none)
	require.Nil(t, none, "defer_job")
	var ok bool
	c.QueryRow(`select pgrun.complete_job($1, $2, null, 'w', $3)`, []any{f.id, f.attempt, f.token}, &ok)
	require.False(t, ok, "complete_job")
	c.Set(now.Add(10 * time.Second))
	var renewed []int64
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.renew_leases('w', $1, '30 seconds', $2) x`,
		[]any{ids, []pgrun.ClaimID{a.token, bb.token, cc.token, d.token, e.token, f.token}}, &renewed)
	require.Empty(t, renewed, "renew_leases")
	for _, id := range ids {
		require.Equal(t, before[id], testkit.RowJSON(t, b.Pool, id), "job %d changed", id)
	}

	// The new claims' reports apply.
	c.QueryRow(`select count(*) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], null, 'w', array[$3::uuid])`,
		[]any{a.id, a.attempt, fresh[a.id].token}, &n)
	require.Equal(t, 1, n)
	var failed *int64
	c.QueryRow(`select (pgrun.fail_job($1, $2, '{"message": "x"}', false, 'w', $3)).id`, []any{bb.id, bb.attempt, fresh[bb.id].token}, &failed)
	require.NotNil(t, failed)
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.renew_leases('w', $1, '30 seconds', $2) x`,
		[]any{[]int64{cc.id}, []pgrun.ClaimID{fresh[cc.id].token}}, &renewed)
	require.Equal(t, []int64{cc.id}, renewed)
	j, err := pgrun.GetJob(b.Ctx, b.Pool, a.id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.Equal(t, fresh[a.id].token, j.ClaimID, "the finished job names the claim that finished it")

	// Arrays of different lengths are refused, naming the counts.
	_, err = c.Conn.Exec(b.Ctx, `select pgrun.complete_jobs(array[1, 2]::bigint[], array[1, 1], null, 'w', array[gen_random_uuid()])`)
	pe := testkit.PgError(t, err, "complete_jobs with one claim id for two jobs")
	require.Equal(t, "22023", pe.Code)
	require.Contains(t, pe.Message, "1 claim ids")
}
