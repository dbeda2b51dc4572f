package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// maintain() prunes finished jobs past their queue's retention with their events, in
// bounded batches, archiving them for queues that ask; active work is kept.
func TestRetentionPrunesAndArchives(t *testing.T) {
	b := testkit.Setup(t)
	old := testkit.At("2030-01-01T00:00:00Z")
	c := testkit.PinClock(t, b, old)
	c.Exec(`select pgrun.set_queue('keep', retention => '1 day', archive => true)`)
	c.Exec(`select pgrun.enqueue_jobs((select jsonb_agg(jsonb_build_object('kind', 'noop', 'queue', q))
		from generate_series(1, 5) i, unnest(array['default', 'keep']) q))`)
	c.Exec(`select pgrun.enqueue_job('coordinator', queue => 'coord', timeout => '0')`) // waits days: no timeout
	for _, q := range []string{"default", "keep"} {
		c.Exec(`select pgrun.complete_jobs(array_agg(id), array_agg(attempt)) from pgrun.claim_jobs($1, 'w', 10)`, q)
	}
	var pid int64
	var pattempt int
	c.QueryRow(`select id, attempt from pgrun.claim_jobs('coord', 'w', 1)`, nil, &pid, &pattempt)
	c.Exec(`select pgrun.defer_job($1, $2, '[{"kind": "part", "queue": "parts"}, {"kind": "part", "queue": "parts"}]')`, pid, pattempt)
	c.Exec(`select pgrun.complete_jobs(array_agg(id), array_agg(attempt)) from pgrun.claim_jobs('parts', 'w', 1)`)
	c.Exec(`select pgrun.emit(id, 'note') from pgrun.jobs where queue = 'default'`)

	c.Set(old.Add(2 * 24 * time.Hour)) // past 'keep' (1 day), within the default (7 days)
	var out string
	c.QueryRow(`select pgrun.maintain(batch => 3)::text`, nil, &out)
	require.Contains(t, out, `"pruned": 3`, "bounded batches")
	c.Set(old.Add(2*24*time.Hour + time.Minute)) // prune_history runs once a minute
	c.Exec(`select pgrun.maintain()`)
	var left, archived int
	c.QueryRow(`select count(*) from pgrun.jobs where queue = 'keep'`, nil, &left)
	c.QueryRow(`select count(*) from pgrun.jobs_archive where queue = 'keep'`, nil, &archived)
	require.Zero(t, left)
	require.Equal(t, 5, archived)

	c.Set(old.Add(8 * 24 * time.Hour)) // past the default retention
	c.Exec(`select pgrun.maintain()`)
	c.QueryRow(`select count(*) from pgrun.jobs where queue = 'default'`, nil, &left)
	require.Zero(t, left)
	var events int
	c.QueryRow(`select count(*) from pgrun.job_events e where not exists (select 1 from pgrun.jobs j where j.id = e.job_id)`, nil, &events)
	require.Zero(t, events, "events go with their jobs")
	var kept int
	c.QueryRow(`select count(*) from pgrun.jobs where queue in ('coord', 'parts')`, nil, &kept)
	require.Equal(t, 3, kept, "a waiting parent and its children are kept")
}
