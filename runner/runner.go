// Package runner executes pgrun jobs with Go handlers.
//
// A Runner is a pair of hands for the engine in PostgreSQL: it LISTENs for wake-ups
// (and polls each queue every second in case one is lost), claims up to its free
// slots per queue with pgrun.claim_jobs, runs each handler outside any transaction
// with a context that carries the job's timeout and remote cancellation, and reports
// outcomes (completions in batches). It renews the leases of what it runs in one
// call per interval, and one runner at a time (the leader) calls pgrun.maintain.
// Behind a transaction-mode pooler it LISTENs on Config.ListenURL, or only polls
// (see pooler.go and docs/poolers.md).
//
//	r, err := runner.New(pool, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 16}}})
//	err = runner.Handle(r, "resize", func(ctx context.Context, j *runner.Job[ResizeArgs]) (any, error) { ... })
//	err = r.Run(ctx) // until ctx is done; then a graceful stop
//
// A runner of many short jobs spends much of its CPU in Go's garbage collector: its
// live heap is small and it allocates for every job. The runner binary (`runner
// work`) runs with GOGC=400 unless GOGC is set; a program that embeds a runner may
// want the same (debug.SetGCPercent), measured in docs/benchmarks.md.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/gpu"
)

// Defaults for Config fields left zero.
const (
	// DefaultLease is the lease when neither Config.Lease nor the queue's
	// default_lease names one: pgrun.DefaultLease, the engine's.
	DefaultLease = pgrun.DefaultLease
	// DefaultPollInterval bounds what a lost notification costs: a second.
	DefaultPollInterval = time.Second
	// DefaultShutdownGrace leaves in-flight jobs 25 s to finish on SIGTERM, inside
	// the 30 s most supervisors (Kubernetes, systemd) wait before SIGKILL.
	DefaultShutdownGrace = 25 * time.Second
	// DefaultMaintenanceInterval is how often a runner calls pgrun.maintain(). Only
	// the holder of the maintenance lease does the work; the others are told who
	// leads in one cheap call.
	DefaultMaintenanceInterval = time.Second
	// DefaultMaxClaim caps one claim call: big enough to amortise the round trip,
	// small enough that one runner does not hoard a queue's backlog. 1,000 rather
	// than 500: with the claim's fixed cost lower (planned once) a 1M-job burn-down
	// ran at 35.1k, 35.1k jobs/s against 31.0k, 33.9k, and four processes sharing a
	// queue, whose every claim steps over the rows its peers' claims hold, at 33.3k,
	// 31.2k against 23.7k-30.8k (docs/benchmarks.md, eighth pass). Prefetch is capped
	// by it too, and stays near nothing for jobs that run longer than a round trip.
	DefaultMaxClaim = 1000
	// FairMaxClaim caps one claim of a queue with fairness (pgrun.set_queue fair_by)
	// that does not set its own QueueConfig.MaxClaim, while its claims take more than
	// one job of a key. A fair queue's claims run at once (two in flight, each walking
	// the keys from the same turn), so a new key's job waits for the next claim to
	// start, and claims of a busy runner's full size start only every half of the time
	// one takes: behind 200,000 jobs of one tenant, another tenant's jobs started at
	// p99 65-173 ms with claims of 500, 51-57 ms with 250. A backlog over more keys
	// than a claim takes is claimed in claims as large as a plain queue's: each of
	// their jobs is a key's turn (the cap doubles while claims come back so; see
	// fetcher.claimCap).
	FairMaxClaim = 250
	// DefaultCompleteBatch caps one complete_jobs call.
	DefaultCompleteBatch = 1000
	// DefaultCompleteLinger is how long, under load, a plain success may wait to
	// share a complete_jobs call (Config.CompleteLinger).
	DefaultCompleteLinger = 20 * time.Millisecond
)

