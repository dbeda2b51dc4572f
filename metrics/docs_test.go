package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// docs/metrics.md lists every metric the exporter makes, and the Grafana dashboard
// uses only those.
func TestDocsListEveryMetric(t *testing.T) {
	b := setup(t)
	_, err := pgrun.Enqueue(b.ctx, b.pool, runner.KindNoop, nil)
	require.NoError(t, err)
	h := b.exp.Hooks()
	job := &pgrun.Job{ID: 1, Kind: "noop", Queue: "default"}
	h.OnClaim(runner.ClaimEvent{Queue: "default", Jobs: []*pgrun.Job{job}, RoundTrip: time.Millisecond})
	h.OnClaim(runner.ClaimEvent{Queue: "default", Err: os.ErrDeadlineExceeded})
	h.OnOutcome(runner.OutcomeEvent{Job: job, Outcome: runner.OutcomeSucceeded, ReportRoundTrip: time.Millisecond})
	h.OnOutcome(runner.OutcomeEvent{Job: job, Outcome: runner.OutcomeSucceeded, Err: os.ErrDeadlineExceeded})
	h.OnLeaseLost(job)
	h.OnMaintain(runner.MaintainEvent{Step: "prune_history", Rows: 1, Leader: true, Err: os.ErrClosed})

	families, err := b.exp.Registry().Gather()
	require.NoError(t, err)
	var made []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "pgrun_") {
			made = append(made, f.GetName())
		}
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	listed := regexp.MustCompile("(?m)^\\| `(pgrun_[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	var names []string
	for _, m := range listed {
		names = append(names, m[1])
	}
	slices.Sort(names)
	require.Equal(t, made, names, "docs/metrics.md lists what the exporter makes")

	dash, err := os.ReadFile("../docs/grafana-dashboard.json")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`pgrun_[a-z_]+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		require.Contains(t, made, base, "the dashboard uses %s", m)
	}
}
