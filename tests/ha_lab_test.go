package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The harness of TestHA (ha_test.go): the lab (scripts/ha-lab.sh), one database per
// scenario, `runner work` processes in the lab's runner namespaces, an enqueuer, a
// sampler of leases, a delaying proxy, and the figures each scenario reports.

// haLab is scripts/ha-lab.sh's lab, brought up once for TestHA.
type haLab struct {
	t     *testing.T
	async bool
	url   string   // the primary through HAProxy, database postgres
	multi string   // the three nodes, target_session_attrs=read-write
	env   []string // for ha-lab.sh, beside the test's own (PGRUN_HA_FAILSAFE=off)
}

const haScript = "../scripts/ha-lab.sh"

// haLabUp brings the lab up (synchronous mode, or asynchronous with PGRUN_HA_ASYNC=1)
// and takes it down when the test ends, passed or not.
func haLabUp(t *testing.T) *haLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the HA lab needs root (network namespaces)")
	}
	l := &haLab{t: t, async: os.Getenv("PGRUN_HA_ASYNC") == "1"}
	t.Cleanup(func() {
		if out, err := l.run(2*time.Minute, "down"); err != nil {
			t.Errorf("ha-lab.sh down: %v\n%s", err, out)
		}
	})
	l.up()
	urls := strings.Fields(l.must(time.Minute, "urls"))
	require.Len(t, urls, 2, "ha-lab.sh urls prints two URLs")
	l.multi = urls[1]
	return l
}

// up brings the lab up, or waits for it to be whole again (up is idempotent: it
// starts what is not running and waits for a leader, two standbys and HAProxy).
func (l *haLab) up() {
	args := []string{"up"}
	if l.async {
		args = append(args, "--async")
	}
	out := strings.TrimSpace(l.must(5*time.Minute, args...))
	l.url = out[strings.LastIndexByte(out, '\n')+1:]
	require.True(l.t, strings.HasPrefix(l.url, "postgres://"), "ha-lab.sh up's last line is a URL, got %q", l.url)
}

func (l *haLab) run(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, haScript, args...)
	cmd.Env = append(os.Environ(), l.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), fmt.Errorf("ha-lab.sh %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (l *haLab) must(d time.Duration, args ...string) string {
	l.t.Helper()
	out, err := l.run(d, args...)
	require.NoError(l.t, err, out)
	return out
}

// primary is the node Patroni shows as the running leader ("" if none).
func (l *haLab) primary() string {
	out, _ := l.run(30*time.Second, "status")
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "primary: "); ok && p != "none" {
			return strings.TrimSpace(p)
		}
	}
	return ""
}

// members is patronictl's view: node -> "role state timeline".
func (l *haLab) members() map[string]string {
	out, _ := l.run(30*time.Second, "status")
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) < 7 || !strings.HasPrefix(strings.TrimSpace(f[1]), "pg") {
			continue
		}
		m[strings.TrimSpace(f[1])] = strings.Join([]string{strings.TrimSpace(f[3]), strings.TrimSpace(f[4]), strings.TrimSpace(f[5])}, " ")
	}
	return m
}

// psqlOn runs sql on node's own server through its Unix socket, from inside the
// node's namespace: it reaches a node the test has cut off from the network.
func (l *haLab) psqlOn(node, db, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dir := os.Getenv("PGRUN_HA_DIR")
	if dir == "" {
		dir = "/tmp/pgrun-ha"
	}
	out, err := exec.CommandContext(ctx, haScript, "exec", node, "psql", "-XAtq", "-v", "ON_ERROR_STOP=1",
		"-h", dir+"/"+node, "-U", "postgres", "-d", db, "-c", sql).CombinedOutput()
	return string(out), err
}

// withDB is url with its database replaced by db.
func withDB(url, db string) string {
	i := strings.Index(url, "/postgres?")
	if i < 0 {
		panic("no /postgres? in " + url)
	}
	return url[:i] + "/" + db + "?" + url[i+len("/postgres?"):]
}

