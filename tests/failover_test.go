package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The failover test runs a primary and a streaming standby of its own (the Debian
// PostgreSQL 15 binaries), two runners on a multi-host URL with
// target_session_attrs=read-write, and an enqueuer, and then:
//
//  1. stops the primary immediately (a crash) and promotes the standby at once, and
//     shows that no acknowledged job is lost and that no job is idle for more than
//     two seconds after the promotion: every job not finished is in a handler;
//  2. stops the new primary immediately for 45 s, longer than a lease (30 s), while
//     jobs run and finish, starts it again, and shows that no job whose handler
//     finished runs again.
//
// It takes about a minute and a half (and TestFailoverPromotionAfterAGap, a standby
// promoted only after a gap longer than a lease, in failover_gap_test.go, half a
// minute more), so both run only with PGRUN_FAILOVER_TEST=1:
//
//	PGRUN_FAILOVER_TEST=1 go test -count=1 -v -run TestFailover ./tests/
//
// Replication is asynchronous for the runners (synchronous_commit = local on their
// sessions) and synchronous for the enqueuer (synchronous_standby_names = '*'), the
// configuration docs/reliability.md recommends: no acknowledged enqueue can vanish,
// while claims and completions the standby had not received may be undone, so a job
// may run twice across the failover, under two claim tokens.
func TestFailover(t *testing.T) {
	if os.Getenv("PGRUN_FAILOVER_TEST") != "1" {
		t.Skip("set PGRUN_FAILOVER_TEST=1 to run the failover test (about a minute and a half)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Enqueues wait for the standby (runners' sessions opt out below).
	primary, standby, url, admin := replicatedPair(t, ctx)

	rec := newRunRecorder()
	var logs testkit.Buffer
	var runners []*runner.Runner
	for i := range 2 {
		pool := failoverPool(t, ctx, url, map[string]string{"synchronous_commit": "local"})
		r, err := runner.New(pool, runner.Config{
			WorkerID:          fmt.Sprintf("runner-%d", i),
			Queues:            map[string]runner.QueueConfig{"default": {Workers: 60}},
			Logger:            failoverLogger(&logs),
			TelemetryInterval: -1,
			ShutdownGrace:     time.Second,
		})
		require.NoError(t, err)
		testkit.Handle(t, r, "work", rec.handler)
		testkit.StartRunner(t, r)
		runners = append(runners, r)
	}

	enq := &enqueuer{pool: failoverPool(t, ctx, url, nil)}
	enq.start(ctx, 40, 200, 1500) // 40 jobs a second of 0.2 to 1.5 s
	testkit.Eventually(t, 30*time.Second, "jobs to finish on the primary", func() bool { return rec.finishedCount() > 50 })

	// 1. The primary crashes; the standby is promoted at once.
	primary.stop("immediate")
	standby.promote()
	promoted := time.Now()
	t.Logf("promoted %s after the stop", standby.promotedAfter)
	idle := watchIdle(t, ctx, admin, rec, promoted, 10*time.Second)
	t.Logf("failover: longest idle after promotion %s (job %d); %d samples, up to %d jobs idle in one",
		idle.longest.Round(time.Millisecond), idle.job, idle.samples, idle.most)
	require.Greater(t, idle.samples, 50, "the database was not sampled after the promotion")
	require.LessOrEqual(t, idle.longest, 2*time.Second, "a job was idle for more than two seconds after the promotion")

	// 2. A 45 s outage of the new primary while long jobs run and finish.
	enq.start(ctx, 0, 0, 0) // stop the short jobs while the long ones are set up
	for range 40 {
		enq.enqueueOne(ctx, 3000+rand.Int64N(27000)) // 3 to 30 s: they finish during the outage
	}
	testkit.Eventually(t, 30*time.Second, "the long jobs to run", func() bool { return rec.runningCount() >= 40 })
	enq.start(ctx, 20, 200, 1500)
	time.Sleep(time.Second) // some short jobs in flight when the server goes
	down := time.Now()
	standby.stop("immediate")
	time.Sleep(45 * time.Second) // the outage itself, not a wait for a condition
	finishedInOutage := rec.finishedBetween(down, time.Now())
	standby.start()
	back := time.Now()
	t.Logf("outage of %s; %d handlers finished during it", back.Sub(down).Round(time.Millisecond), len(finishedInOutage))
	require.NotEmpty(t, finishedInOutage, "no job finished during the outage: the test shows nothing")
	time.Sleep(3 * time.Second) // short jobs after the outage
	enq.stop()

	// Every acknowledged job finishes, once the runners have caught up.
	acked := enq.ackedIDs()
	testkit.Eventually(t, 90*time.Second, "every acknowledged job to succeed", func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'succeeded'`, acked).Scan(&n))
		return n == len(acked)
	})
	var lost int
	require.NoError(t, admin.QueryRow(ctx, `select count(*) from unnest($1::bigint[]) a(id)
		where not exists (select 1 from pgrun.jobs j where j.id = a.id)`, acked).Scan(&lost))
	require.Zero(t, lost, "acknowledged jobs lost")

	// No job whose handler finished ran again after the outage.
	rerun := rec.startedAgain(finishedInOutage)
	require.Empty(t, rerun, "jobs that finished during the outage ran again")
	twice, sameAttempt := rec.duplicates()
	released := countEvents(t, ctx, admin, "job.released")
	var stats []runner.Stats
	for _, r := range runners {
		stats = append(stats, r.Stats())
	}
	t.Logf("failover figures: %d jobs acknowledged, %d lost; longest idle after promotion %s; "+
		"after the 45 s outage %d of %d finished jobs ran again; %d jobs ran twice across the failover (%d of them under one attempt number, told apart by their claim tokens); %d claims handed back; runner stats %+v",
		len(acked), lost, idle.longest.Round(time.Millisecond), len(rerun), len(finishedInOutage), twice, sameAttempt, released, stats)

	// One line when the database went away and one when it came back, per outage and
	// runner (the promotion may take two turns: the standby refuses writes until it
	// is promoted), however many calls failed in between.
	out := logs.String()
	gone, backLines := strings.Count(out, "database unreachable"), strings.Count(out, "database reachable again")
	t.Logf("outage log lines: %d unreachable, %d reachable again", gone, backLines)
	require.LessOrEqual(t, gone, 2*2*2, "the outage was logged per failing call:\n%s", out)
	var failed int64
	for _, s := range stats {
		failed += s.FailedCalls
	}
	require.Greater(t, failed, int64(gone), "failed calls were counted, not logged")
}

// cluster is a primary and a standby of the test's own, in a temporary directory the
// postgres user can write, on ports of 127.0.0.1 only.
// replicatedPair starts a primary with database pgrun and a streaming standby of it,
// made synchronous after the base backup (so that the standby's copy of the
// configuration stays asynchronous once promoted), and returns them, the
// multi-host read-write URL of the two, and a pool on it with schema pgrun migrated.
func replicatedPair(t *testing.T, ctx context.Context) (primary, standby *pgNode, url string, admin *pgxpool.Pool) {
	cl := newCluster(t)
	primary, standby = cl.node("primary"), cl.node("standby")
	primary.initdb()
	primary.start()
	primary.psql("create database pgrun")
	standby.basebackupFrom(primary)
	standby.start()
	primary.psql("alter system set synchronous_standby_names = '*'")
	primary.psql("select pg_reload_conf()")
	url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/pgrun?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.port, standby.port)
	admin = failoverPool(t, ctx, url, nil)
	require.NoError(t, pgrun.Migrate(ctx, admin))
	return primary, standby, url, admin
}

type cluster struct {
	t   *testing.T
	dir string
	bin string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	bin := "/usr/lib/postgresql/15/bin"
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		t.Fatalf("the failover test needs the PostgreSQL 15 binaries in %s: %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "pgrun-failover-")
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root needs the postgres user to run the servers")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	c := &cluster{t: t, dir: dir, bin: bin}
	t.Cleanup(func() {
		for _, n := range []string{"primary", "standby"} {
			_ = c.run(exec.Command(filepath.Join(bin, "pg_ctl"), "-D", filepath.Join(dir, n), "stop", "-m", "immediate"))
		}
		if t.Failed() {
			for _, n := range []string{"primary", "standby"} {
				if b, err := os.ReadFile(filepath.Join(dir, n+".log")); err == nil {
					t.Logf("%s log (tail):\n%s", n, tail(string(b), 3000))
				}
			}
		}
		os.RemoveAll(dir)
	})
	return c
}

// run runs cmd as the postgres user (PostgreSQL refuses to run as root).
func (c *cluster) run(cmd *exec.Cmd) error {
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", cmd.Path}, cmd.Args[1:]...)...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return nil
}

type pgNode struct {
	c             *cluster
	name          string
	data          string
	port          int
	promotedAfter time.Duration
	stoppedAt     time.Time
}

func (c *cluster) node(name string) *pgNode {
	return &pgNode{c: c, name: name, data: filepath.Join(c.dir, name), port: freePort(c.t)}
}

func (n *pgNode) must(args ...string) {
	n.c.t.Helper()
	require.NoError(n.c.t, n.c.run(exec.Command(filepath.Join(n.c.bin, args[0]), args[1:]...)))
}

func (n *pgNode) initdb() {
	n.must("initdb", "-D", n.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	n.configure("wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\nfsync = off\n" +
		"full_page_writes = off\nwal_sender_timeout = 5s\n")
}

// configure appends settings, with the node's own port and socket directory.
func (n *pgNode) configure(settings string) {
	n.c.t.Helper()
	conf := fmt.Sprintf("%s\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n",
		settings, n.port, n.c.dir)
	f, err := os.OpenFile(filepath.Join(n.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(n.c.t, err)
	_, err = f.WriteString(conf)
	require.NoError(n.c.t, err)
	require.NoError(n.c.t, f.Close())
}

func (n *pgNode) start() {
	n.must("pg_ctl", "-D", n.data, "-l", filepath.Join(n.c.dir, n.name+".log"), "-w", "start")
}

func (n *pgNode) stop(mode string) {
	n.must("pg_ctl", "-D", n.data, "-m", mode, "-w", "stop")
	n.stoppedAt = time.Now()
}

func (n *pgNode) promote() {
	began := time.Now()
	n.must("pg_ctl", "-D", n.data, "-w", "promote")
	n.promotedAfter = time.Since(began)
}

func (n *pgNode) psql(sql string) {
	n.c.t.Helper()
	cmd := exec.Command("/usr/bin/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(n.port),
		"-U", "postgres", "-d", "postgres", "-c", sql)
	require.NoError(n.c.t, n.c.run(cmd))
}

// basebackupFrom makes n a streaming standby of p.
func (n *pgNode) basebackupFrom(p *pgNode) {
	n.must("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres", "-D", n.data,
		"-R", "-X", "stream", "-c", "fast", "--no-sync")
	n.configure("")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func failoverPool(t *testing.T, ctx context.Context, url string, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// runRecorder records every handler run: which job, under which claim, when.
type runRecorder struct {
	mu   sync.Mutex
	runs []handlerRun
	// executing holds the claims whose handlers are running now.
	executing map[pgrun.ClaimID]int64
}

type handlerRun struct {
	job      int64
	claim    pgrun.ClaimID
	attempt  int
	started  time.Time
	finished time.Time // zero while running, or if it was stopped
	stopped  bool
}

func newRunRecorder() *runRecorder {
	return &runRecorder{executing: map[pgrun.ClaimID]int64{}}
}

type workArgs struct {
	MS int64 `json:"ms"`
}

func (rec *runRecorder) handler(ctx context.Context, j *runner.Job[workArgs]) (any, error) {
	rec.mu.Lock()
	i := len(rec.runs)
	rec.runs = append(rec.runs, handlerRun{job: j.ID, claim: j.ClaimID, attempt: j.Attempt, started: time.Now()})
	rec.executing[j.ClaimID] = j.ID
	rec.mu.Unlock()
	t := time.NewTimer(time.Duration(j.Args.MS) * time.Millisecond)
	defer t.Stop()
	var err error
	select {
	case <-t.C:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	rec.mu.Lock()
	if err == nil {
		rec.runs[i].finished = time.Now()
	} else {
		rec.runs[i].stopped = true
	}
	delete(rec.executing, j.ClaimID)
	rec.mu.Unlock()
	return nil, err
}

func (rec *runRecorder) finishedCount() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := 0
	for _, r := range rec.runs {
		if !r.finished.IsZero() {
			n++
		}
	}
	return n
}

func (rec *runRecorder) runningCount() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.executing)
}

func (rec *runRecorder) isExecuting(c pgrun.ClaimID) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	_, ok := rec.executing[c]
	return ok
}

// finishedBetween lists the jobs whose handlers finished in [from, to), with when.
func (rec *runRecorder) finishedBetween(from, to time.Time) map[int64]time.Time {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[int64]time.Time{}
	for _, r := range rec.runs {
		if !r.finished.IsZero() && !r.finished.Before(from) && r.finished.Before(to) {
			out[r.job] = r.finished
		}
	}
	return out
}

// startedAgain lists the jobs of finished whose handler started again after it had
// finished.
func (rec *runRecorder) startedAgain(finished map[int64]time.Time) []int64 {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []int64
	for _, r := range rec.runs {
		if at, ok := finished[r.job]; ok && r.started.After(at) {
			out = append(out, r.job)
		}
	}
	return out
}

// duplicates counts jobs whose handler finished more than once, and of those the
// ones whose runs had the same attempt number (only the claim tokens tell them apart).
func (rec *runRecorder) duplicates() (twice, sameAttempt int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	byJob := map[int64][]handlerRun{}
	for _, r := range rec.runs {
		if !r.finished.IsZero() {
			byJob[r.job] = append(byJob[r.job], r)
		}
	}
	for _, rs := range byJob {
		if len(rs) < 2 {
			continue
		}
		twice++
		seen := map[int]bool{}
		for _, r := range rs {
			if seen[r.attempt] {
				sameAttempt++
				break
			}
			seen[r.attempt] = true
		}
	}
	return twice, sameAttempt
}

// idleWatch is the longest time a job was idle: due and not finished, but in no
// handler (queued, or running under a claim no handler holds).
type idleWatch struct {
	longest time.Duration
	job     int64
	samples int // samples that got through
	most    int // the most jobs idle in one sample
}

// watchIdle samples the database every 100 ms from since for d and measures how long
// each unfinished job stays idle. A job counts as idle from since if it is idle at
// the first sample that gets through.
func watchIdle(t *testing.T, ctx context.Context, pool *pgxpool.Pool, rec *runRecorder, since time.Time, d time.Duration) idleWatch {
	t.Helper()
	idleSince := map[int64]time.Time{}
	var w idleWatch
	first := true
	for time.Since(since) < d {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		rows, err := pool.Query(sctx, `select id, coalesce(claim_id, '00000000-0000-0000-0000-000000000000'), status::text
			from pgrun.jobs where (status = 'queued' and run_at <= now()) or status = 'running'`)
		var idle []int64
		if err == nil {
			for rows.Next() {
				var id int64
				var claim pgrun.ClaimID
				var status string
				if err = rows.Scan(&id, &claim, &status); err != nil {
					break
				}
				if status == "queued" || !rec.isExecuting(claim) {
					idle = append(idle, id)
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		cancel()
		now := time.Now()
		if err == nil {
			w.samples++
			w.most = max(w.most, len(idle))
			seen := map[int64]bool{}
			for _, id := range idle {
				seen[id] = true
				if _, ok := idleSince[id]; !ok {
					idleSince[id] = now
					if first {
						idleSince[id] = since
					}
				}
				if d := now.Sub(idleSince[id]); d > w.longest {
					w.longest, w.job = d, id
				}
			}
			for id := range idleSince {
				if !seen[id] {
					delete(idleSince, id)
				}
			}
			first = false
		}
		time.Sleep(100 * time.Millisecond) // the sampling period of a measurement
	}
	return w
}

// enqueuer enqueues "work" jobs at a rate, one transaction each, and keeps the ids
// whose commit was acknowledged.
type enqueuer struct {
	pool *pgxpool.Pool
	kind string // the jobs' kind: "work" when empty
	mu   sync.Mutex
	ids  []int64
	halt context.CancelFunc
	done chan struct{}
}

// start enqueues perSecond jobs a second of minMS to maxMS milliseconds until the
// next start or stop; perSecond 0 only stops.
func (e *enqueuer) start(ctx context.Context, perSecond int, minMS, maxMS int64) {
	e.stop()
	if perSecond == 0 {
		return
	}
	ctx, e.halt = context.WithCancel(ctx)
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		t := time.NewTicker(time.Second / time.Duration(perSecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				e.enqueueOne(ctx, minMS+rand.Int64N(maxMS-minMS+1))
			}
		}
	}()
}

func (e *enqueuer) stop() {
	if e.halt != nil {
		e.halt()
		<-e.done
		e.halt = nil
	}
}

func (e *enqueuer) enqueueOne(ctx context.Context, ms int64) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kind := e.kind
	if kind == "" {
		kind = "work"
	}
	j, err := pgrun.Enqueue(ctx, e.pool, kind, workArgs{MS: ms})
	if err != nil {
		return // not acknowledged: the caller would retry; it is not counted
	}
	e.add(j.ID)
}

// add counts jobs enqueued (and acknowledged) by other means.
func (e *enqueuer) add(ids ...int64) {
	e.mu.Lock()
	e.ids = append(e.ids, ids...)
	e.mu.Unlock()
}

func (e *enqueuer) ackedIDs() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int64(nil), e.ids...)
}

func countEvents(t *testing.T, ctx context.Context, pool *pgxpool.Pool, event string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `select count(*) from pgrun.job_events where event = $1`, event).Scan(&n))
	return n
}

// failoverLogger logs to w (and to stderr with -v).
func failoverLogger(w io.Writer) *slog.Logger {
	if testing.Verbose() {
		w = io.MultiWriter(w, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