// QueueConfig is how a runner serves one queue.
type QueueConfig struct {
	// Workers is how many of the queue's jobs run at once in this runner.
	Workers int
	// GPU marks a queue of GPU jobs: with Workers zero it gets one slot per device
	// (one job per device at a time), or one slot without devices (CPU fallback).
	GPU bool
	// MaxClaim caps this queue's claims below Config.MaxClaim (0: Config.MaxClaim, or
	// FairMaxClaim for a queue with fairness whose claims take more than one job of a
	// key). A busy runner's claims are as large as
	// its slots and prefetch allow, so with short jobs a claim of a fair queue
	// (pgrun.set_queue fair_by) comes only as often as its size takes to run, and a
	// new key's job waits for the next one: a smaller cap starts it sooner at the
	// price of more claims (docs/operations.md, Fairness).
	MaxClaim int
}

// Config configures a Runner. Zero fields take the defaults above.
type Config struct {
	// Queues maps queue names to how this runner serves them. Required.
	Queues map[string]QueueConfig
	// WorkerID names this runner in claimed_by and pgrun.workers; default
	// host:pid:random.
	WorkerID string
	// Host is the host name operators address with pgrun.set_worker_control;
	// default os.Hostname().
	Host string
	// Lease is how long a claim is held without renewal; renewed every Lease/3.
	// Zero leaves it to each queue's default_lease (pgrun.set_queue), else
	// DefaultLease, with renewal every DefaultLease/3.
	Lease time.Duration
	// PollInterval is how often each queue is polled even without a notification.
	// With a LISTEN connection it only bounds what a lost notification costs; without
	// one (a pool through a transaction-mode pooler and no ListenURL) it is how long a
	// new job may wait before it starts: PollInterval at worst, half on average.
	PollInterval time.Duration
	// ListenURL is a direct (session) connection to the same database, used for one
	// connection that LISTENs for wake-ups and cancellations, for runners whose pool
	// goes through a transaction-mode pooler, where LISTEN silently never hears
	// anything. Empty: the runner LISTENs on a connection made from the pool's
	// configuration, unless the pool is found to go through a pooler (see
	// pgrun.ThroughPooler): then it does not listen, says so once in the log, and
	// finds new jobs by polling every PollInterval.
	ListenURL string
	// ShutdownGrace is how long Run waits for in-flight jobs after its ctx is done,
	// before cancelling them and requeueing them without spending an attempt.
	ShutdownGrace time.Duration
	// MaintenanceInterval is how often the runner calls pgrun.maintain() as a
	// candidate for the maintenance lease, which lasts three intervals: a leader that
	// freezes or is cut off loses maintenance within three rounds. Negative disables
	// maintenance in this runner.
	MaintenanceInterval time.Duration
	// StallWindow is the sign-of-life grace of the timeout rule this runner passes
	// to pgrun.maintain() when it leads: a job past its timeout that beat, reported
	// progress or emitted an event within the window is spared. Default 1 minute.
	StallWindow time.Duration
	// MaxClaim caps the jobs claimed per call.
	MaxClaim int
	// CompleteLinger is how long, under load, a plain success may wait to share a
	// complete_jobs call with others (see completer.hold): the job
	// shows running, and OnOutcome hears of it, that much later at most. Zero:
	// DefaultCompleteLinger; negative: none, every success goes out with the next call.
	// At most MaxCompleteLinger.
	CompleteLinger time.Duration
	// Middleware wraps every handler; the first is the outermost.
	Middleware []Middleware
	// Logger receives the runner's logs; default slog.Default().
	Logger *slog.Logger
	// Version is recorded in pgrun.workers.
	Version string
	// Models is the warm model cache handlers reach through Job.UseModel (a
	// *gpu.Cache, say). Its resident models are advertised to claim_jobs, so jobs go
	// where their model is warm. Nil: no cache.
	Models ModelCache
	// Servable lists the models this runner can load, for jobs that require theirs
	// (model_required).
	Servable []string
	// Devices lists the accelerators GPU queues get a slot each for; nil asks
	// DeviceLister at Run.
	Devices []gpu.Device
	// DeviceLister lists the accelerators when Devices is nil and a queue is a GPU
	// queue; default ProbeDevices (gpu.Probe: nvidia-smi and rocm-smi).
	DeviceLister DeviceLister
	// Watchdog configures the abandonment of handlers that ignore their cancelled
	// context; see WatchdogConfig.
	Watchdog WatchdogConfig
	// TelemetryInterval is how often the runner records a hardware sample of its
	// host (pgrun.record_hw, for the UI's host panel); zero or negative records none.
	// Hosts are sampled only when asked: `runner work` does so every
	// DefaultTelemetryInterval unless told otherwise.
	TelemetryInterval time.Duration
	// Hooks observe claims, outcomes, maintenance and lost leases (see [Hooks]):
	// metrics.Exporter.Hooks for Prometheus, [LogOutcomes] for a log line per job.
	Hooks []Hooks
}

