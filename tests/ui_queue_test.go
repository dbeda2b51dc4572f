package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Issue 35, "every control is visible": a queue's page (/queues/NAME) shows its flow
// control and its use now (fairness, the per-key limits and each key's use, held
// sequences with why they wait, due jobs with why each is not claimed), a job's page
// says why a queued or pending job is not running, and each read stays bounded
// beside a large backlog.

// queueJSON is a queue's page as ?format=json gives it.
type queueJSON struct {
	Data struct {
		Settings struct {
			FairBy            *string  `json:"fair_by"`
			ConcurrencyLimit  *int     `json:"concurrency_limit"`
			KeyRateLimit      *int     `json:"key_rate_limit"`
			KeyRatePeriodSecs *float64 `json:"key_rate_period_secs"`
			SequenceOnFailure string   `json:"sequence_on_failure"`
		} `json:"settings"`
		Counts *struct {
			Queued      int64  `json:"queued"`
			Held        int64  `json:"held"`
			KeysAtLimit *int64 `json:"keys_at_limit"`
		} `json:"counts"`
		Keys []struct {
			Key         string `json:"key"`
			Running     int64  `json:"running"`
			WindowCount *int   `json:"window_count"`
			Room        *int   `json:"room"`
			Queued      int64  `json:"queued"`
		} `json:"keys"`
		KeysInUse int64 `json:"keys_in_use"`
		Sequences []struct {
			Key        string  `json:"sequence_key"`
			HeadID     *int64  `json:"head_id"`
			HeadStatus *string `json:"head_status"`
			Held       int64   `json:"held"`
			FirstHeld  int64   `json:"first_held"`
			Reason     *string `json:"reason"`
			Stopped    bool    `json:"stopped"`
		} `json:"sequences"`
		Due []struct {
			ID      int64   `json:"id"`
			Blocker *string `json:"blocker"`
		} `json:"due"`
	} `json:"data"`
	Problems []string `json:"problems"`
}

func queuePageJSON(t *testing.T, base, queue string) queueJSON {
	t.Helper()
	resp, body := get(t, base+"/queues/"+queue+"?format=json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var q queueJSON
	require.NoError(t, json.Unmarshal([]byte(body), &q), body)
	require.Empty(t, q.Problems, body)
	return q
}

// row returns the table row of page whose opening tag carries attr (data-key="x"),
// to its end.
func row(t *testing.T, page, attr string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr ` + regexp.QuoteMeta(attr) + `[^>]*>(.*?)</tr>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no row %s in the page", attr)
	return m[1]
}

// seedFlowQueue makes queue flow with fairness by concurrency key, two running jobs
// per key and two claims per key an hour, a live worker, and a sequence whose head
// failed for good: acct-a runs two and is at both limits with two more queued,
// acct-b runs one; order:7 holds two jobs behind its failed head. It returns the
// failed head, the first held job and a queued job of acct-a.
func seedFlowQueue(t *testing.T, b *testkit.DB) (head, held, queued int64) {
	t.Helper()
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('flow', fair_by => 'concurrency_key', concurrency_limit => 2, key_rate_limit => 2,
		   key_rate_period => '1 hour')`,
		`select pgrun.worker_heartbeat('w1', 'host-1', 1, array['flow'])`,
		`select pgrun.enqueue_job('sync', queue => 'flow', concurrency_key => 'acct-a') from generate_series(1, 4)`,
		`select pgrun.enqueue_job('sync', queue => 'flow', concurrency_key => 'acct-b')`)
	// One enqueue a statement: each is admitted to the sequence behind the one before.
	for range 3 {
		testkit.ExecAll(t, b, `select pgrun.enqueue_job('ship', queue => 'flow', sequence_key => 'order:7', max_attempts => 1)`)
	}
	claimed := testkit.ClaimN(t, b.Pool, "flow", "w1", 10, "1 hour")
	require.Len(t, claimed, 4, "two of acct-a, one of acct-b and the sequence's head")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.jobs where sequence_key = 'order:7' and status = 'running'`).
		Scan(&head))
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, 1, '{"message": "card declined"}', false)`, head))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(id) filter (where sequence_key = 'order:7' and status = 'pending'),
		min(id) filter (where concurrency_key = 'acct-a' and status = 'queued') from pgrun.jobs`).Scan(&held, &queued))
	return head, held, queued
}

