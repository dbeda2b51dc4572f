package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// logCapture collects a JSON slog handler's lines.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(b)
}

// lines returns the records whose msg is msg, decoded.
func (c *logCapture) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	c.mu.Lock()
	text := c.buf.String()
	c.mu.Unlock()
	return jsonLines(t, text, msg)
}

// jsonLines decodes every line of text as a JSON object (failing the test on one that
// is not) and returns those whose msg is msg.
func jsonLines(t *testing.T, text, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON line: %s", sc.Text())
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// At start a runner logs its queues, their slots and the kinds it handles, once.
func TestStartLineNamesQueuesSlotsAndKinds(t *testing.T) {
	b := setup(t)
	logs := &logCapture{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	r := newRunner(b.pool, runner.Config{Logger: logger, MaintenanceInterval: -1,
		Queues: map[string]runner.QueueConfig{"default": {Workers: 3}, "images": {Workers: 2}}})
	startRunner(t, r)
	eventually(t, 10*time.Second, "the start line", func() bool { return len(logs.lines(t, "runner started")) > 0 })
	lines := logs.lines(t, "runner started")
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
	b := setup(t)
	logs := &logCapture{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	r := newRunner(b.pool, runner.Config{Logger: logger, MaintenanceInterval: -1,
		Hooks: []runner.Hooks{runner.LogOutcomes(logger, slog.LevelInfo)}})
	startRunner(t, r)
	ok, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindEcho, map[string]int{"n": 1})
	require.NoError(t, err)
	bad, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindFail, runner.FailArgs{Permanent: true})
	require.NoError(t, err)
	eventually(t, 10*time.Second, "two job lines", func() bool { return len(logs.lines(t, "job finished")) == 2 })
	byID := map[int64]map[string]any{}
	for _, l := range logs.lines(t, "job finished") {
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
	b := setup(t)
	p := startWorker(t, b, "--queues", "default=2", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	var url string
	eventually(t, 20*time.Second, "the metrics address in the log", func() bool {
		if ls := jsonLines(t, completeLines(p.output()), "serving metrics"); len(ls) > 0 {
			url = ls[0]["url"].(string)
		}
		return url != ""
	})
	const n = 5
	for i := range n {
		_, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindEcho, map[string]int{"i": i})
		require.NoError(t, err)
	}
	want := `pgrun_jobs_succeeded_total{kind="echo",queue="default"} ` + fmt.Sprint(n)
	eventually(t, 20*time.Second, "the scrape to count the jobs", func() bool {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.Contains(string(body), want+"\n")
	})
	out := completeLines(p.output())
	require.Len(t, jsonLines(t, out, "runner started"), 1)
	eventually(t, 10*time.Second, "a line per job", func() bool {
		return len(jsonLines(t, completeLines(p.output()), "job finished")) == n
	})
}

// completeLines drops a last line still being written.
func completeLines(s string) string {
	return s[:strings.LastIndexByte(s, '\n')+1]
}
