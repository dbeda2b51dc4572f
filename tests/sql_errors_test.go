package tests

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/stretchr/testify/require"
)

// Bad input to any SQL function gets a SQLSTATE, a message naming the bad value and
// a HINT, and writes nothing.
func TestBadInputIsRejectedClearlyAndWritesNothing(t *testing.T) {
	b := testkit.Setup(t)
	// One running job, so transitions have something real to refuse.
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.claim_jobs('default', 'w', 1)`)
	require.NoError(t, err)

	cases := []struct {
		sql, code, names string
	}{
		{`select pgrun.enqueue_job('noop', queue => '')`, "22023", "''"},
		{`select pgrun.enqueue_job('noop', queue => 'Bad Q')`, "22023", "'Bad Q'"},
		{`select pgrun.enqueue_job('noop', queue => repeat('x', 64))`, "22023", "xxxx"},
		{`select pgrun.enqueue_job('noop', '[1]')`, "22023", "array"},
		{`select pgrun.enqueue_job('noop', '"s"')`, "22023", "string"},
		{`select pgrun.enqueue_job('noop', priority => -1)`, "22023", "-1"},
		{`select pgrun.enqueue_job('noop', priority => 40000)`, "22023", "40000"},
		{`select pgrun.enqueue_job('noop', max_attempts => 0)`, "22023", "max_attempts 0"},
		{`select pgrun.enqueue_job('noop', timeout => '-1 s')`, "22023", "-00:00:01"},
		{`select pgrun.enqueue_job('noop', unique_key => '')`, "22023", "unique_key"},
		{`select pgrun.enqueue_job('no kind!')`, "22023", "'no kind!'"},
		{`select pgrun.enqueue_job(null)`, "22023", "NULL"},
		{`select pgrun.enqueue_jobs('{"kind": "noop"}')`, "22023", "object"},
		{`select pgrun.enqueue_jobs('[{"kind": "noop"}, 7]')`, "22023", "element 1"},
		{`select pgrun.enqueue_jobs('[{"kind": "noop"}, {"kind": "noop", "queu": "x"}]')`, "22023", "'queu'"},
		{`select pgrun.enqueue_jobs('[{"kind": "noop"}, {"kind": "noop", "queue": "Bad"}]')`, "22023", "'Bad'"},
		{`select pgrun.claim_jobs('Bad', 'w', 1)`, "22023", "'Bad'"},
		{`select pgrun.claim_jobs('default', '', 1)`, "22023", "worker"},
		{`select pgrun.claim_jobs('default', 'w', 0)`, "22023", "claim size 0"},
		{`select pgrun.claim_jobs('default', 'w', 10001)`, "22023", "10001"},
		{`select pgrun.claim_jobs('default', 'w', 1, '0 s')`, "22023", "lease 00:00:00"},
		{`select pgrun.renew_leases('w', null, '-5 s')`, "22023", "-00:00:05"},
		{`select pgrun.complete_jobs('{1,2}', '{1}')`, "22023", "2 ids, 1 attempts"},
		{`select pgrun.fail_job(1, 1, '"boom"')`, "22023", `"boom"`},
		{`select pgrun.fail_job(1, 1, '{"msg": "boom"}')`, "22023", `"msg"`},
		{`select pgrun.retry_later(1, 1, '-1 minute')`, "22023", "-00:01:00"},
		{`select pgrun.cancel_job(999)`, "P0002", "job 999"},
		{`select pgrun.retry_job(999)`, "P0002", "job 999"},
		{`select pgrun.emit(999, 'x.y')`, "P0002", "job 999"},
		{`select pgrun.emit(1, 'x.y', level => 'loud')`, "22023", "'loud'"},
		{`select pgrun.emit(1, 'not a name')`, "22023", "'not a name'"},
		{`select pgrun.emit(1, 'x.y', '[1]')`, "22023", "array"},
		{`select pgrun.set_progress(1, -1)`, "22023", "-1"},
		{`select pgrun.maintain(lease_budget => -1)`, "22023", "-1"},
		{`select pgrun.maintain(batch => 0)`, "22023", "batch 0"},
		{`select pgrun.worker_heartbeat('', 'host', 1)`, "22023", "''"},
		{`select pgrun.worker_heartbeat('w', 'host', 1, state => 'sleepy')`, "22023", "'sleepy'"},
	}
	before, row := testkit.TableCounts(t, b), testkit.RowJSON(t, b.Pool, 1)
	for _, c := range cases {
		_, err := b.Pool.Exec(b.Ctx, c.sql)
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%s: expected an error, got %v", c.sql, err)
		require.Equal(t, c.code, pe.Code, "%s: %s", c.sql, pe.Message)
		require.Contains(t, pe.Message, c.names, "%s: the message names the bad value", c.sql)
		require.NotEmpty(t, strings.TrimSpace(pe.Hint), "%s: a HINT says what to do", c.sql)
	}
	require.Equal(t, before, testkit.TableCounts(t, b), "nothing was written")
	require.Equal(t, row, testkit.RowJSON(t, b.Pool, 1))
	var workers int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.workers`).Scan(&workers))
	require.Zero(t, workers)
}
