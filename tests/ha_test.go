package tests

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// TestHA runs pgrun on a real high-availability stack (scripts/ha-lab.sh: etcd, three
// PostgreSQL 15 nodes under Patroni, HAProxy, each node and each runner host in a
// network namespace of its own) and puts it through the faults of
// docs/high-availability.md, one subtest each: the primary's postmaster killed, a
// planned switchover, the primary cut off for 60 s, a runner host cut off for 60 s,
// etcd down for 30 s (with Patroni's failsafe mode, and without it), and a slow
// network (50 ms more round trip, 1% loss). The runners are the real `runner work`
// binary with the example handlers, two of them (r1, r2), connected through HAProxy
// (and, in kill_primary_multihost, with a multi-host URL). Each subtest has a
// database of its own and logs its figures in one line, "HA figures: scenario=... ",
// and asserts that no acknowledged job is lost and, under synchronous replication,
// that no job whose handler finished runs again (a runner cut off is the exception
// the docs give: its leases run out and its jobs run elsewhere).
//
// It needs root, and takes about seven minutes for every subtest (kill_primary,
// primary_cut and runner_cut, the ones that matter most, about four), so it runs only
// when asked:
//
//	PGRUN_HA_TEST=1 go test -count=1 -v -timeout 30m -run TestHA ./tests/
//	PGRUN_HA_TEST=1 go test -count=1 -v -run 'TestHA/(kill_primary|primary_cut|runner_cut)$' ./tests/
//	PGRUN_HA_TEST=1 PGRUN_HA_ASYNC=1 go test -count=1 -v -run 'TestHA/kill_primary$' ./tests/
//
// With PGRUN_HA_ASYNC=1 the lab runs asynchronous replication: finished jobs may run
// again after a failover (each under a new claim token), and are counted, not
// refused. PGRUN_HA_FAILSAFE=off turns Patroni's failsafe mode off (etcd_down then
// demotes the primary for the outage). The leases are 10 s (the default is 30 s):
// only their ratio to the faults matters, and a runner cut off for 60 s loses them
// either way.
func TestHA(t *testing.T) {
	if os.Getenv("PGRUN_HA_TEST") != "1" {
		t.Skip("set PGRUN_HA_TEST=1 to run the HA lab test (root; about seven minutes)")
	}
	lab := haLabUp(t)
	const lease = 10 * time.Second

	// A failover or switchover under a steady load: 20 jobs a second of 0.1 to 1 s.
	failover := func(t *testing.T, name, url, via, fault string) {
		s := newHAScenario(t, lab, name, url, lease, 40)
		s.enq.start(s.ctx, 20, 100, 1000)
		s.warm(100)
		old := lab.primary()
		at := time.Now()
		lab.must(time.Minute, fault)
		s.finishedSince(at, 90*time.Second)
		time.Sleep(5 * time.Second) // load after the fault, not a wait for a condition
		f := s.finish(at, 2*time.Minute, via)
		now := lab.primary()
		f.extra = append(f.extra, "primary="+old+"->"+now)
		f.log(t)
		require.NotEqual(t, old, now, "Patroni chose a new primary")
		haNothingLostOrRerun(t, lab, f, nil)
	}
	t.Run("kill_primary", func(t *testing.T) { failover(t, "ha_kill", lab.url, "haproxy", "kill-primary") })
	t.Run("kill_primary_multihost", func(t *testing.T) { failover(t, "ha_kill_multi", lab.multi, "multihost", "kill-primary") })
	t.Run("switchover", func(t *testing.T) { failover(t, "ha_switchover", lab.url, "haproxy", "switchover") })
	t.Run("primary_cut", func(t *testing.T) { haPrimaryCut(t, lab, lease) })
	t.Run("runner_cut", func(t *testing.T) { haRunnerCut(t, lab, lease) })
	t.Run("etcd_down", func(t *testing.T) { haEtcdDown(t, lab, lease, "ha_etcd", os.Getenv("PGRUN_HA_FAILSAFE") != "off") })
	// Without failsafe mode an etcd outage demotes the primary for its length; the
	// same node is promoted again when etcd is back. In between it answers writes with
	// "read-only transaction" (SQLSTATE 25006).
	t.Run("etcd_down_failsafe_off", func(t *testing.T) {
		lab.env = []string{"PGRUN_HA_FAILSAFE=off"}
		t.Cleanup(func() { lab.env = nil }) // the next subtest's up turns failsafe mode back on
		haEtcdDown(t, lab, lease, "ha_etcd_nofailsafe", false)
	})
	t.Run("slow_network", func(t *testing.T) { haSlowNetwork(t, lab, lease) })
}

