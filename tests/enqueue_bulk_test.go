package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// bulkRefused asserts that sql fails with SQLSTATE state, a message containing each
// of names and a HINT, and that it wrote nothing.
func bulkRefused(t *testing.T, b *testkit.DB, db testkit.Querier, state, sql string, names []string, args ...any) {
	t.Helper()
	before := testkit.Counts(t, b.Pool)
	_, err := db.Exec(b.Ctx, sql, args...)
	require.Error(t, err, sql)
	pe := testkit.PgError(t, err, sql)
	require.Equal(t, state, pe.Code, "%s: %s", sql, pe.Message)
	for _, n := range names {
		require.Contains(t, pe.Message, n, "%s: the message names the bad element and value", sql)
	}
	require.NotEmpty(t, strings.TrimSpace(pe.Hint), "%s: a HINT says what to do", sql)
	require.Equal(t, before, testkit.Counts(t, b.Pool), "%s wrote something", sql)
}

// A bad value in element k of an enqueue_batch fails the whole batch with 22023 naming
// element k (counted from 0) and the value, with a HINT, and writes nothing: not
// the good elements before it, not a queue.
func TestEnqueueBatchNamesTheBadElementAndWritesNothing(t *testing.T) {
	b := testkit.Setup(t)
	var maxJSON, maxKey int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.max_json_bytes(), pgrun.max_key_bytes()`).Scan(&maxJSON, &maxKey))
	// Five jobs in queue "fresh" (not registered yet); element 3 gets the bad value.
	batch := func(column, typ, bad string) string {
		bad = fmt.Sprintf("(select array_agg(case when i = 4 then %s end) from generate_series(1, 5) i)::%s[]", bad, typ)
		queues := "array_fill('fresh'::text, array[5])"
		if column == "queues" {
			queues, column, bad = bad, "models", "null"
		}
		return fmt.Sprintf(`select pgrun.enqueue_batch(array_fill('noop'::text, array[5]), queues => %s, %s => %s)`,
			queues, column, bad)
	}
	cases := []struct {
		name, sql string
		names     []string
	}{
		{"kind", `select pgrun.enqueue_batch(array['a', 'b', 'c', 'Bad kind', 'e'])`, []string{"element 3", "'Bad kind'"}},
		{"kind NULL", `select pgrun.enqueue_batch(array['a', 'b', 'c', null, 'e'])`, []string{"element 3", "NULL"}},
		{"kind too long", `select pgrun.enqueue_batch(array['a', 'b', 'c', 'k' || repeat('x', 128), 'e'])`, []string{"element 3", "xxxx"}},
		{"queue", batch("queues", "text", `'Bad'`), []string{"element 3", "'Bad'"}},
		{"queue too long", batch("queues", "text", `'q' || repeat('x', 63)`), []string{"element 3", "xxxx"}},
		{"args", batch("args", "jsonb", `'[1]'::jsonb`), []string{"element 3", "got array"}},
		{"args too big", batch("args", "jsonb", fmt.Sprintf(`jsonb_build_object('x', repeat('a', %d))`, maxJSON)),
			[]string{"element 3", fmt.Sprintf("over the limit of %d bytes", maxJSON)}},
		{"meta", batch("metas", "jsonb", `'"acme"'::jsonb`), []string{"element 3", "got string"}},
		{"priority over", batch("priorities", "integer", `40000`), []string{"element 3", "40000"}},
		{"priority negative", batch("priorities", "integer", `-1`), []string{"element 3", "-1"}},
		{"run_at", batch("run_ats", "timestamptz", `'infinity'::timestamptz`), []string{"element 3", "infinity"}},
		{"max_attempts", batch("max_attempts", "integer", `0`), []string{"element 3", "max_attempts 0"}},
		{"timeout", batch("timeouts", "interval", `'-5 seconds'::interval`), []string{"element 3", "-00:00:05"}},
		{"unique_key empty", batch("unique_keys", "text", `''`), []string{"element 3", "unique_key must not be empty"}},
		{"unique_key too long", batch("unique_keys", "text", fmt.Sprintf(`repeat('k', %d)`, maxKey+1)),
			[]string{"element 3", fmt.Sprintf("%d bytes", maxKey+1)}},
		{"concurrency_key too long", batch("concurrency_keys", "text", fmt.Sprintf(`repeat('k', %d)`, maxKey+1)),
			[]string{"element 3", "concurrency_key"}},
		{"parent_id", batch("parent_ids", "bigint", `987654321`), []string{"element 3", "987654321"}},
		{"lengths", `select pgrun.enqueue_batch(array['a', 'b'], priorities => array[1, 2, 3])`, []string{"2 kinds", "3 priorities"}},
		{"kinds NULL", `select pgrun.enqueue_batch(null)`, []string{"NULL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bulkRefused(t, b, b.Pool, "22023", c.sql, c.names)
		})
	}

	// The Go client names the spec by its index in the slice.
	specs := []pgrun.JobSpec{{Kind: "a"}, {Kind: "b"}, {Kind: "c", Queue: "Nope"}, {Kind: "d"}}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	pe := testkit.PgError(t, err, "EnqueueMany")
	require.Equal(t, "22023", pe.Code)
	require.Contains(t, pe.Message, "element 2")
	require.Contains(t, pe.Message, "'Nope'")
	require.Zero(t, testkit.Counts(t, b.Pool)["jobs"])
}

// Unique keys deduplicate within a batch (the first job with a key takes it) and
// against the jobs that already hold them: each spec yields one row, in order, the
// holder in a duplicate's place, and nothing is written for the duplicates.
func TestEnqueueBatchDedupesUniqueKeys(t *testing.T) {
	b := testkit.Setup(t)
	held, err := pgrun.Enqueue(b.Ctx, b.Pool, "sync", nil, pgrun.UniqueKey("held"))
	require.NoError(t, err)

	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{
		{Kind: "sync", UniqueKey: "held", Args: map[string]int{"n": 0}},
		{Kind: "sync", UniqueKey: "fresh", Args: map[string]int{"n": 1}},
		{Kind: "sync", UniqueKey: "fresh", Args: map[string]int{"n": 2}},
		{Kind: "plain"},
		{Kind: "sync", UniqueKey: "held", Args: map[string]int{"n": 3}},
	})
	require.NoError(t, err)
	require.Len(t, jobs, 5, "one row per spec")
	require.Equal(t, held.ID, jobs[0].ID, "the holder is returned in place of the duplicates")
	require.Equal(t, held.ID, jobs[4].ID)
	require.JSONEq(t, `{}`, string(jobs[0].Args), "the holder is left as it is")
	require.JSONEq(t, `{"n": 1}`, string(jobs[1].Args), "the batch's first job with the key takes it")
	require.Equal(t, jobs[1].ID, jobs[2].ID)
	require.Nil(t, jobs[3].UniqueKey)
	var dedup []bool
	for _, j := range jobs {
		dedup = append(dedup, j.Deduplicated)
	}
	require.Equal(t, []bool{true, false, true, false, true}, dedup)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs`).Scan(&n))
	require.Equal(t, 3, n, "held, fresh and the plain job")

	// Again: every key is now held, so nothing but the key-less job is written.
	again, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_batch(array['sync', 'sync', 'plain'],
		unique_keys => array['fresh', 'held', null]) order by id`)
	require.NoError(t, err)
	require.Len(t, again, 3)
	require.Equal(t, []int64{held.ID, jobs[1].ID}, again[:2])
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs`).Scan(&n))
	require.Equal(t, 4, n)
}

