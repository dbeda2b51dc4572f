package runner_test

import (
	"log/slog"
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
