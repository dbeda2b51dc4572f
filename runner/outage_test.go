package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
)

// An outage is logged once when the first call fails and once when a call that began
// after it gets through, with the count of failed calls; the failures in between are
// counted, not logged, and errors that are not about reaching the database are left
// to the caller.
func TestOutageIsLoggedOnceEachWay(t *testing.T) {
	var logs bytes.Buffer
	o := newOutage(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o.now = func() time.Time { return now }
	before := now.Add(-time.Millisecond)

	if o.fail("claim", &pgconn.PgError{Code: "22023"}) {
		t.Fatal("a refused input counted as an outage")
	}
	refused := &pgconn.ConnectError{}
	for i := range 50 {
		if !o.fail("renew_leases", errors.Join(errors.New("dial"), refused)) {
			t.Fatalf("call %d: a connection error was not taken as an outage", i)
		}
	}
	if !o.fail("claim", &pgconn.PgError{Code: "25006"}) {
		t.Fatal("a read-only server (a standby) was not taken as an outage")
	}
	o.ok(before) // in flight since before the outage: says nothing
	if !o.down.Load() {
		t.Fatal("a call that began before the outage ended it")
	}
	now = now.Add(45 * time.Second)
	o.ok(now)
	o.ok(now)
	out := logs.String()
	if n := strings.Count(out, "database unreachable"); n != 1 {
		t.Fatalf("%d lines for the outage's start, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "database reachable again"); n != 1 {
		t.Fatalf("%d lines for its end, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "after=45s failed_calls=51") {
		t.Fatalf("the end line does not say how long and how many calls failed:\n%s", out)
	}
	if !o.unsettled.Load() || o.count.Load() != 1 || o.total.Load() != 51 {
		t.Fatalf("unsettled %v, outages %d, failed calls %d", o.unsettled.Load(), o.count.Load(), o.total.Load())
	}
	select {
	case <-o.settle:
	default:
		t.Fatal("the end of the outage did not ask for a settle")
	}
}

// After a restart the fetcher claims as soon as any of the runner's connections gets
// through (here the listener's, which reconnects on its own back-off), not at the end
// of its own wait: its waits between failed claims are stretched to an hour, so that
// only the end of the outage can have woken it, and the test counts its waits rather
// than timing them. The server is one of the test's own (the PostgreSQL 15
// binaries), since the shared test server cannot be restarted.
func TestFetcherClaimsAsSoonAsTheDatabaseIsBack(t *testing.T) {
	srv := newPrivateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := srv.migratedPool(ctx)

	r := newRunner(pool, Config{
		WorkerID:            "w-back",
		Queues:              map[string]QueueConfig{"default": {Workers: 2}},
		PollInterval:        time.Hour, // no poll finds the job either
		MaintenanceInterval: -1,
		TelemetryInterval:   -1,
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	r.down.wait = func(int) time.Duration { return time.Hour }
	started := make(chan time.Time, 1)
	if err := Handle(r, "after", func(context.Context, *Job[struct{}]) (any, error) {
		started <- time.Now()
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { stop(); <-done }()
	poll(t, 10*time.Second, "the runner's session to be bound", func() bool {
		var bound bool
		err := pool.QueryRow(ctx, `select coalesce(bool_or(session_pid is not null), false) from pgrun.workers where id = 'w-back'`).Scan(&bound)
		return err == nil && bound
	})

	// The job is due a moment after the server goes: nothing claims it before, and
	// after the restart only a claim does.
	var due time.Time
	if err := pool.QueryRow(ctx, `select run_at from pgrun.enqueue_job('after', run_at => now() + interval '300 milliseconds')`).Scan(&due); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	r.mu.Lock()
	f := r.fetchers["default"]
	r.mu.Unlock()
	poll(t, 10*time.Second, "a claim to find the database unreachable", func() bool {
		r.wakeAll()
		return f.claimsDown.Load() > 0
	})
	time.Sleep(time.Until(due)) // the job's due time, a fact of the test, not a wait for a goroutine
	srv.start()
	var at time.Time
	select {
	case at = <-started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the job was not claimed within 30 s of the restart (claims down %d, waits cut short %d, run out %d)",
			f.claimsDown.Load(), f.cutShort.Load(), f.waitedOut.Load())
	}
	r.down.mu.Lock()
	back := r.down.ended
	r.down.mu.Unlock()
	t.Logf("claimed %s after the first call got through", at.Sub(back).Round(time.Millisecond))
	if n := f.waitedOut.Load(); n != 0 {
		t.Fatalf("%d of the fetcher's waits ran to their end: it claimed on its own clock, not when the database was back", n)
	}
	if f.cutShort.Load() == 0 {
		t.Fatal("no wait was cut short by the end of the outage")
	}
}

// poll calls cond every 10 ms until it holds, failing the test after d.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

// privateServer is a PostgreSQL server of the test's own, in a temporary directory,
// on a port of 127.0.0.1, run as the postgres user when the test runs as root
// (PostgreSQL refuses root).
type privateServer struct {
	t    *testing.T
	dir  string
	bin  string
	port int
}

func newPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	bin := "/usr/lib/postgresql/15/bin"
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		t.Skipf("needs the PostgreSQL 15 binaries in %s to restart a server: %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "pgrun-restart-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root needs the postgres user to run the server: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &privateServer{t: t, dir: dir, bin: bin, port: port}
	data := filepath.Join(dir, "data")
	s.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\n", port, dir)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(bin, "pg_ctl"), "-D", data, "stop", "-m", "immediate")
		_ = s.exec(cmd)
		os.RemoveAll(dir)
	})
	return s
}

// migratedPool opens a pool of eight connections on the server, closed when the test
// ends, and migrates schema pgrun into it.
func (s *privateServer) migratedPool(ctx context.Context) *pgxpool.Pool {
	s.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.url())
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	if err := pgrun.Migrate(ctx, pool); err != nil {
		s.t.Fatal(err)
	}
	return pool
}

func (s *privateServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", s.port)
}

func (s *privateServer) start() {
	s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "log"), "-w", "start")
}

// stop stops the server at once, as a crash would.
func (s *privateServer) stop() {
	s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
}

func (s *privateServer) run(args ...string) {
	s.t.Helper()
	if err := s.exec(exec.Command(filepath.Join(s.bin, args[0]), args[1:]...)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *privateServer) exec(cmd *exec.Cmd) error {
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", cmd.Path}, cmd.Args[1:]...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}
