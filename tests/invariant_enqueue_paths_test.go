package tests

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// One enqueue path (issue 12): pgrun.job_spec is the one description of a job, every
// way in (enqueue_job, enqueue_specs, enqueue_jobs' JSON, enqueue_batch's arrays, a
// plain INSERT, the Go client) sets every field of it, and all of them apply the same
// rules (job_spec_fault).

// callerFields reads back the fields a caller sets, as JSON, for comparison.
const callerFields = `select jsonb_build_object('kind', kind, 'args', args, 'queue', queue, 'priority', priority,
	'run_at', run_at, 'max_attempts', max_attempts, 'unique_key', unique_key, 'parent_id', parent_id,
	'model', model, 'timeout', timeout, 'meta', meta, 'concurrency_key', concurrency_key,
	'model_required', model_required, 'sequence_key', sequence_key)::text from pgrun.jobs where id = $1`

// Every path sets every field a caller may set: a spec with each field away from its
// default comes back the same through each of them. The fields are checked against
// job_spec's attributes, so a field added to the type and not to this test fails it.
func TestEveryEnqueuePathSetsEveryField(t *testing.T) {
	b := testkit.Setup(t)
	parent, err := pgrun.Enqueue(b.Ctx, b.Pool, "parent", nil)
	require.NoError(t, err)
	runAt := time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)
	want := func(key string) map[string]any {
		return map[string]any{
			"kind": "resize", "args": map[string]any{"w": 64.0}, "queue": "images", "priority": 7.0,
			"run_at": "2031-02-03T04:05:06+00:00", "max_attempts": 3.0, "unique_key": key,
			"parent_id": float64(parent.ID), "model": "bge-small", "timeout": "00:10:00",
			"meta": map[string]any{"trace": "t1"}, "concurrency_key": "acct-9", "model_required": true,
			"sequence_key": "seq-" + key,
		}
	}

	// The fields above are job_spec's attributes that are columns of pgrun.jobs (the
	// other two, unique_window and on_conflict, shape deduplication and are checked
	// in TestBatchAnswersInOrderAndFlagsDuplicates; debounce_key, debounce and
	// debounce_edge shape folding, in invariant_debounce_test.go).
	rows, err := b.Pool.Query(b.Ctx, `select a.attname::text from pg_attribute a
		where a.attrelid = 'pgrun.job_spec'::regclass and a.attnum > 0 and not a.attisdropped
		  and a.attname not in ('unique_window', 'on_conflict', 'debounce_key', 'debounce', 'debounce_edge')
		order by a.attnum`)
	require.NoError(t, err)
	attrs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var fields []string
	for f := range want("") {
		fields = append(fields, f)
	}
	require.ElementsMatch(t, attrs, fields, "every attribute of pgrun.job_spec is checked here")

	pid := parent.ID
	paths := map[string]func(key string) (int64, error){
		"enqueue_job": func(key string) (id int64, err error) {
			err = b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('resize', '{"w": 64}', queue => 'images',
				priority => 7, run_at => '2031-02-03T04:05:06Z', max_attempts => 3, unique_key => $1,
				parent_id => $2, model => 'bge-small', timeout => '10 minutes', meta => '{"trace": "t1"}',
				concurrency_key => 'acct-9', model_required => true, sequence_key => 'seq-' || $1)`, key, pid).Scan(&id)
			return id, err
		},
		"enqueue_specs": func(key string) (id int64, err error) {
			err = b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_specs(array[row('resize', '{"w": 64}', 'images',
				7, '2031-02-03T04:05:06Z', 3, $1, $2, 'bge-small', '10 minutes', '{"trace": "t1"}', 'acct-9',
				null, null, true, 'seq-' || $1, null, null, null)::pgrun.job_spec])`, key, pid).Scan(&id)
			return id, err
		},
		"job_spec by name": func(key string) (id int64, err error) {
			err = b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_specs(array[pgrun.job_spec('resize',
				args => '{"w": 64}', queue => 'images', priority => 7, run_at => '2031-02-03T04:05:06Z',
				max_attempts => 3, unique_key => $1, parent_id => $2, model => 'bge-small',
				timeout => '10 minutes', meta => '{"trace": "t1"}', concurrency_key => 'acct-9',
				model_required => true, sequence_key => 'seq-' || $1)])`, key, pid).Scan(&id)
			return id, err
		},
		"enqueue_jobs": func(key string) (id int64, err error) {
			spec, _ := json.Marshal([]map[string]any{{"kind": "resize", "args": map[string]int{"w": 64}, "queue": "images",
				"priority": 7, "run_at": "2031-02-03T04:05:06Z", "max_attempts": 3, "unique_key": key, "parent_id": pid,
				"model": "bge-small", "timeout": "10 minutes", "meta": map[string]string{"trace": "t1"},
				"concurrency_key": "acct-9", "model_required": true, "sequence_key": "seq-" + key}})
			err = b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_jobs($1::jsonb)`, spec).Scan(&id)
			return id, err
		},
		"enqueue_batch": func(key string) (id int64, err error) {
			err = b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_batch(array['resize'], array['{"w": 64}']::jsonb[],
				array['images'], array[7], array['2031-02-03T04:05:06Z']::timestamptz[], array[3], array[$1::text],
				array[$2::bigint], array['bge-small'], array['10 minutes']::interval[], array['{"trace": "t1"}']::jsonb[],
				array['acct-9'], model_requireds => array[true], sequence_keys => array['seq-' || $1])`, key, pid).Scan(&id)
			return id, err
		},
		"INSERT": func(key string) (id int64, err error) {
			err = b.Pool.QueryRow(b.Ctx, `insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts,
				unique_key, parent_id, model, timeout, meta, concurrency_key, model_required, sequence_key)
				values ('resize', '{"w": 64}', 'images', 7, '2031-02-03T04:05:06Z', 3, $1, $2, 'bge-small',
				'10 minutes', '{"trace": "t1"}', 'acct-9', true, 'seq-' || $1) returning id`, key, pid).Scan(&id)
			return id, err
		},
		"Go Enqueue": func(key string) (int64, error) {
			j, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", map[string]int{"w": 64}, pgrun.Queue("images"),
				pgrun.Priority(7), pgrun.RunAt(runAt), pgrun.MaxAttempts(3), pgrun.UniqueKey(key), pgrun.Parent(pid),
				pgrun.Model("bge-small"), pgrun.Timeout(10*time.Minute), pgrun.Meta(map[string]any{"trace": "t1"}),
				pgrun.ConcurrencyKey("acct-9"), pgrun.ModelRequired(), pgrun.SequenceKey("seq-"+key))
			if err != nil {
				return 0, err
			}
			return j.ID, nil
		},
		"Go EnqueueMany": func(key string) (int64, error) {
			jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{{Kind: "resize", Args: map[string]int{"w": 64},
				Queue: "images", Priority: 7, RunAt: &runAt, MaxAttempts: 3, UniqueKey: key, ParentID: pid,
				Model: "bge-small", Timeout: 10 * time.Minute, Meta: map[string]any{"trace": "t1"},
				ConcurrencyKey: "acct-9", ModelRequired: true, SequenceKey: "seq-" + key}})
			if err != nil {
				return 0, err
			}
			return jobs[0].ID, nil
		},
	}
	for name, enqueue := range paths {
		key := "key-" + strings.ReplaceAll(name, " ", "-")
		id, err := enqueue(key)
		require.NoError(t, err, name)
		var got string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, callerFields, id).Scan(&got), name)
		w, _ := json.Marshal(want(key))
		require.JSONEq(t, string(w), got, name)
	}
}

// enqueue_jobs refuses a key pgrun.job_spec does not have, naming the key and its
// element, with 22023 and nothing written; every attribute of the type is a key it
// takes (the list is the catalog's, not a copy).
func TestEnqueueJobsKeysAreTheTypesAttributes(t *testing.T) {
	b := testkit.Setup(t)
	before := testkit.Counts(t, b.Pool)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b", "model_requird": true}]')`)
	pe := testkit.PgError(t, err, "enqueue_jobs with an unknown key")
	require.Equal(t, "22023", pe.Code)
	require.Contains(t, pe.Message, "element 1")
	require.Contains(t, pe.Message, "'model_requird'")
	require.Contains(t, pe.Hint, "model_required", "the hint lists the known keys")
	require.Equal(t, before, testkit.Counts(t, b.Pool), "a refused batch changes nothing")

	// Every attribute as a key (NULL: the default), kind set.
	var spec string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select jsonb_build_array(jsonb_object_agg(a.attname,
		case when a.attname = 'kind' then to_jsonb('noop'::text) else 'null'::jsonb end))::text
		from pg_attribute a where a.attrelid = 'pgrun.job_spec'::regclass and a.attnum > 0 and not a.attisdropped`).Scan(&spec))
	require.Contains(t, spec, `"model_required"`)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.enqueue_jobs($1::jsonb)`, spec).Scan(&n))
	require.Equal(t, 1, n)
}