// Runner claims and runs jobs. Create it with [New], register handlers with
// [Handle] or [HandleArgs], then call [Runner.Run].
type Runner struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	kinds    []string // sorted keys of handlers
	running  map[int64]*execution
	fetchers map[string]*fetcher
	// looks records what the last look found of each queue (peers.go), for fetchers
	// yet to start.
	looks map[string]queueLook
	// cancelled remembers confirmed cancellations of jobs not running here (yet): a
	// job claimed just before its cancellation must not start when it arrives.
	cancelled map[cancelKey]time.Time
	// cancelCh carries cancel notifications to the confirmer (see cancel.go).
	cancelCh chan cancelKey
	// heartbeatCh asks for a heartbeat now (a model was loaded or unloaded).
	heartbeatCh chan struct{}
	// abandoned counts handlers that ignored their cancelled context.
	abandoned atomic.Int64
	stats     stats

	// down tracks database outages (outage.go); settleMu serialises settling after
	// one, and claimGate keeps claims out while it lists what the runner holds and
	// hands back the rest (claims hold it for reading during each call).
	down      *outage
	settleMu  sync.Mutex
	claimGate sync.RWMutex
	// arriving holds the claims of jobs a claim brought back that have not started.
	arriving map[pgrun.ClaimID]struct{}

	completer *completer
	// jobCtx parents every handler's context; it is not derived from Run's ctx so
	// that a shutdown can give handlers a grace period.
	jobCtx    context.Context
	cancelJob context.CancelFunc
	execWG    sync.WaitGroup
	// reports parents the reports of finished attempts, which keep trying through an
	// outage of any length (keepReporting) until Run has shut down; reportTry bounds
	// one try (reportTimeout; a test shortens it).
	reports     context.Context
	stopReports context.CancelFunc
	reportTry   time.Duration
	// handoff passes an execution to an idle worker goroutine (see work);
	// workersStop, closed when Run returns, ends the idle ones.
	handoff     chan *execution
	workersStop chan struct{}
	// batchers gather the jobs of the kinds registered with HandleBatch (batch.go);
	// guarded by mu.
	batchers []*batcher
}

// New returns a runner on pool, or the first problem with cfg (see
// [Config.Validate]) as an error naming the field and the bad value. Nothing
// connects until [Runner.Run].
func New(pool *pgxpool.Pool, cfg Config) (*Runner, error) {
	if pool == nil {
		return nil, errors.New("runner: nil pool")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newRunner(pool, cfg), nil
}

// newRunner builds a runner on a configuration already validated, filling in the
// defaults.
func newRunner(pool *pgxpool.Pool, cfg Config) *Runner {
	cfg.defaults()
	r := &Runner{
		pool:     pool,
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.WorkerID),
		handlers: map[string]HandlerFunc{},
		running:  map[int64]*execution{},
		fetchers: map[string]*fetcher{},

		cancelled: map[cancelKey]time.Time{},
		cancelCh:  make(chan cancelKey, 1024),

		heartbeatCh: make(chan struct{}, 1),
		handoff:     make(chan *execution),
		arriving:    map[pgrun.ClaimID]struct{}{},
	}
	r.down = newOutage(r.log)
	r.jobCtx, r.cancelJob = context.WithCancel(context.Background())
	r.reports, r.stopReports = context.WithCancel(context.Background())
	r.reportTry = reportTimeout
	return r
}