// haEtcdDown stops etcd for 30 s under a steady load. With failsafe mode the primary
// stays primary and nothing stops.
func haEtcdDown(t *testing.T, lab *haLab, lease time.Duration, name string, failsafe bool) {
	s := newHAScenario(t, lab, name, lab.url, lease, 40)
	s.enq.start(s.ctx, 20, 100, 1000)
	s.warm(100)
	old := lab.primary()
	at := time.Now()
	lab.must(2*time.Minute, "etcd-stop", "30")
	time.Sleep(5 * time.Second) // load after etcd is back
	f := s.finish(at, 2*time.Minute, "haproxy")
	now := lab.primary()
	f.extra = append(f.extra, fmt.Sprintf("primary=%s->%s failsafe=%t", old, now, failsafe))
	f.log(t)
	if failsafe {
		require.Equal(t, old, now, "failsafe_mode keeps the primary while every member answers it")
	}
	haNothingLostOrRerun(t, lab, f, nil)
}

// finishedSince waits for a job enqueued after at to succeed: the service is back.
func (s *haScenario) finishedSince(at time.Time, within time.Duration) {
	testkit.Eventually(s.t, within, "a job enqueued after the fault to succeed", func() bool {
		var ok bool
		return s.admin.QueryRow(s.ctx, `select exists (select 1 from pgrun.jobs where created_at > $1 and status = 'succeeded')`, at).Scan(&ok) == nil && ok
	})
}

// haNothingLostOrRerun asserts that no acknowledged job was lost and, under
// synchronous replication, that no job's handler ran to its end twice, except the
// jobs of allowed.
func haNothingLostOrRerun(t *testing.T, lab *haLab, f *haFigures, allowed map[int64]bool) {
	t.Helper()
	require.Zero(t, f.Lost, "acknowledged jobs lost")
	if lab.async {
		return // counted in the figures: asynchronous replication may undo a completion
	}
	var twice []string
	for id, ls := range f.completions {
		if len(ls) > 1 && !allowed[id] {
			twice = append(twice, fmt.Sprintf("job %d: %+v", id, ls))
		}
	}
	sort.Strings(twice)
	require.Empty(t, twice, "jobs whose handler finished ran again")
}

// haPrimaryCut cuts the primary's node off for 60 s. Patroni on it cannot reach etcd
// or the other members (failsafe mode needs them all), so it demotes it; the others
// elect a new primary and HAProxy routes to it. What proves that no runner wrote to
// the old primary after the cut, read from inside its namespace over its own socket
// while it is still cut off: no row of pgrun.jobs created, started or finished at or
// after the cut, and every job it shows succeeded succeeded on the new primary under
// the same claim (its history is a prefix of the new one's); once back, it follows
// the new timeline.
func haPrimaryCut(t *testing.T, lab *haLab, lease time.Duration) {
	s := newHAScenario(t, lab, "ha_primary_cut", lab.url, lease, 40)
	s.enq.start(s.ctx, 20, 100, 1000)
	s.warm(100)
	old := lab.primary()
	require.NotEmpty(t, old)
	t.Cleanup(func() { _, _ = lab.run(time.Minute, "heal", old) })
	lab.must(time.Minute, "cut", old)
	at := time.Now() // after the link went down: nothing sent from here on reaches it

	var demoted time.Duration
	testkit.Eventually(t, 50*time.Second, "the cut-off primary to demote itself", func() bool {
		out, err := lab.psqlOn(old, s.name, "select pg_is_in_recovery()")
		if err == nil && strings.TrimSpace(out) == "t" {
			demoted = time.Since(at)
			return true
		}
		return false
	})
	// What it holds, read over its own socket while it is still cut off: the jobs it
	// shows succeeded, with their claims, and how many rows a transaction begun after
	// the cut wrote (created, started or finished at or after it).
	cut := fmt.Sprintf("to_timestamp(%f)", float64(at.UnixMicro())/1e6)
	oldDone, err := lab.psqlOn(old, s.name, `select id, claim_id from pgrun.jobs where status = 'succeeded'`)
	require.NoError(t, err, oldDone)
	touched, err := lab.psqlOn(old, s.name, `select count(*) from pgrun.jobs
		where greatest(created_at, started_at, finished_at) >= `+cut)
	require.NoError(t, err, touched)
	s.finishedSince(at, 60*time.Second)
	time.Sleep(time.Until(at.Add(60 * time.Second))) // the cut's length, not a wait for a condition
	lab.must(time.Minute, "heal", old)
	healed := time.Now()
	var rejoined time.Duration
	testkit.Eventually(t, 90*time.Second, old+" to follow the new primary", func() bool {
		m := lab.members()
		p := lab.primary()
		if p == "" || p == old {
			return false
		}
		role, leader := strings.Fields(m[old]), strings.Fields(m[p])
		if len(role) == 3 && len(leader) == 3 && role[0] != "Leader" && role[1] == "running" && role[2] == leader[2] {
			rejoined = time.Since(healed)
			return true
		}
		return false
	})
	time.Sleep(3 * time.Second) // load after the return
	f := s.finish(at, 2*time.Minute, "haproxy")

	// Every job the old primary shows succeeded is succeeded on the new one, under the
	// same claim: its history is a prefix of the new primary's.
	var oldSucceeded, contradicted int
	for _, line := range strings.Split(strings.TrimSpace(oldDone), "\n") {
		id, claim, ok := strings.Cut(line, "|")
		if !ok {
			continue
		}
		oldSucceeded++
		var same bool
		require.NoError(t, s.admin.QueryRow(s.ctx, `select exists (select 1 from pgrun.jobs
			where id = $1 and status = 'succeeded' and claim_id::text = $2)`, id, claim).Scan(&same))
		if !same {
			contradicted++
		}
	}
	f.extra = append(f.extra, fmt.Sprintf("primary=%s->%s demoted_after=%s rejoined_after_heal=%s old_succeeded=%d old_contradicted=%d old_rows_written_after_cut=%s",
		old, lab.primary(), demoted.Round(time.Millisecond), rejoined.Round(time.Millisecond), oldSucceeded, contradicted, strings.TrimSpace(touched)))
	f.log(t)
	require.Positive(t, oldSucceeded, "the old primary's jobs were read")
	require.Zero(t, contradicted, "jobs the old primary shows succeeded are not, or under another claim, on the new one")
	require.Equal(t, "0", strings.TrimSpace(touched), "rows written on the old primary after it was cut off")
	haNothingLostOrRerun(t, lab, f, nil)
}