// Jobs of a batch take their queue's default_max_attempts and default_timeout (then 25
// attempts and an hour) unless they name their own; a timeout of 0 means none, for a
// job or as a queue's default. Ids follow the batch's order.
func TestEnqueueBatchTakesTheQueuesDefaults(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('slow', default_max_attempts => 3, default_timeout => '5 minutes')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_queue('forever', default_timeout => '0')`)
	require.NoError(t, err)

	type row struct {
		Kind        string         `db:"kind"`
		Queue       string         `db:"queue"`
		MaxAttempts int            `db:"max_attempts"`
		Timeout     *time.Duration `db:"timeout"`
	}
	hour, five, minute := time.Hour, 5*time.Minute, time.Minute
	check := func(sql string, want []row) {
		t.Helper()
		rows, err := b.Pool.Query(b.Ctx, `select kind, queue, max_attempts, timeout from (`+sql+`) j order by id`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
		require.NoError(t, err)
		require.Equal(t, want, got, sql)
	}
	// One queue for the whole batch.
	check(`select * from pgrun.enqueue_batch(array['a', 'b', 'c', 'd'], queues => array_fill('slow'::text, array[4]),
		max_attempts => array[null, 7, null, null], timeouts => array[null, null, '1 minute', '0']::interval[])`,
		[]row{{"a", "slow", 3, &five}, {"b", "slow", 7, &five}, {"c", "slow", 3, &minute}, {"d", "slow", 3, nil}})
	// Several queues, one of them unknown until now and one the default.
	check(`select * from pgrun.enqueue_batch(array['a', 'b', 'c', 'd', 'e'],
		queues => array['slow', 'forever', 'new', null, 'slow'])`,
		[]row{{"a", "slow", 3, &five}, {"b", "forever", 25, nil}, {"c", "new", 25, &hour}, {"d", "default", 25, &hour},
			{"e", "slow", 3, &five}})
	// The Go client: NoTimeout, an explicit timeout and the queue's.
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{
		{Kind: "a", Queue: "slow", Timeout: pgrun.NoTimeout}, {Kind: "b", Queue: "slow", Timeout: time.Minute},
		{Kind: "c", Queue: "slow"}, {Kind: "d", Timeout: time.Nanosecond}})
	require.NoError(t, err)
	require.Len(t, jobs, 4)
	require.Nil(t, jobs[0].Timeout)
	require.Equal(t, time.Minute, *jobs[1].Timeout)
	require.Equal(t, 5*time.Minute, *jobs[2].Timeout)
	require.Equal(t, time.Microsecond, *jobs[3].Timeout, "a positive timeout never rounds down to none")
	for i, j := range jobs {
		require.Equal(t, string(rune('a'+i)), j.Kind, "ids follow the specs' order")
		if i > 0 {
			require.Greater(t, j.ID, jobs[i-1].ID)
		}
	}
	// The new queue is registered, and each queue was woken (the statement trigger).
	var queues []string
	rows, err := b.Pool.Query(b.Ctx, `select name from pgrun.queues order by name`)
	require.NoError(t, err)
	queues, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"default", "forever", "new", "slow"}, queues)
}

// A pgrun_enqueuer enqueues with enqueue_batch and EnqueueMany; it cannot attach a
// job to a parent through them, and the arrays carry no engine-owned column.
func TestEnqueueBatchAsEnqueuer(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "pgrun_enqueuer")
	testkit.Allowed(t, b, p, `select pgrun.enqueue_batch(array['noop', 'echo'], queues => array['roles', null],
		args => array['{"w": 1}', null]::jsonb[], unique_keys => array['k1', null])`)
	jobs, err := pgrun.EnqueueMany(b.Ctx, p, []pgrun.JobSpec{{Kind: "noop", Queue: "roles", UniqueKey: "k1"}, {Kind: "noop"}})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, pgrun.StatusQueued, jobs[1].Status)

	c := runningJob(t, b, "w1")
	testkit.Denied(t, b, p, `select pgrun.enqueue_batch(array['noop'], parent_ids => array[$1::bigint])`, c.ID)
	_, err = pgrun.EnqueueMany(b.Ctx, p, []pgrun.JobSpec{{Kind: "noop"}, {Kind: "noop", ParentID: c.ID}})
	require.Equal(t, "42501", testkit.SQLState(err), "%v", err)
	// The owner (the engine) may: defer_job attaches children this way.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_batch(array['child'], parent_ids => array[$1::bigint])`, c.ID)
	require.NoError(t, err)
}

