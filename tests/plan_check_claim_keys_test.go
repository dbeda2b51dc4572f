package tests

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// The claim with flow control per key (38_claim_keys.sql) reads what it takes, not the
// backlog: on a queue of 100,000 jobs over 1,000 concurrency keys and 50 tenants, a
// claim of 100 with fairness by key or by tenant, with per-key limits (the front held
// by a key at its limit, so the claim walks the keys), with a per-key rate, and with
// aging over three priority levels, each planned twice (the second from the session's
// cached plans), never reads pgrun.jobs sequentially and no scan of it reads more than
// a few thousand rows.
func TestKeyedClaimsReadOnlyWhatTheyTake(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`insert into pgrun.jobs (kind, queue, concurrency_key, run_at)
		 select 'noop', 'hot', 'big', now() - interval '2 hours' from generate_series(1, 2000)`,
		`insert into pgrun.jobs (kind, queue, concurrency_key, tenant, priority, run_at)
		 select 'noop', 'hot', 'k' || (i % 1000), 't' || (i % 50), i % 3, now() - interval '1 hour'
		 from generate_series(1, 100000) i`,
		`analyze pgrun.jobs`)
	conn, plans := analyzeSession(t, b)
	for _, settings := range []string{
		"fair_by => 'concurrency_key'",
		"fair_by => 'tenant', concurrency_limit => 1000",
		"reset => array['fair_by'], concurrency_limit => 1",
		"reset => array['concurrency_limit'], key_rate_limit => 1, key_rate_period => '1 hour'",
		"reset => array['key_rate_limit'], priority_aging => '1 minute'",
	} {
		_, err := conn.Exec(b.Ctx, `select pgrun.set_queue('hot', `+settings+`)`)
		require.NoError(t, err, settings)
		for range 2 {
			before := len(plans())
			var n int
			require.NoError(t, conn.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('hot', 'w', 100)`).Scan(&n), settings)
			require.Equal(t, 100, n, settings)
			requireNoSeqScan(t, plans()[before:], 5, settings)
			requireBoundedJobScans(t, plans()[before:], 3000, settings)
		}
	}
}

// requireBoundedJobScans fails on a plan (auto_explain with log_analyze) in which a scan
// of pgrun.jobs returned, or its filter threw away, more than bound rows in all.
func requireBoundedJobScans(t *testing.T, plans []string, bound int, what string) {
	t.Helper()
	scan := regexp.MustCompile(`on jobs \w+ .*actual time=\S+ rows=(\d+) loops=(\d+)`)
	removed := regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
	for _, p := range plans {
		inJobs := false
		for _, line := range strings.Split(p, "\n") {
			if m := scan.FindStringSubmatch(line); m != nil {
				inJobs = true
				rows, _ := strconv.Atoi(m[1])
				loops, _ := strconv.Atoi(m[2])
				require.LessOrEqual(t, rows*loops, bound, "%s: a scan of pgrun.jobs read too much:\n%s", what, p)
				continue
			}
			if strings.Contains(line, "->") {
				inJobs = false
			}
			if m := removed.FindStringSubmatch(line); m != nil && inJobs {
				n, _ := strconv.Atoi(m[1])
				require.LessOrEqual(t, n, bound, "%s: a scan of pgrun.jobs filtered out too much:\n%s", what, p)
			}
		}
	}
}
