package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

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