// A plain INSERT is refused for everything the enqueue functions refuse, with the
// same SQLSTATE and message (the batch forms add the element), and nothing is
// written. The INSERT is tried twice: with the defaults left to the trigger, and as a
// complete row, the kind the trigger's WHEN clause lets through without a call
// unless a rule is broken (the clause spells the rules out: this is what keeps it in
// step). Every rule job_spec_fault has, read from the function, has a case here.
func TestInsertTriggerRefusesWhatTheFunctionsRefuse(t *testing.T) {
	b := testkit.Setup(t)
	cases := []struct {
		field, value string // a job_spec attribute, and a bad value as an SQL literal
	}{
		{"kind", `'Bad kind'`},
		{"kind", `'k' || repeat('x', 128)`},
		{"queue", `'Bad'`},
		{"args", `'[1]'`},
		{"args", `jsonb_build_object('blob', repeat('x', 1100000))`},
		{"priority", `-1`},
		{"run_at", `'infinity'`},
		{"max_attempts", `0`},
		{"unique_key", `''`},
		{"timeout", `'-5 seconds'`},
		{"meta", `'"x"'`},
		{"meta", `jsonb_build_object('blob', repeat('x', 1100000))`},
		{"concurrency_key", `repeat('c', 600)`},
		{"parent_id", `987654321`},
		{"sequence_key", `''`},
		{"sequence_key", `repeat('s', 201)`},
		{"debounce_key", `''`},
		{"debounce_key", `'reindex:7'`}, // without a window: a plain INSERT cannot debounce
	}
	complete := map[string]string{"kind": `'noop'`, "args": `'{}'`, "queue": `'default'`, "priority": `0`,
		"run_at": `now()`, "max_attempts": `25`, "timeout": `'1 hour'`, "meta": `'{}'`, "model_required": `false`}
	// The rules: job_spec_fault's answers, read from its definition. unique_window,
	// on_conflict, debounce and debounce_edge are not columns: an INSERT cannot break
	// them.
	var def string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pg_get_functiondef('pgrun.job_spec_fault'::regproc)`).Scan(&def))
	rules := map[string]bool{}
	for _, m := range regexp.MustCompile(`THEN '([a-z_ ]+)'`).FindAllStringSubmatch(def, -1) {
		rules[m[1]] = true
	}
	delete(rules, "unique_window")
	delete(rules, "on_conflict")
	delete(rules, "debounce")
	delete(rules, "debounce_edge")
	require.Greater(t, len(rules), 10, "the rules are read from the function")
	covered := map[string]bool{}

	before := testkit.Counts(t, b.Pool)
	for _, c := range cases {
		name := c.field + " " + c.value
		var fault string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, fmt.Sprintf(`select pgrun.job_spec_fault(jsonb_populate_record(
			null::pgrun.job_spec, jsonb_build_object('kind', 'noop', '%s', %s)))`, c.field, jsonValue(c.field, c.value))).Scan(&fault), name)
		covered[fault] = true
		_, err := b.Pool.Exec(b.Ctx, fmt.Sprintf(`select pgrun.enqueue_job(%s)`,
			map[bool]string{true: c.value, false: fmt.Sprintf(`'noop', %s => %s`, c.field, c.value)}[c.field == "kind"]))
		fn := testkit.PgError(t, err, "enqueue_job "+name)
		require.Equal(t, "22023", fn.Code, name)

		_, err = b.Pool.Exec(b.Ctx, fmt.Sprintf(`insert into pgrun.jobs (kind, %[1]s) values ('noop', %[2]s)`, c.field, c.value))
		if c.field == "kind" {
			_, err = b.Pool.Exec(b.Ctx, fmt.Sprintf(`insert into pgrun.jobs (kind) values (%s)`, c.value))
		}
		ins := testkit.PgError(t, err, "INSERT "+name)
		require.Equal(t, fn.Code, ins.Code, name)
		require.Equal(t, fn.Message, ins.Message, name)
		require.Equal(t, fn.Hint, ins.Hint, name)

		row := map[string]string{}
		for k, v := range complete {
			row[k] = v
		}
		row[c.field] = c.value
		var cols, vals []string
		for k, v := range row {
			cols, vals = append(cols, k), append(vals, v)
		}
		_, err = b.Pool.Exec(b.Ctx, fmt.Sprintf(`insert into pgrun.jobs (%s) values (%s)`,
			strings.Join(cols, ", "), strings.Join(vals, ", ")))
		full := testkit.PgError(t, err, "complete INSERT "+name)
		require.Equal(t, fn.Message, full.Message, name)

		_, err = b.Pool.Exec(b.Ctx, fmt.Sprintf(`select pgrun.enqueue_jobs(jsonb_build_array('{"kind": "noop"}'::jsonb,
			jsonb_build_object('kind', 'noop', %s, %s)))`, "'"+c.field+"'", jsonValue(c.field, c.value)))
		batch := testkit.PgError(t, err, "enqueue_jobs "+name)
		require.Equal(t, "22023", batch.Code, name)
		require.Equal(t, "element 1 of the batch: "+fn.Message, batch.Message, name)
	}
	require.Equal(t, before, testkit.Counts(t, b.Pool), "nothing refused was written")
	for r := range rules {
		require.True(t, covered[r], "job_spec_fault's rule %q has no case here", r)
	}
}

// jsonValue turns an SQL literal of a job_spec field into the JSON value enqueue_jobs
// takes for it.
func jsonValue(field, sqlValue string) string {
	switch field {
	case "args", "meta":
		return "(" + sqlValue + ")::jsonb"
	case "priority", "max_attempts", "parent_id":
		return "to_jsonb(" + sqlValue + ")"
	}
	return "to_jsonb((" + sqlValue + ")::text)"
}

// A batch answers one row per spec, in the specs' order, with deduplicated true
// exactly where nothing was inserted: a key held by an active job, a key taken by an
// earlier spec of the same batch, a key whose job finished within unique_window, a
// queued holder replaced. The Go client reports the same through Job.Deduplicated.
func TestBatchAnswersInOrderAndFlagsDuplicates(t *testing.T) {
	b := testkit.Setup(t)
	held, err := pgrun.Enqueue(b.Ctx, b.Pool, "sync", nil, pgrun.UniqueKey("held"))
	require.NoError(t, err)
	require.False(t, held.Deduplicated)
	done, err := pgrun.Enqueue(b.Ctx, b.Pool, "sync", nil, pgrun.UniqueKey("done"))
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set status = 'succeeded', finished_at = now() where id = $1`, done.ID)
	require.NoError(t, err)

	type answer struct {
		ID           int64  `db:"id"`
		Kind         string `db:"kind"`
		Deduplicated bool   `db:"deduplicated"`
	}
	rows, err := b.Pool.Query(b.Ctx, `select id, kind, deduplicated from pgrun.enqueue_specs(array[
		row('a', null, null, null, null, null, null,  null, null, null, null, null, null, null, null, null, null, null, null),
		row('b', null, null, null, null, null, 'held', null, null, null, null, null, null, null, null, null, null, null, null),
		row('c', null, null, null, null, null, 'new', null, null, null, null, null, null, null, null, null, null, null, null),
		row('d', null, null, null, null, null, 'new', null, null, null, null, null, null, null, null, null, null, null, null),
		row('e', null, null, null, null, null, null,  null, null, null, null, null, null, null, null, null, null, null, null),
		row('f', null, null, null, null, null, 'done', null, null, null, null, null, '1 hour', null, null, null, null, null, null),
		row('g', '{"v": 2}', null, null, null, null, 'new', null, null, null, null, null, null, 'replace', null, null, null, null, null)
		]::pgrun.job_spec[])`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[answer])
	require.NoError(t, err)
	require.Len(t, got, 7, "one row per spec")
	var kinds []string
	var flags []bool
	for _, a := range got {
		kinds = append(kinds, a.Kind)
		flags = append(flags, a.Deduplicated)
	}
	require.Equal(t, []string{"a", "sync", "c", "c", "e", "sync", "c"}, kinds,
		"in the specs' order, the holder in a duplicate's place")
	require.Equal(t, []bool{false, true, false, true, false, true, true}, flags)
	require.Equal(t, held.ID, got[1].ID)
	require.Equal(t, got[2].ID, got[3].ID, "two specs with one key: one job")
	require.Equal(t, got[2].ID, got[6].ID)
	require.Equal(t, done.ID, got[5].ID, "finished within the window")
	require.Less(t, got[0].ID, got[2].ID, "new jobs get ids in the specs' order")
	require.Less(t, got[2].ID, got[4].ID)
	var args string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select args::text from pgrun.jobs where id = $1`, got[2].ID).Scan(&args))
	require.JSONEq(t, `{"v": 2}`, args, "the replacing spec's args")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs`).Scan(&n))
	require.Equal(t, 2+3, n, "held, done, and a, c, e")

	// The Go client, the same batch shape.
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{
		{Kind: "a"}, {Kind: "b", UniqueKey: "held"}, {Kind: "c", UniqueKey: "go"}, {Kind: "d", UniqueKey: "go"},
		{Kind: "e"}, {Kind: "f", UniqueKey: "done", UniqueWindow: time.Hour},
		{Kind: "g", UniqueKey: "go", ReplaceDuplicate: true, Args: map[string]int{"v": 3}},
	})
	require.NoError(t, err)
	require.Len(t, jobs, 7)
	kinds, flags = nil, nil
	for _, j := range jobs {
		kinds = append(kinds, j.Kind)
		flags = append(flags, j.Deduplicated)
	}
	require.Equal(t, []string{"a", "sync", "c", "c", "e", "sync", "c"}, kinds)
	require.Equal(t, []bool{false, true, false, true, false, true, true}, flags)
	require.Equal(t, jobs[2].ID, jobs[3].ID)
	require.JSONEq(t, `{"v": 3}`, string(jobs[6].Args))

	// Enqueue, one spec: the same flag.
	again, err := pgrun.Enqueue(b.Ctx, b.Pool, "sync", nil, pgrun.UniqueKey("held"))
	require.NoError(t, err)
	require.True(t, again.Deduplicated)
	require.Equal(t, held.ID, again.ID)
}