// haRunnerCut cuts runner host r1 off for 60 s while it runs 40 long jobs (r2, started
// after r1 took them, runs the short ones): those that end during the cut (20 s) and
// those that outlast it (75 s). Their leases (10 s) run out,
// maintenance (r2's, or the leader's) hands them back, and r2 runs them. When r1
// returns, its late reports are refused (outcome stale: the claim token is no longer
// the job's) and its handlers still running are told to stop (lease_lost). Nothing is
// lost. The jobs whose handler finished on r1 during the cut run again on r2: the
// database cannot tell a cut-off runner from a dead one (docs/reliability.md).
func haRunnerCut(t *testing.T, lab *haLab, lease time.Duration) {
	// r1 alone takes the long jobs; r2 starts once it has them all.
	s := newHAScenario(t, lab, "ha_runner_cut", lab.url, lease, 100, "r1")
	var specs []pgrun.JobSpec
	for i := range 40 {
		ms := int64(20_000)
		if i%2 == 1 {
			ms = 75_000
		}
		specs = append(specs, pgrun.JobSpec{Kind: "sleep", Args: workArgs{MS: ms}})
	}
	long, err := pgrun.EnqueueMany(s.ctx, s.admin, specs)
	require.NoError(t, err)
	held := map[int64]int64{} // r1's long jobs at the cut: id -> ms
	for i, j := range long {
		s.enq.add(j.ID)
		held[j.ID] = specs[i].Args.(workArgs).MS
	}
	ids := make([]int64, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	testkit.Eventually(t, 30*time.Second, "r1 to run the long jobs", func() bool {
		var n int
		return s.admin.QueryRow(s.ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'running' and claimed_by = 'r1'`, ids).Scan(&n) == nil && n == len(ids)
	})
	s.startRunner("r2")
	s.enq.start(s.ctx, 10, 100, 500)
	s.warm(20)
	at := time.Now()
	lab.must(2*time.Minute, "isolate", "r1", "60")
	time.Sleep(5 * time.Second) // load after r1's return
	f := s.finish(at, 3*time.Minute, "haproxy")

	var reclaimed int
	var elsewhere time.Time
	require.NoError(t, s.admin.QueryRow(s.ctx, `select count(*) filter (where attempt > 1), max(started_at)
		from pgrun.jobs where id = any($1)`, ids).Scan(&reclaimed, &elsewhere))
	var refused, stopped, r1Succeeded int
	rerunAllowed := map[int64]bool{}
	for id := range held {
		for _, l := range f.stoppedOrStale[id] {
			if l.Runner != "r1" {
				continue
			}
			if l.Outcome == "stale" {
				refused++
			} else {
				stopped++
			}
		}
		for _, l := range f.completions[id] {
			if l.Runner == "r1" && l.Outcome == "succeeded" {
				r1Succeeded++
			}
		}
	}
	// A job whose run on r1 was cut off and refused when r1 came back ran elsewhere by
	// design: the jobs of 20 s, and the short ones r1 held at the cut.
	for id, ls := range f.completions {
		for _, l := range ls {
			if l.Runner == "r1" && l.Outcome == "stale" {
				rerunAllowed[id] = true
			}
		}
	}
	f.extra = append(f.extra, fmt.Sprintf("r1_held=%d reclaimed=%d last_started_elsewhere_after=%s r1_late_reports_refused=%d r1_handlers_stopped=%d r1_succeeded_of_held=%d",
		len(held), reclaimed, elsewhere.Sub(at).Round(time.Millisecond), refused, stopped, r1Succeeded))
	f.log(t)
	require.Equal(t, len(held), reclaimed, "every job r1 held ran again elsewhere (attempt > 1)")
	require.Zero(t, r1Succeeded, "a report of r1's from before the cut finished a job claimed again since")
	require.Positive(t, refused, "r1's late reports (jobs that ended during the cut) were refused")
	require.Positive(t, stopped, "r1's handlers still running when it came back were told to stop")
	require.GreaterOrEqual(t, f.LeaseRequeues, len(held), "r1's leases ran out")
	haNothingLostOrRerun(t, lab, f, rerunAllowed)
}

// haSlowNetwork measures start latency and throughput with the runners reaching the
// database through a proxy that adds 25 ms each way, and with 1% of their packets
// dropped each way, against the same without: no lease may be lost for it.
func haSlowNetwork(t *testing.T, lab *haLab, lease time.Duration) {
	proxy := startDelayProxy(t, "10.77.0.1:0", "10.77.0.3:5000")
	url := "postgres://postgres@" + proxy.addr() + "/postgres?sslmode=disable&connect_timeout=5"
	s := newHAScenario(t, lab, "ha_slow", url, lease, 40)
	measure := func(label string) string {
		before := len(s.enq.ackedIDs())
		s.enq.start(s.ctx, 20, 50, 50)
		time.Sleep(10 * time.Second) // 200 jobs at a steady rate, the load measured
		s.enq.stop()
		steady := s.enq.ackedIDs()[before:]
		testkit.Eventually(t, time.Minute, label+": the steady jobs to succeed", func() bool {
			var n int
			return s.admin.QueryRow(s.ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'succeeded'`, steady).Scan(&n) == nil && n == len(steady)
		})
		var p50, p99 float64
		require.NoError(t, s.admin.QueryRow(s.ctx, `select percentile_cont(0.5) within group (order by d), percentile_cont(0.99) within group (order by d)
			from (select extract(epoch from started_at - created_at) * 1000 d from pgrun.jobs where id = any($1)) x`, steady).Scan(&p50, &p99))
		specs := make([]pgrun.JobSpec, 2000)
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: "sleep", Args: workArgs{MS: 0}}
		}
		began := time.Now()
		burst, err := pgrun.EnqueueMany(s.ctx, s.admin, specs)
		require.NoError(t, err)
		ids := make([]int64, len(burst))
		for i, j := range burst {
			ids[i] = j.ID
		}
		s.enq.add(ids...)
		testkit.Eventually(t, 3*time.Minute, label+": the burst to succeed", func() bool {
			var n int
			return s.admin.QueryRow(s.ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'succeeded'`, ids).Scan(&n) == nil && n == len(ids)
		})
		rate := float64(len(ids)) / time.Since(began).Seconds()
		return fmt.Sprintf("%s_start_p50=%.1fms %s_start_p99=%.1fms %s_burndown=%.0f/s", label, p50, label, p99, label, rate)
	}
	base := measure("base")
	proxy.delay.Store(int64(25 * time.Millisecond))
	for _, r := range []string{"r1", "r2"} {
		lab.must(time.Minute, "slow", r, "0", "1%")
		t.Cleanup(func() { _, _ = lab.run(time.Minute, "slow-off", r) })
	}
	at := time.Now()
	slow := measure("slow")
	f := s.finish(at, 2*time.Minute, "delay-proxy")
	f.extra = append(f.extra, base, slow)
	f.log(t)
	require.Zero(t, f.LeaseRequeues, "leases lost to a slow network")
	for r, m := range f.Outcomes {
		require.Zero(t, m["lease_lost"], "%s lost leases to a slow network", r)
	}
	haNothingLostOrRerun(t, lab, f, nil)
}
