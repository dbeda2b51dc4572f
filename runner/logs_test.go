package runner_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// LogOutcomes writes one "job finished" line per attempt with the job's id, kind,
// queue and attempt, its duration and wait, and the outcome; a report that failed is
// an error with its cause.
func TestLogOutcomesLine(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	h := runner.LogOutcomes(logger, slog.LevelInfo)
	job := &pgrun.Job{ID: 42, Kind: "resize", Queue: "images", Attempt: 2}
	h.OnOutcome(runner.OutcomeEvent{Job: job, Outcome: runner.OutcomeRetried, Run: 1500 * time.Millisecond,
		Wait: 20 * time.Millisecond, ReportRoundTrip: time.Millisecond})
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "job finished", line["msg"])
	require.Equal(t, "INFO", line["level"])
	require.EqualValues(t, 42, line["job"])
	require.Equal(t, "resize", line["kind"])
	require.Equal(t, "images", line["queue"])
	require.EqualValues(t, 2, line["attempt"])
	require.EqualValues(t, 1500*time.Millisecond, line["duration"])
	require.EqualValues(t, 20*time.Millisecond, line["wait"])
	require.Equal(t, "retried", line["outcome"])
	require.NotContains(t, line, "report_err")

	buf.Reset()
	h.OnOutcome(runner.OutcomeEvent{Job: job, Outcome: runner.OutcomeSucceeded, Err: errors.New("connection refused")})
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, "connection refused", line["report_err"])
}

// The line per job is turned down by the logger's level.
func TestLogOutcomesTurnedDown(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := runner.LogOutcomes(logger, slog.LevelInfo)
	h.OnOutcome(runner.OutcomeEvent{Job: &pgrun.Job{ID: 1}, Outcome: runner.OutcomeSucceeded})
	require.Empty(t, buf.String())
}