// The queue page shows fairness, the per-key limits beside each key's use (the key at
// its limit first, flagged), the held sequence with its failed head and the reason, and
// the due jobs with why each waits; the job page of a queued and of a held job says
// why it is not running. A retry of the head lets the page say the sequence is no
// longer stopped. The overview and the jobs list link the queue's name to its page.
func TestUIQueuePageShowsFlowControlAndWhyJobsWait(t *testing.T) {
	b := testkit.Setup(t)
	head, held, queued := seedFlowQueue(t, b)
	base := serveUI(t, b.Pool, ui.Options{})

	resp, page := get(t, base+"/queues/flow")
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	require.Contains(t, page, `data-limit="fair-by">round-robin across concurrency_key values`)
	require.Contains(t, page, `data-limit="concurrency">2 per concurrency key · 2 keys running now`)
	require.Contains(t, page, `data-limit="key-rate">2 starts per key per 1h00m · 2 windows open`)
	require.Contains(t, page, `data-limit="sequence-on-failure">hold: the jobs behind it wait`)
	a := row(t, page, `data-key="acct-a"`)
	require.Contains(t, a, "at limit")
	require.Regexp(t, `(?s)<td class="n">2 / 2</td>\s*<td class="n">2 / 2</td>`, a, "running and rate window, each beside its limit")
	require.NotContains(t, row(t, page, `data-key="acct-b"`), "at limit")
	seq := row(t, page, `data-row="seq:order:7"`)
	require.Contains(t, seq, fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, head, head), "the failed head, linked")
	require.Contains(t, seq, fmt.Sprintf("behind job %d of sequence order:7, which failed for good (retry or cancel it)", head))
	require.Contains(t, row(t, page, fmt.Sprintf(`data-job="%d"`, queued)), "concurrency key acct-a is at its limit (2/2 running)")

	q := queuePageJSON(t, base, "flow")
	require.Equal(t, "concurrency_key", *q.Data.Settings.FairBy)
	require.Equal(t, 2, *q.Data.Settings.KeyRateLimit)
	require.Equal(t, 3600.0, *q.Data.Settings.KeyRatePeriodSecs)
	require.Equal(t, int64(2), q.Data.KeysInUse)
	require.Len(t, q.Data.Keys, 2)
	require.Equal(t, "acct-a", q.Data.Keys[0].Key, "the key at its limit first")
	require.Equal(t, int64(2), q.Data.Keys[0].Running)
	require.Equal(t, 2, *q.Data.Keys[0].WindowCount)
	require.Equal(t, 0, *q.Data.Keys[0].Room)
	require.Equal(t, int64(2), q.Data.Keys[0].Queued)
	require.Equal(t, "acct-b", q.Data.Keys[1].Key)
	require.Equal(t, 1, *q.Data.Keys[1].Room)
	require.Equal(t, int64(1), *q.Data.Counts.KeysAtLimit)
	require.Equal(t, int64(2), q.Data.Counts.Held)
	require.Len(t, q.Data.Sequences, 1)
	s := q.Data.Sequences[0]
	require.Equal(t, []any{"order:7", head, "failed", int64(2), held, true},
		[]any{s.Key, *s.HeadID, *s.HeadStatus, s.Held, s.FirstHeld, s.Stopped})
	require.Len(t, q.Data.Due, 2, "acct-a's two queued jobs; the held ones are pending")
	for _, d := range q.Data.Due {
		require.NotNil(t, d.Blocker, "job %d", d.ID)
		require.Contains(t, *d.Blocker, "concurrency key acct-a is at its limit (2/2 running)")
		require.Contains(t, *d.Blocker, "the rate window of key acct-a is full (2/2)")
	}

	_, job := get(t, fmt.Sprintf("%s/jobs/%d", base, queued))
	require.Contains(t, job, "not running: concurrency key acct-a is at its limit (2/2 running)")
	require.Contains(t, job, `<a href="/queues/flow">flow</a>`)
	_, job = get(t, fmt.Sprintf("%s/jobs/%d", base, held))
	require.Contains(t, job, fmt.Sprintf("not running: held by its sequence: behind job %d of sequence order:7, which failed for good", head))
	_, job = get(t, fmt.Sprintf("%s/jobs/%d", base, head))
	require.NotContains(t, job, "not running:", "a failed job is not waiting to run")

	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.retry_job(%d)`, head))
	s = queuePageJSON(t, base, "flow").Data.Sequences[0]
	require.Equal(t, []any{head, "queued", false}, []any{*s.HeadID, *s.HeadStatus, s.Stopped}, "retried, the head leads again")
	require.Contains(t, *s.Reason, fmt.Sprintf("behind job %d of sequence order:7, which is queued", head))

	_, page = get(t, base+"/")
	require.Contains(t, page, `<a href="/queues/flow"`)
	_, page = get(t, base+"/jobs?queue=flow")
	require.Contains(t, page, `<td><a href="/queues/flow">flow</a></td>`)
	resp, page = get(t, base+"/queues/nope")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, page, `queue &#34;nope&#34; does not exist`)
}