// haScenario is one scenario's database, runners, enqueuer and sampler.
type haScenario struct {
	t       *testing.T
	ctx     context.Context
	lab     *haLab
	name    string
	admin   *pgxpool.Pool // through HAProxy
	runners map[string]*testkit.Proc
	lease   time.Duration
	slots   int
	url     string // the runners'
	enq     enqueuer
	idle    haIdleSampler
	outage  time.Duration // the longest a runner found the database unreachable
}

// newHAScenario makes database name, migrates pgrun into it, and starts one
// `runner work` of slots slots in each runner namespace named (r1 and r2 if none),
// connected to runnerURL (a URL of database postgres, rewritten to name).
func newHAScenario(t *testing.T, l *haLab, name, runnerURL string, lease time.Duration, slots int, runners ...string) *haScenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	l.up() // whole again after the scenario before
	root := failoverPool(t, ctx, l.url+"&connect_timeout=2", nil)
	_, err := root.Exec(ctx, "drop database if exists "+name+" with (force)")
	require.NoError(t, err)
	_, err = root.Exec(ctx, "create database "+name)
	require.NoError(t, err)
	root.Close()
	s := &haScenario{t: t, ctx: ctx, lab: l, name: name, lease: lease, slots: slots,
		url: withDB(runnerURL, name), runners: map[string]*testkit.Proc{}}
	s.admin = failoverPool(t, ctx, withDB(l.url, name)+"&connect_timeout=2", nil)
	require.NoError(t, pgrun.Migrate(ctx, s.admin))
	if len(runners) == 0 {
		runners = []string{"r1", "r2"}
	}
	for _, r := range runners {
		s.startRunner(r)
	}
	s.enq.pool, s.enq.kind = s.admin, "sleep"
	s.idle.start(ctx, s.admin)
	t.Cleanup(s.enq.stop)
	t.Cleanup(s.idle.stop)
	return s
}

// startRunner starts `runner work` with worker id r in runner namespace r.
func (s *haScenario) startRunner(r string) {
	cmd := exec.Command(haScript, "exec", r, runnerBin, "work", "--examples",
		"--database-url", s.url, "--queues", fmt.Sprintf("default=%d", s.slots),
		"--worker-id", r, "--lease", s.lease.String(), "--grace", "1s", "--log-format", "json",
		"--telemetry-interval", "0")
	s.runners[r] = testkit.StartProc(s.t, "runner "+r, cmd)
}

// finishedCount is how many jobs have succeeded (0 while the database is away).
func (s *haScenario) finishedCount() int {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	var n int
	_ = s.admin.QueryRow(ctx, `select count(*) from pgrun.jobs where status = 'succeeded'`).Scan(&n)
	return n
}

// warm waits for n jobs to succeed: the runners are up and working.
func (s *haScenario) warm(n int) {
	testkit.Eventually(s.t, 60*time.Second, fmt.Sprintf("%d jobs to succeed before the fault", n), func() bool { return s.finishedCount() >= n })
}

// haFigures are one scenario's measurements (see docs/high-availability.md).
type haFigures struct {
	Enqueued, Succeeded, Lost int
	FirstFinish, Drain        time.Duration // from the fault
	Pause                     time.Duration // the longest time without a completion after it, under load
	Resumed                   time.Duration // from the fault to the completion that ended Pause
	DrainAfterLoad            time.Duration // from the enqueuer's stop
	// RunTwice counts jobs whose handler ran to its end more than once (the runners'
	// "job finished" lines with outcome succeeded or stale).
	RunTwice                    int
	ReclaimedSucceeded          int // succeeded with attempt > 1
	LeaseRequeues, Released     int // job_events
	IdlePastLease               int // most running claims seen past their lease in one sample
	IdlePastLeaseFor            time.Duration
	Outcomes                    map[string]map[string]int // runner -> outcome -> count
	completions                 map[int64][]haLine
	stoppedOrStale              map[int64][]haLine
	extra                       []string
	scenario, mode, connectedBy string
}

