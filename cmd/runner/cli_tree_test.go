package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// The verbs from before the noun-verb tree still work, with the same output as
// their new names, and help lists only the new names.
func TestOldVerbsAreHiddenAliases(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("enqueue", "echo", `{"a": 1}`)
	require.NoError(t, err)
	require.Equal(t, "job 1 queued (echo, queue default)\n", out)
	out, err = c.run("job", "enqueue", "echo", `{"a": 1}`)
	require.NoError(t, err)
	require.Equal(t, "job 2 queued (echo, queue default)\n", out)

	old, err := c.run("job", "1")
	require.NoError(t, err)
	now, err := c.run("job", "get", "1")
	require.NoError(t, err)
	require.Equal(t, now, old)
	require.Contains(t, old, `{"a":1}`)
	_, err = c.run("job", "abc")
	require.EqualError(t, err, `job id "abc" is not a positive whole number`)
	_, err = c.run("job", "9")
	require.EqualError(t, err, "job 9 does not exist")

	out, err = c.run("cancel", "1", "--reason", "old verb")
	require.NoError(t, err)
	require.Equal(t, "job 1 cancelled (was queued)\n", out)
	_, err = c.run("cancel", "1")
	require.EqualError(t, err, "job 1 is cancelled, so it cannot be cancelled")

	listing := regexp.MustCompile(`(?m)^(\d+) +default +echo +(\w+)`)
	old, err = c.run("jobs", "--queue", "default")
	require.NoError(t, err)
	now, err = c.run("job", "list", "--queue", "default")
	require.NoError(t, err)
	require.Equal(t, listing.FindAllString(now, -1), listing.FindAllString(old, -1))
	require.Equal(t, []string{"2 default echo queued", "1 default echo cancelled"},
		squeeze(listing.FindAllString(old, -1)))

	out, err = c.run("retry", "1")
	require.NoError(t, err)
	require.Equal(t, "job 1 queued again\n", out)
	_, err = pool.Exec(context.Background(), `select pgrun.fail_job(id, attempt, '{"message": "x"}', retryable => false)
		from pgrun.claim_jobs('default', 'w', 10)`)
	require.NoError(t, err)
	out, err = c.run("retry", "--queue", "default", "--kind", "echo")
	require.NoError(t, err)
	require.Equal(t, "2 failed jobs queued again\n", out)
	_, err = c.run("retry")
	require.ErrorContains(t, err, "give a job ID, or --kind and/or --queue")

	out, err = c.run("control", "box-1", "*", "drain")
	require.NoError(t, err)
	require.Equal(t, "host box-1 queue *: drain\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.worker_control where host = 'box-1' and mode = 'drain'`))

	root := newRootCmd()
	var buf strings.Builder
	root.SetOut(&buf)
	root.SetArgs([]string{"--help"})
	require.NoError(t, root.Execute())
	help := buf.String()
	for _, old := range []string{"enqueue", "jobs", "cancel", "retry", "control"} {
		require.NotRegexp(t, `(?m)^  `+old+` `, help, "%s is hidden from help", old)
		out, err := c.run(old, "--help")
		require.NoError(t, err, old)
		require.Contains(t, out, "old name of `runner ", old)
	}
	for _, noun := range []string{"job", "queue", "worker", "schedule", "workflow", "migrate", "maintain",
		"work", "status", "ui", "bench", "demo"} {
		require.Regexp(t, `(?m)^  `+noun+` `, help, "%s is listed in help", noun)
	}
}

// squeeze collapses runs of spaces in each of lines to one.
func squeeze(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Join(strings.Fields(l), " ")
	}
	return out
}

func TestJobRetryBulkSince(t *testing.T) {
	c, pool := newCLI(t)
	for range 2 {
		_, err := c.run("job", "enqueue", "resize", "--queue", "images")
		require.NoError(t, err)
	}
	_, err := pool.Exec(context.Background(), `select pgrun.fail_job(id, attempt, '{"message": "x"}', retryable => false)
		from pgrun.claim_jobs('images', 'w', 10)`)
	require.NoError(t, err)
	out, err := c.run("job", "retry", "--since", "2999-01-02T00:00:00Z")
	require.NoError(t, err)
	require.Equal(t, "0 failed jobs queued again\n", out, "nothing failed after 2999")
	out, err = c.run("job", "retry", "--since", "1h", "--limit", "1")
	require.NoError(t, err)
	require.Equal(t, "1 failed jobs queued again\n", out)
	out, err = c.run("job", "retry", "--since", "1h")
	require.NoError(t, err)
	require.Equal(t, "1 failed jobs queued again\n", out)
	require.Equal(t, 2, count(t, pool, `select count(*) from pgrun.jobs where status = 'queued'`))

	_, err = c.run("job", "retry", "--since", "yesterday")
	require.ErrorContains(t, err, `--since "yesterday" is neither a duration`)
	_, err = c.run("job", "retry", "1", "--queue", "images")
	require.ErrorContains(t, err, "give a job ID or --queue/--kind/--since, not both")

	now := time.Date(2030, 1, 2, 15, 0, 0, 0, time.UTC)
	got, err := parseSince("90m", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-90*time.Minute), got)
	_, err = parseSince("-5m", now)
	require.ErrorContains(t, err, "is not positive")
}

