package tests

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// kitBadInput is one call with bad input and what its error must say.
type kitBadInput struct {
	name, sql string
	code      string // the SQLSTATE
	names     string // a piece of the message that names the bad value
	bug       string // non-empty: a known bug, described in the BUG comments below
}

// Bad input to the SQL API, beyond tests/sql_errors_test.go: NULLs, JSON of the wrong
// type, values out of range inside an enqueue_jobs spec, and the arguments of
// maintain(). Each call must fail with the SQLSTATE, a message naming the bad value
// and a HINT, and write nothing to any table; each case is checked on its own.
//
// BUG (enqueue_jobs, priority 40000): the spec's priority is parsed as integer and
// then stored in the smallint column, so an out-of-range priority fails with 22003
// "smallint out of range", no HINT and no mention of the value. enqueue_job checks
// priority > 32767 itself (22023, HINT), and docs/sql-api.md promises 22023 for
// "priority outside 0–32767" whichever function is used.
//
// BUG (enqueue_jobs, a value of the wrong JSON type: "priority": "high", "timeout":
// "soon"): jsonb_to_recordset's cast fails with 22P02 / 22007 and no HINT, and the
// message does not say which element or key is wrong (in a batch of thousands).
// Expected: 22023 naming the element and key, with a HINT, like the other
// enqueue_jobs checks.
//
// BUG (maintain, stall_window and default_retention): neither is validated. A
// negative stall_window makes every job past its timeout "silent" however recently
// it beat; a negative (or zero) default_retention makes maintain() delete every
// finished job of every queue without a retention of its own, including jobs that
// finished a moment ago. set_queue rejects a non-positive retention with 22023
// (check_positive_interval); maintain() should do the same for both intervals.
func TestMoreBadInputIsRejectedAndWritesNothing(t *testing.T) {
	b := testkit.Setup(t)
	// A running job (id 1) and a job that has just succeeded (id 2), so that
	// transitions and maintain() have something real to change if they wrongly would.
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_jobs('[{"kind": "noop"}, {"kind": "noop", "queue": "done"}]')`)
	require.NoError(t, err)
	testkit.ClaimN(t, b.Pool, "default", "w", 1, "1 hour")
	done := testkit.ClaimN(t, b.Pool, "done", "w", 1, "1 hour")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, done[0].ID, done[0].Attempt)
	require.NoError(t, err)

	cases := []kitBadInput{
		{"enqueue_job args JSON null", `select pgrun.enqueue_job('noop', 'null'::jsonb)`, "22023", "got null", ""},
		{"enqueue_job args number", `select pgrun.enqueue_job('noop', '5')`, "22023", "got number", ""},
		{"enqueue_job meta array", `select pgrun.enqueue_job('noop', meta => '[1]')`, "22023", "got array", ""},
		{"enqueue_job priority 32768", `select pgrun.enqueue_job('noop', priority => 32768)`, "22023", "32768", ""},
		{"enqueue_job max_attempts -1", `select pgrun.enqueue_job('noop', max_attempts => -1)`, "22023", "-1", ""},
		{"enqueue_job timeout negative", `select pgrun.enqueue_job('noop', timeout => '-1 s')`, "22023", "-00:00:01", ""},
		{"enqueue_job on_conflict", `select pgrun.enqueue_job('noop', on_conflict => 'merge')`, "22023", "'merge'", ""},
		{"enqueue_job unique_window", `select pgrun.enqueue_job('noop', unique_key => 'k', unique_window => '-1 hour')`, "22023", "-01:00:00", ""},
		{"enqueue_job kind too long", `select pgrun.enqueue_job('k' || repeat('x', 128))`, "22023", "xxxx", ""},
		{"enqueue_jobs JSON null", `select pgrun.enqueue_jobs('null')`, "22023", "got null", ""},
		{"enqueue_jobs SQL NULL", `select pgrun.enqueue_jobs(null)`, "22023", "NULL", ""},
		{"enqueue_jobs string", `select pgrun.enqueue_jobs('"noop"')`, "22023", "got string", ""},
		{"enqueue_jobs missing kind", `select pgrun.enqueue_jobs('[{"kind": "noop"}, {"args": {}}]')`, "22023", "NULL", ""},
		{"enqueue_jobs bad last element", `select pgrun.enqueue_jobs('[{"kind": "noop"}, {"kind": "noop", "queue": "x"}, {"kind": "noop", "max_attempts": 0}]')`, "22023", "max_attempts 0", ""},
		{"enqueue_jobs negative timeout", `select pgrun.enqueue_jobs('[{"kind": "noop", "timeout": "-5 seconds"}]')`, "22023", "-00:00:05", ""},
		{"enqueue_jobs args string", `select pgrun.enqueue_jobs('[{"kind": "noop", "args": "x"}]')`, "22023", "got string", ""},
		{"enqueue_jobs priority 40000", `select pgrun.enqueue_jobs('[{"kind": "noop", "priority": 40000}]')`, "22023", "40000", "smallint cast"},
		{"enqueue_jobs priority string", `select pgrun.enqueue_jobs('[{"kind": "noop", "priority": "high"}]')`, "22023", "priority", "type cast"},
		{"enqueue_jobs timeout string", `select pgrun.enqueue_jobs('[{"kind": "noop", "timeout": "soon"}]')`, "22023", "timeout", "type cast"},
		{"claim_jobs NULL queue", `select pgrun.claim_jobs(null, 'w', 1)`, "22023", "NULL", ""},
		{"claim_jobs NULL worker", `select pgrun.claim_jobs('default', null, 1)`, "22023", "worker", ""},
		{"claim_jobs NULL n", `select pgrun.claim_jobs('default', 'w', null)`, "22023", "NULL", ""},
		{"claim_jobs negative n", `select pgrun.claim_jobs('default', 'w', -3)`, "22023", "-3", ""},
		{"claim_jobs negative lease", `select pgrun.claim_jobs('default', 'w', 1, '-1 minute')`, "22023", "-00:01:00", ""},
		{"renew_leases lease 0", `select pgrun.renew_leases('w', null, '0 s')`, "22023", "00:00:00", ""},
		{"complete_jobs results length", `select pgrun.complete_jobs('{1}', '{1}', '{}')`, "22023", "0 results", ""},
		{"complete_jobs attempts NULL", `select pgrun.complete_jobs('{1}', null)`, "22023", "1 ids, 0 attempts", ""},
		{"complete_jobs ids NULL", `select pgrun.complete_jobs(null, null)`, "22023", "NULL ids", ""},
		{"fail_job NULL error", `select pgrun.fail_job(1, 1, null)`, "22023", "NULL", ""},
		{"fail_job numeric message", `select pgrun.fail_job(1, 1, '{"message": 5}')`, "22023", `"message": 5`, ""},
		{"retry_later NULL delay", `select pgrun.retry_later(1, 1, null)`, "22023", "NULL", ""},
		{"set_progress negative total", `select pgrun.set_progress(1, 1, -1)`, "22023", "-1", ""},
		{"set_progress NULL current", `select pgrun.set_progress(1, null)`, "22023", "NULL", ""},
		{"emit NULL event", `select pgrun.emit(1, null)`, "22023", "NULL", ""},
		{"emit NULL level", `select pgrun.emit(1, 'x.y', level => null)`, "22023", "NULL", ""},
		{"emit fields string", `select pgrun.emit(1, 'x.y', '"s"')`, "22023", "got string", ""},
		{"emit NULL job", `select pgrun.emit(null, 'x.y')`, "P0002", "job NULL", ""},
		{"cancel_job NULL", `select pgrun.cancel_job(null)`, "P0002", "job NULL", ""},
		{"retry_job NULL", `select pgrun.retry_job(null)`, "P0002", "job NULL", ""},
		{"retry_job unknown", `select pgrun.retry_job(123456789)`, "P0002", "job 123456789", ""},
		{"worker_heartbeat empty host", `select pgrun.worker_heartbeat('w', '', 1)`, "22023", "''", ""},
		{"worker_heartbeat NULL state", `select pgrun.worker_heartbeat('w', 'h', 1, state => null)`, "22023", "NULL", ""},
		{"worker_heartbeat cadence 0", `select pgrun.worker_heartbeat('w', 'h', 1, cadence => '0 s')`, "22023", "cadence", ""},
		{"maintain NULL budget", `select pgrun.maintain(lease_budget => null)`, "22023", "NULL", ""},
		{"maintain NULL batch", `select pgrun.maintain(batch => null)`, "22023", "NULL", ""},
		{"maintain negative stall_window", `select pgrun.maintain(stall_window => '-1 minute')`, "22023", "-00:01:00", "not validated"},
		{"maintain negative default_retention", `select pgrun.maintain(default_retention => '-1 day')`, "22023", "-1 days", "not validated; prunes every finished job"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.bug != "" {
				t.Logf("BUG: known to fail (%s); see the comment on TestMoreBadInputIsRejectedAndWritesNothing", c.bug)
			}
			before, running := testkit.Counts(t, b.Pool), testkit.Snap(t, b.Pool, 1)
			_, err := b.Pool.Exec(b.Ctx, c.sql)
			if err == nil {
				after := testkit.Counts(t, b.Pool)
				t.Fatalf("%s was accepted (tables before %v, after %v)", c.sql, before, after)
			}
			pe := testkit.PgError(t, err, c.sql)
			require.Equal(t, c.code, pe.Code, "%s: %s", c.sql, pe.Message)
			require.Contains(t, pe.Message, c.names, "%s: the message names the bad value", c.sql)
			require.NotEmpty(t, strings.TrimSpace(pe.Hint), "%s: a HINT says what to do", c.sql)
			require.Equal(t, before, testkit.Counts(t, b.Pool), "%s wrote something", c.sql)
			require.Equal(t, running, testkit.Snap(t, b.Pool, 1), "%s changed the running job", c.sql)
		})
	}
}

// enqueue_job treats an explicit NULL queue like its other NULL arguments: the
// default ('default'), as the BEFORE INSERT trigger does for a plain INSERT. (NULL is
// therefore not a bad queue name for enqueue functions, unlike for claim_jobs.)
func TestNullQueueMeansTheDefaultQueue(t *testing.T) {
	b := testkit.Setup(t)
	var queue string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select queue from pgrun.enqueue_job('noop', queue => null)`).Scan(&queue))
	require.Equal(t, "default", queue)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select queue from pgrun.enqueue_jobs('[{"kind": "noop", "queue": null}]')`).Scan(&queue))
	require.Equal(t, "default", queue)
}

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
