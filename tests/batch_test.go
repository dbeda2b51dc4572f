package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The Python example worker's batch mode (PGRUN_BATCH=N, examples/python-worker):
// the jobs one claim brought go to one handler call, and each is reported on its
// own, as runner.HandleBatch does (its own tests are in runner/batch_test.go): the
// successes in one complete_jobs call, a failure retried or failed for good, a
// retry later put back without spending an attempt.
func TestPythonWorkerBatchMode(t *testing.T) {
	b := testkit.Setup(t)
	specs := []pgrun.JobSpec{
		{Kind: "echo", Args: map[string]any{"n": 0}},
		{Kind: "echo", Args: map[string]any{"n": 1}},
		{Kind: "echo", Args: map[string]any{"n": 2}},
		{Kind: "noop"},
		{Kind: "fail", Args: map[string]any{"times": 1}},
		{Kind: "fail", Args: map[string]any{"permanent": true, "message": "no"}},
		{Kind: "later", Args: map[string]any{"ms": 50}},
	}
	for i := range specs {
		specs[i].Queue = "conf"
	}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	out, err := exec.Command(pythonBin, "-c", "import psycopg").CombinedOutput()
	require.NoError(t, err, "the Python worker needs Debian's python3-psycopg (apt-get install python3-psycopg): %s", out)
	cmd := exec.Command(pythonBin, "../examples/python-worker/worker.py", b.URL, "conf")
	cmd.Env = append(os.Environ(), "PGRUN_WORKER_ID=py-batch", "PGRUN_BATCH=20", "PGRUN_BATCH_LINGER_MS=200")
	testkit.StartProc(t, "python batch worker", cmd)

	got := map[int64]*pgrun.Job{}
	testkit.Eventually(t, 30*time.Second, "every job to finish", func() bool {
		for _, j := range jobs {
			if got[j.ID] = getJob(t, b, j.ID); !got[j.ID].Status.Finished() {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		j := got[jobs[i].ID]
		require.Equal(t, pgrun.StatusSucceeded, j.Status)
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(j.Result))
	}
	require.Equal(t, pgrun.StatusSucceeded, got[jobs[3].ID].Status)
	retried, permanent, later := got[jobs[4].ID], got[jobs[5].ID], got[jobs[6].ID]
	require.Equal(t, pgrun.StatusSucceeded, retried.Status)
	require.Equal(t, []int{2, 1}, []int{retried.Attempt, retried.Failures})
	require.Equal(t, pgrun.StatusFailed, permanent.Status)
	require.Equal(t, 1, permanent.Attempt)
	var e struct{ Message string }
	require.NoError(t, json.Unmarshal(permanent.Error, &e))
	require.Equal(t, "no", e.Message)
	require.Equal(t, pgrun.StatusSucceeded, later.Status)
	require.Equal(t, []int{2, 0}, []int{later.Attempt, later.Failures})

	// The jobs that ended on their first attempt were claimed by one claim_jobs call:
	// a claim's ids share their first 64 bits, drawn once per call.
	var claims int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct left(claim_id::text, 18)) from pgrun.jobs
		where id = any($1) and attempt = 1`, []int64{jobs[0].ID, jobs[1].ID, jobs[2].ID, jobs[3].ID, jobs[5].ID}).Scan(&claims))
	require.Equal(t, 1, claims, "the first attempts were not one batch")
}