// defaults fills the zero fields of cfg.
func (cfg *Config) defaults() {
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = fmt.Sprintf("%s:%d:%04x", cfg.Host, os.Getpid(), rand.N(1<<16))
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if cfg.StallWindow == 0 {
		cfg.StallWindow = DefaultStallWindow
	}
	if cfg.MaxClaim == 0 {
		cfg.MaxClaim = DefaultMaxClaim
	}
	if cfg.CompleteLinger == 0 {
		cfg.CompleteLinger = DefaultCompleteLinger
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Watchdog.defaults(cfg.Logger)
	if cfg.DeviceLister == nil {
		cfg.DeviceLister = ProbeDevices
	}
}

// Bounds of the configuration, checked by [Config.Validate]. The SQL side enforces
// the same (claim size, worker id length).
const (
	// MinLease: a lease is renewed every third of it; shorter than a second and a
	// round trip or a GC pause loses it.
	MinLease = time.Second
	// MinPollInterval keeps an idle runner from hammering the database.
	MinPollInterval = 10 * time.Millisecond
	// MaxWorkers bounds the slots of one queue in one runner.
	MaxWorkers = 10000
	// MaxWorkerIDLen is the longest worker id pgrun.claim_jobs accepts.
	MaxWorkerIDLen = 200
	// MaxCompleteLinger bounds Config.CompleteLinger: a success held longer would
	// keep its job shown as running, and its lease held, for no further saving (a
	// call holds at most half a batch anyway).
	MaxCompleteLinger = time.Second
	// DefaultStallWindow is the timeout rule's sign-of-life grace (pgrun.maintain).
	DefaultStallWindow = time.Minute
)

// Validate reports the first problem with cfg as one readable error naming the
// field and the bad value, or nil. Zero fields are valid (they take defaults).
func (cfg Config) Validate() error {
	if len(cfg.Queues) == 0 {
		return errors.New("runner: no queues configured")
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Queues)) {
		q := cfg.Queues[name]
		if !pgrun.ValidQueueName(name) {
			return fmt.Errorf("runner: queue name %q is not valid (%s)", name, pgrun.QueueNameFormat)
		}
		if q.Workers > MaxWorkers || q.Workers < 0 || (q.Workers == 0 && !q.GPU) {
			return fmt.Errorf("runner: queue %s: workers %d is not valid (1 to %d)", name, q.Workers, MaxWorkers)
		}
		if q.MaxClaim < 0 || q.MaxClaim > MaxWorkers {
			return fmt.Errorf("runner: queue %s: max claim %d is not valid (1 to %d, or 0 for the runner's)", name, q.MaxClaim, MaxWorkers)
		}
	}
	switch {
	case utf8.RuneCountInString(cfg.WorkerID) > MaxWorkerIDLen:
		return fmt.Errorf("runner: worker id is %d characters, over the limit of %d", utf8.RuneCountInString(cfg.WorkerID), MaxWorkerIDLen)
	case cfg.Lease != 0 && cfg.Lease < MinLease:
		return fmt.Errorf("runner: lease %s is too short (at least %s, or 0 for each queue's default)", cfg.Lease, MinLease)
	case cfg.PollInterval != 0 && cfg.PollInterval < MinPollInterval:
		return fmt.Errorf("runner: poll interval %s is too short (at least %s)", cfg.PollInterval, MinPollInterval)
	case cfg.ShutdownGrace < 0:
		return fmt.Errorf("runner: shutdown grace %s is negative", cfg.ShutdownGrace)
	case cfg.MaintenanceInterval > time.Hour:
		return fmt.Errorf("runner: maintenance interval %s is over an hour", cfg.MaintenanceInterval)
	case cfg.StallWindow < 0:
		return fmt.Errorf("runner: stall window %s is negative", cfg.StallWindow)
	case cfg.MaxClaim < 0 || cfg.MaxClaim > MaxWorkers:
		return fmt.Errorf("runner: max claim %d is not valid (1 to %d)", cfg.MaxClaim, MaxWorkers)
	case cfg.CompleteLinger > MaxCompleteLinger:
		return fmt.Errorf("runner: complete linger %s is over %s (0 for the default, negative for none)", cfg.CompleteLinger, MaxCompleteLinger)
	case cfg.TelemetryInterval > 0 && cfg.TelemetryInterval < MinPollInterval:
		return fmt.Errorf("runner: telemetry interval %s is too short (at least %s, or 0 for none)", cfg.TelemetryInterval, MinPollInterval)
	}
	if err := cfg.validateListenURL(); err != nil {
		return err
	}
	return cfg.Watchdog.validate()
}

