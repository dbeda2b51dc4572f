package tests

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// At start a runner logs its queues, their slots and the kinds it handles, once.
func TestStartLineNamesQueuesSlotsAndKinds(t *testing.T) {
	b := testkit.Setup(t)
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	r := testkit.NewRunner(b.Pool, runner.Config{Logger: logger, MaintenanceInterval: -1,
		Queues: map[string]runner.QueueConfig{"default": {Workers: 3}, "images": {Workers: 2}}})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "the start line", func() bool { return len(testkit.JSONLines(t, logs.String(), "runner started")) > 0 })
	lines := testkit.JSONLines(t, logs.String(), "runner started")
	require.Len(t, lines, 1)
	start := lines[0]
	require.Equal(t, []any{"default", "images"}, start["queues"])
	require.Equal(t, "default=3 images=2", start["slots"])
	require.Contains(t, start["kinds"], runner.KindEcho)
	require.Contains(t, start["kinds"], runner.KindFail)
}

// With LogOutcomes, every finished job is one line at info with its id, kind, queue,
// attempt, duration and outcome.
func TestJobLinePerFinishedJob(t *testing.T) {
	b := testkit.Setup(t)
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	r := testkit.NewRunner(b.Pool, runner.Config{Logger: logger, MaintenanceInterval: -1,
		Hooks: []runner.Hooks{runner.LogOutcomes(logger, slog.LevelInfo)}})
	testkit.StartRunner(t, r)
	ok, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]int{"n": 1})
	require.NoError(t, err)
	bad, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindFail, runner.FailArgs{Permanent: true})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "two job lines", func() bool { return len(testkit.JSONLines(t, logs.String(), "job finished")) == 2 })
	byID := map[int64]map[string]any{}
	for _, l := range testkit.JSONLines(t, logs.String(), "job finished") {
		require.Equal(t, "INFO", l["level"])
		byID[int64(l["job"].(float64))] = l
	}
	require.Equal(t, "echo", byID[ok.ID]["kind"])
	require.Equal(t, "default", byID[ok.ID]["queue"])
	require.EqualValues(t, 1, byID[ok.ID]["attempt"])
	require.Equal(t, "succeeded", byID[ok.ID]["outcome"])
	require.Positive(t, byID[ok.ID]["duration"])
	require.Equal(t, "fail", byID[bad.ID]["kind"])
	require.Equal(t, "failed", byID[bad.ID]["outcome"])
}

// `runner work --log-format json --metrics-addr` logs only JSON lines (the start
// line, a line per job) and serves /metrics, which counts the jobs it ran.
func TestWorkLogsJSONAndServesMetrics(t *testing.T) {
	b := testkit.Setup(t)
	p := startWorker(t, b, "--queues", "default=2", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	var url string
	testkit.Eventually(t, 20*time.Second, "the metrics address in the log", func() bool {
		if ls := testkit.JSONLines(t, completeLines(p.Output()), "serving metrics"); len(ls) > 0 {
			url = ls[0]["url"].(string)
		}
		return url != ""
	})
	const n = 5
	for i := range n {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]int{"i": i})
		require.NoError(t, err)
	}
	want := `pgrun_jobs_succeeded_total{kind="echo",queue="default"} ` + fmt.Sprint(n)
	testkit.Eventually(t, 20*time.Second, "the scrape to count the jobs", func() bool {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.Contains(string(body), want+"\n")
	})
	out := completeLines(p.Output())
	require.Len(t, testkit.JSONLines(t, out, "runner started"), 1)
	testkit.Eventually(t, 10*time.Second, "a line per job", func() bool {
		return len(testkit.JSONLines(t, completeLines(p.Output()), "job finished")) == n
	})
}

// completeLines drops a last line still being written.
func completeLines(s string) string {
	return s[:strings.LastIndexByte(s, '\n')+1]
}