// haLine is a runner's "job finished" line.
type haLine struct {
	Runner  string
	Job     int64     `json:"job"`
	Attempt int       `json:"attempt"`
	Outcome string    `json:"outcome"`
	Time    time.Time `json:"time"`
	Msg     string    `json:"msg"`
	Err     string    `json:"report_err"`
	After   int64     `json:"after"` // "database reachable again": how long the outage lasted
}

// finish stops the enqueuer, waits for every acknowledged job to succeed (or
// within, whichever first), and measures from fault.
func (s *haScenario) finish(fault time.Time, within time.Duration, connectedBy string) *haFigures {
	t := s.t
	s.enq.stop()
	stopped := time.Now()
	acked := s.enq.ackedIDs()
	f := &haFigures{Enqueued: len(acked), scenario: s.name, mode: "sync", connectedBy: connectedBy}
	if s.lab.async {
		f.mode = "async"
	}
	drained := testkit.Poll(within, func() bool {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		defer cancel()
		var n int
		if err := s.admin.QueryRow(ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'succeeded'`, acked).Scan(&n); err != nil {
			return false
		}
		f.Succeeded = n
		return n == len(acked)
	})
	f.Drain, f.DrainAfterLoad = time.Since(fault), time.Since(stopped)
	s.idle.stop()
	ctx := s.ctx
	// The first job finished after the fault: the first completion by a transaction
	// begun after it (a SIGKILLed postmaster's backends may still commit for a few
	// milliseconds). The longest pause in completions from the fault to the end of the
	// load, and when the completion that ended it came, are the service's outage.
	var first, resumed *time.Time
	var gap *time.Duration
	require.NoError(t, s.admin.QueryRow(ctx, `select min(finished_at) from pgrun.jobs where finished_at > $1`, fault).Scan(&first))
	if first != nil {
		f.FirstFinish = first.Sub(fault)
	}
	require.NoError(t, s.admin.QueryRow(ctx, `select at, gap from (
			select finished_at at, finished_at - greatest(lag(finished_at) over (order by finished_at), $1) gap
			from pgrun.jobs where finished_at > $1 and finished_at <= $2) x
		order by gap desc nulls last limit 1`, fault, stopped).Scan(&resumed, &gap))
	if resumed != nil && gap != nil {
		f.Resumed, f.Pause = resumed.Sub(fault), *gap
	}
	require.NoError(t, s.admin.QueryRow(ctx, `select count(*) from unnest($1::bigint[]) a(id)
		where not exists (select 1 from pgrun.jobs j where j.id = a.id and j.status = 'succeeded')`, acked).Scan(&f.Lost))
	require.NoError(t, s.admin.QueryRow(ctx, `select count(*) from pgrun.jobs where status = 'succeeded' and attempt > 1`).Scan(&f.ReclaimedSucceeded))
	require.NoError(t, s.admin.QueryRow(ctx, `select count(*) filter (where event like 'job.lease_expired%'),
		count(*) filter (where event = 'job.released') from pgrun.job_events`).Scan(&f.LeaseRequeues, &f.Released))
	f.IdlePastLease, f.IdlePastLeaseFor = s.idle.result()
	f.Outcomes, f.completions, f.stoppedOrStale = s.outcomes()
	f.extra = append(f.extra, "longest_runner_outage="+s.outage.Round(time.Millisecond).String())
	for _, ls := range f.completions {
		if len(ls) > 1 {
			f.RunTwice++
		}
	}
	if !drained {
		t.Errorf("%s: %d of %d acknowledged jobs succeeded within %s of the fault", s.name, f.Succeeded, len(acked), within)
	}
	return f
}

// log prints the figures as one line: "HA figures: key=value ...".
func (f *haFigures) log(t *testing.T) {
	t.Helper()
	var outcomes []string
	for r, m := range f.Outcomes {
		for o, n := range m {
			outcomes = append(outcomes, fmt.Sprintf("%s.%s=%d", r, o, n))
		}
	}
	sort.Strings(outcomes)
	t.Logf("HA figures: scenario=%s mode=%s via=%s enqueued=%d succeeded=%d lost=%d first_finish_after_fault=%s longest_pause=%s resumed_after=%s drain=%s drain_after_load=%s "+
		"run_twice=%d reclaimed_succeeded=%d lease_requeues=%d released=%d idle_past_lease_max=%d idle_past_lease_longest=%s outcomes=%s %s",
		f.scenario, f.mode, f.connectedBy, f.Enqueued, f.Succeeded, f.Lost, f.FirstFinish.Round(time.Millisecond), f.Pause.Round(time.Millisecond), f.Resumed.Round(time.Millisecond), f.Drain.Round(time.Millisecond), f.DrainAfterLoad.Round(time.Millisecond),
		f.RunTwice, f.ReclaimedSucceeded, f.LeaseRequeues, f.Released, f.IdlePastLease, f.IdlePastLeaseFor.Round(time.Millisecond),
		strings.Join(outcomes, ","), strings.Join(f.extra, " "))
}

// outcomes reads the runners' "job finished" lines: counts by runner and outcome,
// the runs that ended with the handler done (succeeded, stale) by job, and the runs
// stopped or refused (lease_lost, stale) by job.
func (s *haScenario) outcomes() (map[string]map[string]int, map[int64][]haLine, map[int64][]haLine) {
	counts := map[string]map[string]int{}
	done, refused := map[int64][]haLine{}, map[int64][]haLine{}
	for name, p := range s.runners {
		counts[name] = map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(p.Output()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l haLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.Msg == "database reachable again" {
				counts[name]["outages"]++
				s.outage = max(s.outage, time.Duration(l.After))
			}
			if l.Msg != "job finished" {
				continue
			}
			l.Runner = name
			counts[name][l.Outcome]++
			if l.Outcome == "succeeded" || l.Outcome == "stale" {
				done[l.Job] = append(done[l.Job], l)
			}
			if l.Outcome == "lease_lost" || l.Outcome == "stale" {
				refused[l.Job] = append(refused[l.Job], l)
			}
		}
	}
	return counts, done, refused
}

// haIdleSampler samples, every 250 ms, the running claims whose lease has run out
// (idle past a lease: nobody renews them, and the reaper has not handed them back).
type haIdleSampler struct {
	mu      sync.Mutex
	most    int
	longest time.Duration
	halt    context.CancelFunc
	done    chan struct{}
}

func (w *haIdleSampler) start(ctx context.Context, pool *pgxpool.Pool) {
	ctx, w.halt = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond) // the sampling period
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			var n int
			var overdue float64
			err := pool.QueryRow(qctx, `select count(*), coalesce(extract(epoch from max(now() - lease_expires_at)), 0)
				from pgrun.jobs where status = 'running' and lease_expires_at < now()`).Scan(&n, &overdue)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.most = max(w.most, n)
				w.longest = max(w.longest, time.Duration(overdue*float64(time.Second)))
				w.mu.Unlock()
			}
		}
	}()
}

func (w *haIdleSampler) stop() {
	if w.halt != nil {
		w.halt()
		<-w.done
		w.halt = nil
	}
}

func (w *haIdleSampler) result() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.longest
}

// delayProxy forwards TCP connections to upstream, holding every chunk for delay in
// each direction (the round trip grows by twice delay), order kept. It stands in for
// netem, which this machine's kernel does not have.
type delayProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds, each way
	wg       sync.WaitGroup
}

func startDelayProxy(t *testing.T, listen, upstream string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	require.NoError(t, err)
	p := &delayProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) serve() {
	defer p.wg.Done()
	var conns sync.WaitGroup
	var open sync.Map
	defer func() {
		open.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		conns.Wait()
	}()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		open.Store(c, nil)
		open.Store(u, nil)
		conns.Add(2)
		go func() { defer conns.Done(); p.pump(u, c); open.Delete(c) }()
		go func() { defer conns.Done(); p.pump(c, u); open.Delete(u) }()
	}
}

// pump copies src to dst, each chunk delivered delay after it was read.
func (p *delayProxy) pump(dst, src net.Conn) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(time.Duration(p.delay.Load())), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due)) // the emulated latency itself
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	dst.Close()
	src.Close() // ends the reader, which the loop below drains
	for range q {
	}
}