func TestQueueSetAndList(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("queue", "list")
	require.NoError(t, err)
	require.Contains(t, out, "(no queues yet)")

	out, err = c.run("queue", "set", "images", "--max-running", "4", "--rate-limit", "100", "--rate-period", "1m",
		"--default-timeout", "10m", "--ephemeral")
	require.NoError(t, err)
	require.Regexp(t, `max running +4\n`, out)
	require.Regexp(t, `rate limit +100 per 1m0s\n`, out)
	require.Regexp(t, `ephemeral +true\n`, out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.queues where name = 'images' and max_running = 4
		and rate_limit = 100 and rate_period = '1 minute' and default_timeout = '10 minutes' and ephemeral`))

	// A flag left out keeps its value; --reset clears one.
	_, err = c.run("queue", "set", "images", "--reset", "max_running", "--concurrency-limit", "2")
	require.NoError(t, err)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.queues where name = 'images' and max_running is null
		and rate_limit = 100 and concurrency_limit = 2 and ephemeral`))

	out, err = c.run("queue", "list")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^images +false +- +100/1m0s +2 `, out)

	_, err = c.run("queue", "set", "images")
	require.ErrorContains(t, err, "give at least one setting to change")
	_, err = c.run("queue", "set", "images", "--max-running", "-1")
	require.Error(t, err)
	require.Contains(t, oneLine(err), "max_running")
	_, err = c.run("queue", "set", "Bad Queue", "--max-running", "1")
	require.Error(t, err)
	require.Contains(t, oneLine(err), "queue name 'Bad Queue' is not valid")
}

func TestWorkerListShowsRunnersAndSwitches(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("worker", "list")
	require.NoError(t, err)
	require.Equal(t, "(no workers registered)\n", strings.SplitN(out, "\n", 2)[1])

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, stop, err := startQuietRunner(ctx, pool, map[string]runner.QueueConfig{"images": {Workers: 2}})
	require.NoError(t, err)
	defer stop()
	require.Eventually(t, func() bool { return count(t, pool, `select count(*) from pgrun.workers`) == 1 },
		30*time.Second, 20*time.Millisecond, "the runner registers")
	_, err = c.run("worker", "control", "box-1", "images", "off")
	require.NoError(t, err)
	out, err = c.run("worker", "list")
	require.NoError(t, err)
	require.Regexp(t, regexp.QuoteMeta(r.WorkerID())+` +\S+ +running +live +images +0 `, out)
	require.Regexp(t, `(?m)^box-1 +images +off +`, out)
}

func TestMaintainStepAndRun(t *testing.T) {
	c, pool := newCLI(t)
	out, err := c.run("maintain", "step", "prune_history", "5m")
	require.NoError(t, err)
	require.Equal(t, "maintenance step prune_history runs at most once per 5m0s\n", out)
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.maintenance_steps where step = 'prune_history' and every = '5 minutes'`))
	out, err = c.run("maintain", "step", "prune_history", "0")
	require.NoError(t, err)
	require.Equal(t, "maintenance step prune_history runs every round\n", out)

	_, err = c.run("maintain", "step", "prune_histroy", "1m")
	require.Error(t, err)
	require.Contains(t, oneLine(err), "maintenance step 'prune_histroy' is not known (hint: Use one of")
	_, err = c.run("maintain", "step", "prune_history", "48h")
	require.Error(t, err)
	require.Contains(t, oneLine(err), "maintenance cadence 48:00:00 of step prune_history is not valid")
	_, err = c.run("maintain", "step", "prune_history", "soon")
	require.EqualError(t, err, `cadence "soon" is not a duration such as 0, 30s or 5m`)

	out, err = c.run("maintain", "run")
	require.NoError(t, err)
	var report map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	require.Contains(t, report, "lease_requeued")
}

// --version names the build and the SQL API it speaks; -ldflags -X main.version sets
// the first. (Not parallel: it sets the package's version.)
func TestVersionFlag(t *testing.T) {
	versionOf := func() string {
		root := newRootCmd()
		var out strings.Builder
		root.SetOut(&out)
		root.SetArgs([]string{"--version"})
		require.NoError(t, root.Execute())
		return out.String()
	}
	require.Regexp(t, fmt.Sprintf(`^runner \S+ \(SQL API %d\)\n$`, pgrun.APIVersion()), versionOf())
	defer func(v string) { version = v }(version)
	version = "v1.2.3"
	require.Equal(t, fmt.Sprintf("runner v1.2.3 (SQL API %d)\n", pgrun.APIVersion()), versionOf())
	require.Equal(t, "v1.2.3", moduleVersion(), "what a runner records in pgrun.workers")
}