// pgrun.enqueued is a row of pgrun.jobs and then deduplicated and folded: the same columns, in
// the same order, of the same types. A migration that adds a column to pgrun.jobs
// and not to the type fails here (and every enqueue would fail at run time).
func TestEnqueuedFollowsTheJobsTable(t *testing.T) {
	b := testkit.Setup(t)
	list := func(rel string) []string {
		rows, err := b.Pool.Query(b.Ctx, `select a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
			from pg_attribute a where a.attrelid = $1::regclass and a.attnum > 0 and not a.attisdropped
			order by a.attnum`, rel)
		require.NoError(t, err)
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return cols
	}
	require.Equal(t, append(list("pgrun.jobs"), "deduplicated boolean", "folded boolean"), list("pgrun.enqueued"))
}

// `runner job enqueue` says when the job it reports was not enqueued because another
// holds the unique key, and names that job.
func TestRunnerEnqueuePrintsDuplicates(t *testing.T) {
	b := testkit.Setup(t)
	run := func() string {
		out, err := exec.CommandContext(b.Ctx, runnerBin, "job", "enqueue", "sync", `{"n": 1}`, "--unique-key", "nightly",
			"--database-url", b.URL).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	first, second := run(), run()
	require.NotContains(t, first, "duplicate")
	id := regexp.MustCompile(`^job (\d+) `).FindStringSubmatch(first)
	require.NotNil(t, id, first)
	require.Contains(t, second, "job "+id[1]+" ", "the holder is named")
	require.Contains(t, second, "duplicate")
	require.Contains(t, second, `"nightly"`)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs`).Scan(&n))
	require.Equal(t, 1, n)
}