// A role made by docs/ui.md's read-only recipe reads the queue page and the job
// pages' "not running" line without a permission error: the recipe grants what they
// call (job_blocker, queue_keys, queue_sequences, rate_period).
func TestUIQueuePageReadsWithTheReadOnlyRecipe(t *testing.T) {
	b := testkit.Setup(t)
	_, held, queued := seedFlowQueue(t, b)
	name, reader := testkit.NewRole(t, b, "")
	doc, err := os.ReadFile("../docs/ui.md")
	require.NoError(t, err)
	recipe := regexp.MustCompile(`(?s)CREATE ROLE pgrun_ui_reader NOLOGIN;\n(.*?)\nCREATE ROLE dashboard`).FindSubmatch(doc)
	require.NotNil(t, recipe, "docs/ui.md has the read-only role's recipe")
	for _, stmt := range strings.Split(string(recipe[1]), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			testkit.ExecAll(t, b, strings.ReplaceAll(stmt, "pgrun_ui_reader", `"`+name+`"`))
		}
	}
	base := serveUI(t, reader, ui.Options{ReadOnly: true})
	q := queuePageJSON(t, base, "flow")
	require.Len(t, q.Data.Keys, 2)
	require.Len(t, q.Data.Sequences, 1)
	require.Len(t, q.Data.Due, 2)
	for _, id := range []int64{queued, held} {
		resp, body := get(t, fmt.Sprintf("%s/jobs/%d?format=json", base, id))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.NotContains(t, body, `"problems"`, body)
		require.Contains(t, body, `"why_not_running": "`)
	}
}

// nodeRows matches what a plan node did (auto_explain with log_analyze).
var nodeRows = regexp.MustCompile(`actual time=[0-9.]+\.\.[0-9.]+ rows=(\d+) loops=(\d+)`)