// usesGPU reports whether any queue is a GPU queue.
func (r *Runner) usesGPU() bool {
	for _, q := range r.cfg.Queues {
		if q.GPU {
			return true
		}
	}
	return false
}

// leaseArg is the lease passed to claim_jobs and renew_leases: nil lets each queue's
// default_lease apply.
func (r *Runner) leaseArg() *time.Duration {
	if r.cfg.Lease == 0 {
		return nil
	}
	return &r.cfg.Lease
}

// renewEvery is how often leases are renewed and the worker heartbeats.
func (r *Runner) renewEvery() time.Duration {
	if r.cfg.Lease == 0 {
		return DefaultLease / 3
	}
	return r.cfg.Lease / 3
}

// queueNames lists the queues this runner serves, sorted.
func (r *Runner) queueNames() []string { return slices.Sorted(maps.Keys(r.cfg.Queues)) }

// WorkerID is the id this runner claims under.
func (r *Runner) WorkerID() string { return r.cfg.WorkerID }

// ErrKindRegistered is returned by [Handle] for a kind that has a handler already.
var ErrKindRegistered = errors.New("runner: kind already has a handler")

// handle registers fn for kind, which must be new.
func (r *Runner) handle(kind string, fn HandlerFunc) error {
	if kind == "" {
		return errors.New("runner: handler kind is empty")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[kind]; dup {
		return fmt.Errorf("%w: %q", ErrKindRegistered, kind)
	}
	r.handlers[kind] = fn
	r.kinds = slices.Sorted(maps.Keys(r.handlers))
	return nil
}

// handledKinds lists the kinds this runner has handlers for, sorted: claim_jobs hands
// out only those, so a job of a kind nobody here handles stays queued for a runner
// that does.
func (r *Runner) handledKinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		return []string{}
	}
	return r.kinds
}

// handlerFor returns the middleware-wrapped handler for kind, or nil.
func (r *Runner) handlerFor(kind string) HandlerFunc {
	r.mu.Lock()
	h := r.handlers[kind]
	r.mu.Unlock()
	if h == nil {
		return nil
	}
	for i := len(r.cfg.Middleware) - 1; i >= 0; i-- {
		h = r.cfg.Middleware[i](h)
	}
	return h
}

