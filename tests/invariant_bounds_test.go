package tests

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// No input stops a queue: each value past its bound is refused at the door with
// 22023 and changes nothing, the same value at the bound is taken, and the queue
// keeps handing out its jobs afterwards. (A timeout of a million years was taken, and
// from then on every claim of its queue failed with 22008.)
func TestNoInputStopsAQueue(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('q1')`, `select pgrun.worker_heartbeat('w', 'h', 1, array['q1'])`)
	var held int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', queue => 'q1', unique_key => 'held')`).Scan(&held))
	refused := []struct{ name, sql string }{
		{"enqueue_job timeout", `select pgrun.enqueue_job('noop', queue => 'q1', timeout => '1000000 years')`},
		{"enqueue_job timeout a day past", `select pgrun.enqueue_job('noop', queue => 'q1', timeout => '367 days')`},
		{"enqueue_jobs timeout", `select pgrun.enqueue_jobs('[{"kind": "noop", "queue": "q1", "timeout": "1000000 years"}]')`},
		{"enqueue_specs timeout", `select pgrun.enqueue_specs(array[pgrun.job_spec('noop', queue => 'q1', timeout => '1000000 years')])`},
		{"enqueue_columns timeout", `select pgrun.enqueue_columns(array['noop'], queues => array['q1'], timeouts => array['1000000 years'::interval])`},
		{"INSERT timeout", `insert into pgrun.jobs (kind, queue, timeout) values ('noop', 'q1', '1000000 years')`},
		{"enqueue_job unique_window", `select pgrun.enqueue_job('noop', queue => 'q1', unique_key => 'u', unique_window => '1000 years')`},
		{"set_queue default_timeout", `select pgrun.set_queue('q1', default_timeout => '1000000 years')`},
		{"set_queue default_lease", `select pgrun.set_queue('q1', default_lease => '100 years')`},
		{"set_queue backoff past its max", `select pgrun.set_queue('q1', backoff_base => '2 hours', backoff_max => '1 second')`},
		{"set_queue backoff past the default max", `select pgrun.set_queue('q1', backoff_base => '2 hours')`},
		{"set_queue backoff_max", `select pgrun.set_queue('q1', backoff_max => '1000 years')`},
		{"set_queue rate_period", `select pgrun.set_queue('q1', rate_limit => 1, rate_period => '1000 years')`},
		{"set_queue retention", `select pgrun.set_queue('q1', retention => '1000 years')`},
		{"set_queue warm_wait", `select pgrun.set_queue('q1', warm_wait => '1000 years')`},
		{"worker_heartbeat cadence", `select pgrun.worker_heartbeat('w', 'h', 1, array['q1'], cadence => '178000000 years')`},
		{"claim_jobs lease", `select pgrun.claim_jobs('q1', 'w', 1, '100 years')`},
		{"renew_leases lease", `select pgrun.renew_leases('w', null, '100 years')`},
		{"forget_workers after", `select pgrun.forget_workers('1000000 years')`},
		{"replace_queued args", `select pgrun.replace_queued($1, 'held', '5', 0, null)`},
		{"replace_queued priority", `select pgrun.replace_queued($1, 'held', '{}', -1, null)`},
		{"replace_queued run_at", `select pgrun.replace_queued($1, 'held', '{}', 0, 'infinity')`},
	}
	before := testkit.Snap(t, b.Pool, held)
	var queue string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select row_to_json(q)::text from pgrun.queues q where name = 'q1'`).Scan(&queue))
	for _, c := range refused {
		args := []any{}
		if strings.Contains(c.sql, "$1") {
			args = append(args, held)
		}
		testkit.Refused(t, b, b.Pool, "22023", c.sql, args...)
	}
	require.Equal(t, before, testkit.Snap(t, b.Pool, held), "the queued job is as it was")
	var after string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select row_to_json(q)::text from pgrun.queues q where name = 'q1'`).Scan(&after))
	require.Equal(t, queue, after, "the queue's policy is as it was")

	// At the bounds, taken.
	testkit.ExecAll(t, b,
		`select pgrun.enqueue_job('noop', queue => 'q1', timeout => '366 days', priority => 1)`,
		`select pgrun.set_queue('q1', default_timeout => '366 days', default_lease => '1 day', backoff_base => '1 hour',
		                       backoff_max => '366 days', retention => '100 years', warm_wait => '1 day')`,
		`select pgrun.worker_heartbeat('w', 'h', 1, array['q1'], cadence => '1 hour')`)

	// A row stored before the bounds (written here past the door, as the engine's
	// owner) cannot stop the claim either: the claim bounds the deadline again.
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('noop', queue => 'q1', priority => 2)`,
		`update pgrun.jobs set timeout = '1000000 years' where priority = 2`)
	got := one[[]int64](t, b.Ctx, b.Pool, `select array_agg(priority::bigint order by priority) from pgrun.claim_jobs('q1', 'w', 10, '1 day')`)
	require.Equal(t, []int64{0, 1, 2}, got, "the queue hands out every job")
	require.Equal(t, 3, one[int](t, b.Ctx, b.Pool, `select count(*)::int from pgrun.renew_leases('w', null, '1 day')`),
		"and renews them")
}

// docs/sql-api.md's table of bounds ("## Limits") is pgrun.input_bounds(), row for
// row: the table is what the code enforces.
func TestTheBoundsTableMatchesTheCode(t *testing.T) {
	b := testkit.Setup(t)
	doc, err := os.ReadFile("../docs/sql-api.md")
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "\n## Limits\n")
	require.NotEqual(t, -1, start, "docs/sql-api.md has a Limits section")
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| (.+?) \\| (.+?) \\| (.+?) \\|$")
	var inDoc []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if m[1] == "input" || strings.HasPrefix(m[1], "---") {
			continue
		}
		inDoc = append(inDoc, strings.Join([]string{unmark(m[1]), unmark(m[2]), unmark(m[3])}, " | "))
	}
	rows, err := b.Pool.Query(b.Ctx, `select input || ' | ' || bound || ' | ' || enforced_by from pgrun.input_bounds()`)
	require.NoError(t, err)
	var inCode []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		inCode = append(inCode, s)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, inCode)
	require.Equal(t, inCode, inDoc, "regenerate the table: psql -Atc \"select format('| %%s | %%s | %%s |', input, bound, enforced_by) from pgrun.input_bounds()\"")
}

// unmark drops the backquotes a table cell wraps names in.
func unmark(s string) string { return strings.ReplaceAll(s, "`", "") }
