package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// top --once prints one frame (queues with their throughput and live workers, the
// running jobs with progress, the workers) and exits; without --once and without a
// terminal it says what to do instead.
func TestTopOncePrintsOneFrame(t *testing.T) {
	c, pool := newCLI(t)
	ctx := context.Background()
	_, err := c.run("job", "enqueue", "resize", "--queue", "images", "--count", "3")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `select pgrun.worker_heartbeat('w1', 'host-a', 1, '{images}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `select pgrun.set_progress(id, 1, 4) from pgrun.claim_jobs('images', 'w1', 1)`)
	require.NoError(t, err)

	out, err := c.run("top", "--once", "--width", "150")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "pgrun top  "), out)
	require.Regexp(t, `(?m)^QUEUE\s+QUEUED\s+SCHEDULED\s+RUNNING\s+PENDING\s+WAITING\s+OLDEST\s+WORKERS\s+JOBS/s 10s\s+JOBS/s 1m\s+FAILED 1m$`, out)
	require.Regexp(t, `(?m)^images\s+2\s+0\s+1\s+0\s+0\s+\S+\s+1\s+0\.0\s+0\.0\s+0$`, out)
	require.Regexp(t, `(?m)^1\s+images\s+resize\s+1\s+w1\s+\S+\s+\[#####---------------\]\s+25% 1/4$`, out)
	require.Contains(t, out, "WORKERS (1 live, 0 dead, 0 stopped)")
	for _, l := range strings.Split(out, "\n") {
		require.LessOrEqual(t, len([]rune(l)), 150)
	}

	_, err = c.run("top")
	require.ErrorContains(t, err, "use --once")
	_, err = c.run("top", "--interval", "10ms")
	require.ErrorContains(t, err, "--interval 10ms is too short")
}