// The insert trigger's WHEN clause lets a row skip the trigger only when the trigger
// would change nothing: a complete row with a bad value, or with an engine-owned
// value, still reaches it, whoever inserts it.
func TestCompleteRowsStillMeetTheInsertTrigger(t *testing.T) {
	b := testkit.Setup(t)
	var maxJSON, maxKey int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.max_json_bytes(), pgrun.max_key_bytes()`).Scan(&maxJSON, &maxKey))
	complete := func(column, value string) string {
		cols := map[string]string{"kind": "'noop'", "queue": "'default'", "args": "'{}'", "priority": "0",
			"run_at": "now()", "max_attempts": "25", "timeout": "'1 hour'", "meta": "'{}'",
			"unique_key": "null", "concurrency_key": "null"}
		if column != "" {
			cols[column] = value
		}
		var names, values []string
		for c, v := range cols {
			names, values = append(names, c), append(values, v)
		}
		return fmt.Sprintf(`insert into pgrun.jobs (%s) values (%s)`, strings.Join(names, ", "), strings.Join(values, ", "))
	}
	p := testkit.AsRole(t, b, "pgrun_enqueuer")
	for _, db := range []struct {
		name string
		db   testkit.Querier
	}{{"owner", b.Pool}, {"enqueuer", p}} {
		for _, c := range []struct{ column, value, names string }{
			{"kind", "'Bad kind'", "'Bad kind'"},
			{"kind", "'k' || repeat('x', 128)", "xxxx"},
			{"queue", "'Bad'", "'Bad'"},
			{"queue", "'q' || repeat('x', 63)", "xxxx"},
			{"args", "'[]'", "got array"},
			{"args", fmt.Sprintf("jsonb_build_object('x', repeat('a', %d))", maxJSON), "over the limit"},
			{"meta", "'1'", "got number"},
			{"priority", "-1", "-1"},
			{"max_attempts", "0", "max_attempts 0"},
			{"timeout", "'-1 second'", "-00:00:01"},
			{"run_at", "'-infinity'", "-infinity"},
			{"unique_key", "''", "unique_key"},
			{"unique_key", fmt.Sprintf("repeat('k', %d)", maxKey+1), fmt.Sprintf("%d bytes", maxKey+1)},
			{"concurrency_key", fmt.Sprintf("repeat('k', %d)", maxKey+1), "concurrency_key"},
		} {
			t.Run(db.name+" "+c.column+" "+c.value, func(t *testing.T) {
				bulkRefused(t, b, db.db, "22023", complete(c.column, c.value), []string{c.names})
			})
		}
		// The limits themselves pass.
		_, err := db.db.Exec(b.Ctx, complete("unique_key", fmt.Sprintf("repeat('k', %d)", maxKey)))
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.jobs`)
		require.NoError(t, err)
	}

	// The engine's own insert of a complete row with engine-owned values is reset by
	// the trigger, not stored as given.
	var attempt, failures int
	var claimedBy, result *string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, complete("", "")+` returning attempt, failures, claimed_by, result::text`).Scan(
		&attempt, &failures, &claimedBy, &result))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `insert into pgrun.jobs (kind, queue, args, priority, run_at, max_attempts,
		timeout, meta, attempt, failures, claimed_by, result) values ('noop', 'default', '{}', 0, now(), 25, '1 hour', '{}',
		5, 2, 'forged', '{"done": true}') returning attempt, failures, claimed_by, result::text`).Scan(
		&attempt, &failures, &claimedBy, &result))
	require.Zero(t, attempt)
	require.Zero(t, failures)
	require.Nil(t, claimedBy)
	require.Nil(t, result)
	// An enqueuer's is refused.
	for _, col := range []string{"attempt", "claimed_by", "status", "dispatched_at"} {
		val := map[string]string{"attempt": "3", "claimed_by": "'w'", "status": "'running'", "dispatched_at": "now()"}[col]
		testkit.Denied(t, b, p, fmt.Sprintf(`insert into pgrun.jobs (kind, queue, args, priority, run_at, max_attempts, timeout,
			meta, %s) values ('noop', 'default', '{}', 0, now(), 25, '1 hour', '{}', %s)`, col, val))
	}
}