// Run claims and runs jobs until ctx is done, then stops gracefully: it stops
// claiming, waits up to ShutdownGrace for in-flight jobs, cancels those still
// running and requeues them without spending an attempt, flushes completions and
// returns nil. It waits for the schema first if `migrate up` has not run yet.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.waitForSchema(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	r.log.Info("runner started", "queues", r.queueNames(), "slots", r.slotsByQueue(), "host", r.cfg.Host, "kinds", r.handledKinds())

	r.workersStop = make(chan struct{})
	// bg is for the machinery that must outlive ctx during the shutdown sequence.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	// Registered before the first claim: claim_jobs applies an operator's worker
	// control (drain, off) to this host through the worker's row, and worker_status
	// should list a runner that is already running jobs. A failed heartbeat is
	// reported and retried with the next renewal, as later ones are.
	r.heartbeat(ctx, "running")
	// The queues' settings and peers too (peersLoop looks again from then on).
	r.lookForPeers(ctx)
	r.completer = newCompleter(r)
	machinery, mctx := errgroup.WithContext(bg)
	machinery.Go(func() error { r.completer.run(mctx); return nil })
	machinery.Go(func() error { r.renewLoop(mctx); return nil })
	machinery.Go(func() error { r.peersLoop(mctx); return nil })
	machinery.Go(func() error { r.listen(mctx); return nil })
	machinery.Go(func() error { r.confirmCancels(mctx); return nil })
	machinery.Go(func() error { r.settleLoop(mctx); return nil })
	if r.cfg.MaintenanceInterval > 0 {
		machinery.Go(func() error { r.maintainLoop(mctx); return nil })
	}

	if s, ok := r.cfg.Models.(sweeper); ok {
		machinery.Go(func() error { s.Run(mctx, time.Second); return nil })
	}
	machinery.Go(func() error { r.watchdog(mctx); return nil })
	if r.cfg.TelemetryInterval > 0 {
		machinery.Go(func() error { r.telemetryLoop(mctx); return nil })
	}

	devices := r.cfg.Devices
	if devices == nil && r.usesGPU() {
		var err error
		if devices, err = r.cfg.DeviceLister.Devices(ctx); err != nil {
			r.log.Warn("device probe failed; running on the CPU", "err", err)
		}
	}
	claiming, cctx := errgroup.WithContext(ctx)
	for name, q := range r.cfg.Queues {
		slots := q.Workers
		if q.GPU && slots == 0 {
			slots = max(1, len(devices))
			r.log.Info("gpu queue slots", "queue", name, "devices", len(devices), "slots", slots)
		}
		f := newFetcher(r, name, slots)
		if q.MaxClaim > 0 {
			f.maxClaim = min(q.MaxClaim, f.maxClaim)
			f.ownCap = true
		}
		r.mu.Lock()
		r.fetchers[name] = f
		if l, ok := r.looks[name]; ok {
			f.apply(l)
		}
		r.mu.Unlock()
		claiming.Go(func() error { f.run(cctx); return nil })
	}
	<-ctx.Done()
	_ = claiming.Wait()

	r.shutdown()
	close(r.workersStop)
	r.completer.close()
	r.stopReports() // a report still waiting for the database gives up: the lease brings its job back
	stopBG()
	_ = machinery.Wait()
	r.heartbeat(context.WithoutCancel(ctx), "stopped")
	r.log.Info("runner stopped")
	return nil
}

// shutdown waits up to the grace period for in-flight jobs, then cancels the rest
// with ErrShutdown (their executions requeue them) and waits for them to return.
func (r *Runner) shutdown() {
	r.flushBatches() // a batch waiting to fill runs now, inside the grace period
	done := make(chan struct{})
	go func() { r.execWG.Wait(); close(done) }()
	n := r.inFlight()
	if n > 0 {
		r.log.Info("stopping: waiting for in-flight jobs", "jobs", n, "grace", r.cfg.ShutdownGrace)
	}
	select {
	case <-done:
		return
	case <-time.After(r.cfg.ShutdownGrace):
	}
	r.mu.Lock()
	for _, e := range r.running {
		e.cancel(ErrShutdown)
	}
	r.mu.Unlock()
	r.log.Warn("grace period over: cancelled in-flight jobs for requeue", "jobs", r.inFlight())
	select {
	case <-done:
		return
	case <-time.After(r.cfg.Watchdog.AbandonAfter):
	}
	// Handlers that ignore their context: requeue their jobs from here and leave
	// them behind. Whatever they report later matches nothing (attempt moved on).
	r.mu.Lock()
	stuck := slices.Collect(maps.Values(r.running))
	r.mu.Unlock()
	for _, e := range stuck {
		if !e.reported.CompareAndSwap(false, true) {
			continue
		}
		r.abandoned.Add(e.abandonCount())
		r.log.Error("handler ignored cancellation; requeueing its job and abandoning it", "job", e.job.ID, "kind", e.job.Kind)
		e.requeue(context.Background(), "runner shut down; handler ignored cancellation")
		if next := e.finish(); next != nil { // the slot passes to a ready job
			r.start(next, e.f)
		}
	}
}

func (r *Runner) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// wake nudges queue's fetcher (a notification arrived or a slot freed up).
func (r *Runner) wake(payload string) {
	queue, key := parseWake(payload)
	r.mu.Lock()
	f := r.fetchers[queue]
	r.mu.Unlock()
	if f != nil {
		f.resume.notified(key)
		f.wake()
	}
}

// wakeAll nudges every fetcher (the listener reconnected and may have missed some).
func (r *Runner) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.fetchers {
		f.resume.notified(nil) // what was missed may sort anywhere
		f.wake()
	}
}
