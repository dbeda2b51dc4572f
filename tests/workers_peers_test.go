package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
)

// queue_peers counts, per queue, the other workers that are alive and running and
// serve it: not the caller, not a draining or stopped one, not one gone silent.
func TestQueuePeersCountsOtherLiveWorkers(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.worker_heartbeat('silent', 'h4', 4, '{a,b}', cadence => '10 seconds')`)
	c.Set(now.Add(time.Minute)) // 'silent' is past three cadences
	c.Exec(`select pgrun.worker_heartbeat('me', 'h1', 1, '{a,b,c}', cadence => '10 seconds')`)
	c.Exec(`select pgrun.worker_heartbeat('peer', 'h2', 2, '{a}', cadence => '10 seconds')`)
	c.Exec(`select pgrun.worker_heartbeat('draining', 'h3', 3, '{a,b}', state => 'draining', cadence => '10 seconds')`)

	peers := func(worker string, queues ...string) map[string]int {
		t.Helper()
		got := map[string]int{}
		if queues == nil {
			queues = []string{} // an empty array, not NULL
		}
		// On the pinned clock's session: liveness is judged by the engine's clock.
		c.QueryRow(`select coalesce(jsonb_object_agg(queue, peers), '{}') from pgrun.queue_peers($1, $2)`,
			[]any{worker, queues}, &got)
		return got
	}
	require.Equal(t, map[string]int{"a": 1, "b": 0, "c": 0}, peers("me", "a", "b", "c"))
	require.Equal(t, map[string]int{"a": 1}, peers("peer", "a"), "the caller is not its own peer")
	require.Equal(t, map[string]int{}, peers("me"))

	c.Exec(`select pgrun.worker_heartbeat('peer', 'h2', 2, '{a}', state => 'stopped', cadence => '10 seconds')`)
	require.Equal(t, map[string]int{"a": 0}, peers("me", "a"), "a stopped worker is no peer")
}

// A runner with only the worker role may ask (the Go runner does, at start and
// with each heartbeat), and bad input changes nothing.
func TestQueuePeersForTheWorkerRoleAndBadInput(t *testing.T) {
	b := testkit.Setup(t)
	p := testkit.AsRole(t, b, "pgrun_worker")
	testkit.Denied(t, b, p, `select * from pgrun.queue_peers('w', array['a'])`) // not registered by this login
	testkit.Allowed(t, b, p, `select pgrun.worker_heartbeat('w', 'h', 1, array['a'])`)
	testkit.Allowed(t, b, p, `select * from pgrun.queue_peers('w', array['a'])`)
	// The runner's own look, which also reads each queue's rate limit.
	testkit.Allowed(t, b, p, sqlapi.QueuePeers, "w", []string{"a"})
	testkit.Refused(t, b, p, "22023", `select * from pgrun.queue_peers('w', null)`)
	testkit.Refused(t, b, p, "22023", `select * from pgrun.queue_peers('w', array_fill('q'::text, array[1001]))`)
	testkit.Refused(t, b, p, "22023", `select * from pgrun.queue_peers('', array['a'])`)
	enqueuer := testkit.AsRole(t, b, "pgrun_enqueuer")
	testkit.Denied(t, b, enqueuer, `select * from pgrun.queue_peers('w', array['a'])`)
}

// The runner's look reads, per queue, whether completions make room a claim waits
// for (max_running, concurrency_limit): such a queue's successes are recorded at once
// rather than held back to share a call; and the key it is fair by (its claims are
// then capped at runner.FairMaxClaim while they take more than one job of a key). A
// queue without a row has no limits.
func TestQueuePeersSaysWhichQueuesAnnounceRoom(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('plain')`,
		`select pgrun.set_queue('capped', max_running => 2)`,
		`select pgrun.set_queue('keyed', concurrency_limit => 1)`,
		`select pgrun.set_queue('rated', rate_limit => 5, rate_period => '1 second')`,
		`select pgrun.set_queue('fair', fair_by => 'tenant')`)
	p := testkit.AsRole(t, b, "pgrun_worker")
	testkit.Allowed(t, b, p, `select pgrun.worker_heartbeat('w', 'h', 1, array['plain'])`)
	rows, err := p.Query(b.Ctx, sqlapi.QueuePeers, "w", []string{"plain", "capped", "keyed", "rated", "fair", "none"})
	require.NoError(t, err)
	got := map[string]bool{}
	rate := map[string]int64{}
	var fairs []string
	for rows.Next() {
		var queue string
		var peers int32
		var periodUS int64
		var announces bool
		var fairBy string
		require.NoError(t, rows.Scan(&queue, &peers, &periodUS, &announces, &fairBy))
		got[queue], rate[queue] = announces, periodUS
		if fairBy != "" {
			fairs = append(fairs, queue+":"+fairBy)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]bool{"plain": false, "capped": true, "keyed": true, "rated": false, "fair": false, "none": false}, got)
	require.Equal(t, map[string]int64{"plain": 0, "capped": 0, "keyed": 0, "rated": 1_000_000, "fair": 0, "none": 0}, rate)
	require.Equal(t, []string{"fair:tenant"}, fairs)
}