// In the tenant mode a batch belongs to the enqueuer's tenant, and its unique keys
// are the tenant's: another tenant's holder of the same key neither blocks nor is
// returned.
func TestEnqueueBatchInTheTenantMode(t *testing.T) {
	k := newTenantKit(t)
	acme, err := pgrun.EnqueueMany(k.Ctx, k.acme, []pgrun.JobSpec{{Kind: "noop", UniqueKey: "k"}, {Kind: "noop"}})
	require.NoError(t, err)
	globex, err := pgrun.EnqueueMany(k.Ctx, k.globex, []pgrun.JobSpec{{Kind: "noop", UniqueKey: "k"}, {Kind: "noop", UniqueKey: "k"}})
	require.NoError(t, err)
	require.Len(t, acme, 2)
	require.Len(t, globex, 2, "one job per spec")
	require.Equal(t, globex[0].ID, globex[1].ID, "the second spec's key is held by the first's job")
	require.True(t, globex[1].Deduplicated)
	var acmeKeyed *pgrun.Job
	for _, j := range acme {
		require.Equal(t, "acme", *j.Tenant)
		if j.UniqueKey != nil {
			acmeKeyed = j
		}
	}
	require.NotNil(t, acmeKeyed)
	require.Equal(t, "globex", *globex[0].Tenant)
	require.NotEqual(t, acmeKeyed.ID, globex[0].ID, "unique keys are per tenant")
	again, err := pgrun.EnqueueMany(k.Ctx, k.acme, []pgrun.JobSpec{{Kind: "noop", UniqueKey: "k"}})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, acmeKeyed.ID, again[0].ID, "the tenant's own holder")
	require.True(t, again[0].Deduplicated)
}