// The queue page's reads of sequences and due jobs cost the rows they show, not the
// backlog: beside 10,000 sequences with a held job each and 20,000 jobs scheduled for
// later ahead of the due ones in the claim index, no plan node of queue_sequences or
// of the due list (auto_explain, log_analyze) handles 1,000 rows, and no filter throws
// 1,000 away. (pgrun.sequences groups every held job: 10,000 rows here.) A plan check,
// not a timing.
func TestUIQueuePageReadsStayBoundedBeside10000Sequences(t *testing.T) {
	b := testkit.Setup(t)
	// Two jobs a sequence, 500 sequences a statement: each enqueue holds its
	// sequences' advisory locks to the end of its transaction, and the server's lock
	// table (max_locks_per_transaction per connection) is shared with the other tests.
	for lo := 0; lo < 20000; lo += 500 {
		testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'ship',
			'queue', 'seqs', 'priority', 1, 'sequence_key', 'acct:' || (i %% 10000)) order by i))
			from generate_series(%d, %d) i`, lo, lo+499))
	}
	testkit.ExecAll(t, b,
		`select count(*) from pgrun.enqueue_columns(array_fill('later'::text, array[20000]),
		   queues => array_fill('seqs'::text, array[20000]), run_ats => array_fill(now() + interval '1 hour', array[20000]))`,
		`select pgrun.worker_heartbeat('w1', 'host-1', 1, array['seqs'])`)
	// Three heads fail for good: their sequences stop.
	for _, c := range testkit.ClaimN(t, b.Pool, "seqs", "w1", 3, "1 hour") {
		testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, %d, '{"message": "no"}', false)`, c.ID, c.Attempt))
	}
	testkit.ExecAll(t, b, `analyze pgrun.jobs`)
	var held int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select held from pgrun.queue_stats where queue = 'seqs'`).Scan(&held))
	require.Equal(t, int64(10000), held)

	conn, plans := analyzeSession(t, b)
	_, err := conn.Exec(b.Ctx, `set auto_explain.log_buffers = on`)
	require.NoError(t, err)
	rows, err := conn.Query(b.Ctx, sqlapi.DashboardQueueSequences, "seqs", 21)
	require.NoError(t, err)
	var stopped, shown int
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		shown++
		if vals[8].(bool) {
			stopped++
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{21, 3}, []int{shown, stopped}, "21 sequences, the three stopped first")
	rows, err = conn.Query(b.Ctx, sqlapi.DashboardQueueDue, "seqs", 20)
	require.NoError(t, err)
	due := 0
	for rows.Next() {
		due++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 20, due, "the due heads, past the jobs scheduled for later")

	got := plans()
	requireNoWideFilter(t, got, 5, "the queue page")
	scans := 0
	for _, p := range got {
		for _, m := range nodeRows.FindAllStringSubmatch(p, -1) {
			n, _ := strconv.Atoi(m[1])
			loops, _ := strconv.Atoi(m[2])
			require.Less(t, n*loops, 1000, "a read of the queue page handled rows it does not show:\n%s", p)
		}
		// An index condition on a later column of the claim index (run_at) skips
		// entries without counting them as rows: the pages read tell.
		for _, m := range claimIdxPages.FindAllStringSubmatch(p, -1) {
			hit, _ := strconv.Atoi(m[1])
			read, _ := strconv.Atoi(m[2])
			require.Less(t, hit+read, 50, "a scan of the claim index read pages of jobs it does not show:\n%s", p)
			scans++
		}
	}
	require.Positive(t, scans, "the due list reads the claim index")
}

// claimIdxPages matches the pages a scan of jobs_claim_idx read (auto_explain with
// log_buffers): the buffers line under its node.
var claimIdxPages = regexp.MustCompile(`using jobs_claim_idx on jobs[^\n]*\n(?:[^\n]*(?:Index Cond|Heap Fetches|Filter|Rows Removed)[^\n]*\n)*\s*Buffers: shared hit=(\d+)(?: read=(\d+))?`)

// queue_keys and queue_sequences refuse bad input with 22023, a message naming the
// value and a hint; list nothing for an unknown queue; and keep to the tenant mode's
// rule: an enqueuer lists its own tenant's sequences only, and may not list the keys,
// which are every tenant's (not granted; and refused by the function itself, 42501,
// should a DBA grant it), while an administrator sees both tenants' sequences of one key.
func TestQueueViewChecksInputAndTenants(t *testing.T) {
	k := newTenantKit(t)
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.set_queue('tq', concurrency_limit => 1)`)
	for _, p := range []struct {
		pool *pgxpool.Pool
		key  string
	}{{k.acme, "a"}, {k.globex, "g"}} {
		for range 2 {
			testkit.Allowed(t, k.DB, p.pool, `select pgrun.enqueue_job('ship', queue => 'tq', sequence_key => 'inv:1',
				concurrency_key => $1)`, p.key)
		}
	}
	testkit.ExecAll(t, k.DB, `select pgrun.worker_heartbeat('w', 'h', 1, array['tq'])`,
		`select count(*) from pgrun.claim_jobs('tq', 'w', 10)`)

	tenants := func(p *pgxpool.Pool) []string {
		t.Helper()
		var got []string
		rows, err := p.Query(k.Ctx, `select coalesce(tenant, '-') || ':' || held from pgrun.queue_sequences('tq') order by tenant`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			got = append(got, s)
		}
		require.NoError(t, rows.Err())
		return got
	}
	require.Equal(t, []string{"acme:1", "globex:1"}, tenants(k.admin))
	require.Equal(t, []string{"acme:1"}, tenants(k.acme))
	require.Equal(t, []string{"globex:1"}, tenants(k.globex))
	require.Equal(t, 2, one[int](t, k.Ctx, k.admin, `select count(*)::int from pgrun.queue_keys('tq')`))
	testkit.Denied(t, k.DB, k.acme, `select * from pgrun.queue_keys('tq')`)
	testkit.ExecAll(t, k.DB, fmt.Sprintf(`grant execute on function pgrun.queue_keys(text, integer) to %q`, k.acmeRole))
	_, err := k.acme.Exec(k.Ctx, `select * from pgrun.queue_keys('tq')`)
	pe := testkit.PgError(t, err, "queue_keys as a tenant")
	require.Equal(t, "42501", pe.Code)
	require.Equal(t, "the keys of queue 'tq' are every tenant's", pe.Message)

	for _, c := range []struct{ sql, msg string }{
		{`select * from pgrun.queue_sequences('Bad Name')`, "queue name 'Bad Name' is not valid"},
		{`select * from pgrun.queue_keys('Bad Name')`, "queue name 'Bad Name' is not valid"},
		{`select * from pgrun.queue_sequences('tq', 0)`, "max_rows 0 is not valid"},
		{`select * from pgrun.queue_keys('tq', 1001)`, "max_rows 1001 is not valid"},
		{`select * from pgrun.queue_keys('tq', null)`, "max_rows NULL is not valid"},
	} {
		_, err := k.admin.Exec(k.Ctx, c.sql)
		pe := testkit.PgError(t, err, c.sql)
		require.Equal(t, "22023", pe.Code, c.sql)
		require.Equal(t, c.msg, pe.Message, c.sql)
		require.NotEmpty(t, pe.Hint, c.sql)
	}
	require.Equal(t, 0, one[int](t, k.Ctx, k.admin, `select count(*)::int from pgrun.queue_sequences('nope')`))
	require.Equal(t, 0, one[int](t, k.Ctx, k.admin, `select count(*)::int from pgrun.queue_keys('nope')`))
}
