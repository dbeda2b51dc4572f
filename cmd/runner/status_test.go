package main

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// These tests pin the engine's clock (SET pgrun.now; test databases enable the
// seam) instead of sleeping: the commands run on a URL that sets pgrun.now for
// each of their sessions, and the setup runs on testkit's pinned connection.

// pinClock pins pgrun.clock() at at on a connection of pool (testkit's clock).
func pinClock(t *testing.T, c *cli, pool *pgxpool.Pool, at time.Time) *testkit.Clock {
	t.Helper()
	return testkit.PinClock(t, &testkit.DB{Ctx: context.Background(), Pool: pool, URL: c.url}, at)
}

// endJobs runs n jobs of queue to an end at the clock's time: each is enqueued,
// claimed by worker w1, and then completed (ok) or failed for good.
func endJobs(clock *testkit.Clock, queue string, n int, ok bool) {
	for range n {
		var id int64
		var attempt int32
		clock.QueryRow(`select j.id, j.attempt from pgrun.enqueue_job('noop', queue => $1) e,
			pgrun.claim_jobs($1, 'w1', 1) j`, []any{queue}, &id, &attempt)
		if ok {
			clock.Exec(`select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
		} else {
			clock.Exec(`select pgrun.fail_job($1, $2, '{"message": "broken"}', retryable => false)`, id, attempt)
		}
	}
}

// at is c's command line with the engine's clock pinned to t for every session.
func (c *cli) at(t time.Time) *cli {
	sep := "?"
	if strings.Contains(c.url, "?") {
		sep = "&"
	}
	return &cli{t: c.t, url: c.url + sep + "options=" + strings.ReplaceAll(url.QueryEscape("-c pgrun.now="+t.Format(time.RFC3339Nano)), "+", "%20")}
}

// statusJSON runs `status --json` and decodes it.
func (c *cli) statusJSON() (queues []map[string]any, workers []map[string]any, warnings []string) {
	c.t.Helper()
	out, err := c.run("status", "--json")
	require.NoError(c.t, err)
	var doc struct {
		Queues   []map[string]any `json:"queues"`
		Workers  []map[string]any `json:"workers"`
		Warnings []string         `json:"warnings"`
	}
	require.NoError(c.t, json.Unmarshal([]byte(out), &doc), out)
	return doc.Queues, doc.Workers, doc.Warnings
}

// Throughput is reported over the last 10 seconds and over the last minute, each
// labelled: jobs that ended 30 s ago count in the minute only.
func TestStatusThroughputOverTenSecondsAndAMinute(t *testing.T) {
	c, pool := newCLI(t)
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clock := pinClock(t, c, pool, now.Add(-30*time.Second))
	endJobs(clock, "tp", 6, true)
	clock.Set(now.Add(-5 * time.Second))
	endJobs(clock, "tp", 1, true)
	endJobs(clock, "tp", 1, false)
	clock.Set(now.Add(-2 * time.Minute))
	endJobs(clock, "tp", 4, true) // too old for either window

	out, err := c.at(now).run("status")
	require.NoError(t, err)
	header := strings.SplitN(out, "\n", 2)[0]
	require.Contains(t, header, "DONE/FAILED last 10s")
	require.Contains(t, header, "JOBS/s last 10s")
	require.Contains(t, header, "DONE/FAILED last 1m")
	require.Contains(t, header, "JOBS/s last 1m")
	require.Regexp(t, regexp.MustCompile(`(?m)^tp\s.*\s1/1\s+0\.2\s+7/1\s+0\.1$`), out)

	queues, _, _ := c.at(now).statusJSON()
	require.Len(t, queues, 1)
	q := queues[0]
	require.Equal(t, []any{1.0, 1.0, 7.0, 1.0}, []any{q["succeeded_10s"], q["failed_10s"], q["succeeded_1m"], q["failed_1m"]})
	require.InDelta(t, 0.2, q["jobs_per_sec_10s"], 1e-9)
	require.InDelta(t, 8.0/60, q["jobs_per_sec_1m"], 1e-9)

	// finished_counts refuses a span that is not positive, naming it.
	for _, span := range []string{"0 seconds", "-1 minute"} {
		_, err := pool.Exec(context.Background(), `select * from pgrun.finished_counts($1::interval)`, span)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "22023", pe.Code)
		require.NotEmpty(t, pe.Hint)
	}
	_, err = pool.Exec(context.Background(), `select * from pgrun.finished_counts(null)`)
	require.ErrorContains(t, err, "span NULL is not valid")
}

// A queue with due jobs and no live worker serving it is flagged, and so is one
// whose live workers lack a handler for some of its due jobs' kinds; when the
// queue's only worker goes silent for three heartbeats, the flag changes to say no
// worker serves it.
func TestStatusFlagsQueuesNoLiveWorkerServes(t *testing.T) {
	c, pool := newCLI(t)
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clock := pinClock(t, c, pool, now)
	clock.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 1, '{served}', cadence => '10 seconds', kinds => '{resize}')`)
	clock.Exec(`select pgrun.enqueue_job('resize', queue => 'served')`)
	clock.Exec(`select pgrun.enqueue_job('embed', queue => 'served')`)
	clock.Exec(`select pgrun.enqueue_job('resize', queue => 'orphan')`)
	clock.Exec(`select pgrun.enqueue_job('resize', queue => 'orphan')`)
	clock.Exec(`select pgrun.enqueue_job('resize', queue => 'later', run_at => $1::timestamptz)`, now.Add(time.Hour))

	out, err := c.at(now).run("status")
	require.NoError(t, err)
	require.Contains(t, out, "\norphan: 2 queued jobs and no live worker serves this queue\n")
	require.Contains(t, out, "\nserved: 1 queued job of a kind no live worker handles\n")
	require.NotContains(t, out, "later:", "a job not yet due is not flagged")
	queues, _, warnings := c.at(now).statusJSON()
	require.Len(t, warnings, 2)
	live := map[string]any{}
	for _, q := range queues {
		live[q["queue"].(string)] = q["live_workers"]
	}
	require.Equal(t, map[string]any{"later": 0.0, "orphan": 0.0, "served": 1.0}, live)

	// 29 s later w1 is still live; at 31 s (three 10 s cadences) it is not.
	out, err = c.at(now.Add(29 * time.Second)).run("status")
	require.NoError(t, err)
	require.Contains(t, out, "\nserved: 1 queued job of a kind no live worker handles\n")
	out, err = c.at(now.Add(31 * time.Second)).run("status")
	require.NoError(t, err)
	require.Contains(t, out, "\nserved: 2 queued jobs and no live worker serves this queue\n")
}

// A worker silent for three heartbeat cadences leaves the live workers even though
// it held no job (maintain() flags only workers holding jobs; liveness does not
// wait for it), and a stopped worker is listed apart.
func TestStatusDeadIdleWorkerLeavesTheLiveWithinThreeHeartbeats(t *testing.T) {
	c, pool := newCLI(t)
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clock := pinClock(t, c, pool, now)
	clock.Exec(`select pgrun.worker_heartbeat('idle', 'host-a', 1, '{default}', cadence => '10 seconds')`)
	clock.Exec(`select pgrun.worker_heartbeat('done', 'host-b', 2, '{default}', cadence => '10 seconds', state => 'stopped')`)

	sections := func(at time.Time) (live, dead, stopped string) {
		out, err := c.at(at).run("status")
		require.NoError(t, err)
		live = between(out, "WORKER  ", "\n\n")
		dead = between(out, "DEAD WORKER", "\n\n")
		stopped = between(out, "STOPPED WORKER", "\n\n")
		return
	}
	live, dead, stopped := sections(now.Add(29 * time.Second))
	require.Contains(t, live, "\nidle ")
	require.Empty(t, dead)
	require.Contains(t, stopped, "\ndone ")
	require.NotContains(t, live, "done")

	live, dead, stopped = sections(now.Add(31 * time.Second))
	require.NotContains(t, live, "idle")
	require.Contains(t, live, "(no live workers)")
	require.Contains(t, dead, "\nidle ")
	require.Contains(t, stopped, "\ndone ")

	_, workers, _ := c.at(now.Add(31 * time.Second)).statusJSON()
	state := map[string]any{}
	for _, w := range workers {
		state[w["id"].(string)] = w["liveness"]
	}
	require.Equal(t, map[string]any{"idle": "dead", "done": "stopped"}, state)
	var flagged bool
	require.NoError(t, pool.QueryRow(context.Background(), `select flagged_dead_at is not null from pgrun.workers where id = 'idle'`).Scan(&flagged))
	require.False(t, flagged, "the rule is liveness; nothing was written")

	// A heartbeat brings it back.
	clock.Set(now.Add(40 * time.Second))
	clock.Exec(`select pgrun.worker_heartbeat('idle', 'host-a', 1, '{default}', cadence => '10 seconds')`)
	live, dead, _ = sections(now.Add(41 * time.Second))
	require.Contains(t, live, "\nidle ")
	require.Empty(t, dead)
}

// between returns the text of s from the first start to the next end after it
// ("" when start does not occur).
func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	rest := s[i:]
	if j := strings.Index(rest, end); j >= 0 {
		return rest[:j]
	}
	return rest
}
