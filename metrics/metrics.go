// Package metrics exports a runner's work and its database's queues to Prometheus.
//
// An [Exporter] counts what runners do through their [runner.Hooks] (claims,
// outcomes, round trips, lost leases, maintain() steps) and, at each scrape, reads
// every queue's depth and oldest due job from the database with pgrun.queue_counts(),
// whose cost does not grow with the backlog. The metrics are listed in
// docs/metrics.md; docs/grafana-dashboard.json charts them.
//
//	exp := metrics.New(pool)
//	cfg.Hooks = append(cfg.Hooks, exp.Hooks())
//	http.Handle("/metrics", exp.Handler())
//
// `runner work --metrics-addr :9090` does the same.
package metrics

import (
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// Buckets of the histograms, in seconds.
var (
	// jobBuckets span a millisecond to about 70 minutes by fours: handlers and waits
	// range from no-ops to GPU batches.
	jobBuckets = prometheus.ExponentialBuckets(0.001, 4, 12)
	// roundTripBuckets span half a millisecond to about 2 seconds by twos: a claim or a
	// report is one statement, and past seconds something is wrong.
	roundTripBuckets = prometheus.ExponentialBuckets(0.0005, 2, 13)
	// stepBuckets span 0.1 ms to about 26 s by fours: most maintain() steps find
	// nothing to do, a prune of a large history takes seconds.
	stepBuckets = prometheus.ExponentialBuckets(0.0001, 4, 10)
)

// Exporter holds the metrics of the runners whose hooks it gave out and reads the
// database's queue gauges at each scrape. Its methods are safe for concurrent use; one
// exporter may serve several runners of a process.
type Exporter struct {
	reg *prometheus.Registry

	claimed    *prometheus.CounterVec
	succeeded  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	retried    *prometheus.CounterVec
	outcomes   *prometheus.CounterVec
	runTime    *prometheus.HistogramVec
	waitTime   *prometheus.HistogramVec
	claimRTT   *prometheus.HistogramVec
	claimErrs  *prometheus.CounterVec
	reportRTT  *prometheus.HistogramVec
	reportErrs *prometheus.CounterVec
	leaseLost  *prometheus.CounterVec
	stepTime   *prometheus.HistogramVec
	stepRows   *prometheus.CounterVec
	stepErrs   *prometheus.CounterVec
	leader     prometheus.Gauge
	queues     *queueCollector // nil without a pool

	// series caches the per-(queue, kind) children, so that a job's outcome costs no
	// label hashing on the runner's reporting goroutine.
	series sync.Map // seriesKey -> *jobSeries
}

// New returns an exporter whose registry holds the runner metrics, the queue gauges
// read from pool at each scrape (none if pool is nil: a process whose runners share a
// database with another exporter need not ask it twice), and the Go runtime's and the
// process's own collectors.
func New(pool *pgxpool.Pool) *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry()}
	jobLabels := []string{"queue", "kind"}
	e.claimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_jobs_claimed_total",
		Help: "Jobs handed to this process by pgrun.claim_jobs.",
	}, jobLabels)
	e.succeeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_jobs_succeeded_total",
		Help: "Jobs whose success this process recorded (committed by complete_jobs).",
	}, jobLabels)
	e.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_jobs_failed_total",
		Help: "Jobs this process reported failed for good (permanent error, or the last attempt).",
	}, jobLabels)
	e.retried = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_jobs_retried_total",
		Help: "Attempts this process reported failed whose job the database queued again after a backoff.",
	}, jobLabels)
	e.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_job_outcomes_total",
		Help: "Attempts that ended in this process, by outcome (succeeded, failed, retried, retry_later, deferred, requeued, cancelled, timed_out, lease_lost, stale).",
	}, []string{"queue", "kind", "outcome"})
	e.runTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgrun_job_run_duration_seconds",
		Help:    "How long handlers ran, per attempt.",
		Buckets: jobBuckets,
	}, jobLabels)
	e.waitTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgrun_job_wait_seconds",
		Help:    "How long jobs waited from due (run_at, or enqueue if later) to their claim, per attempt.",
		Buckets: jobBuckets,
	}, []string{"queue"})
	e.claimRTT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgrun_claim_round_trip_seconds",
		Help:    "Round trips of pgrun.claim_jobs calls, retries included.",
		Buckets: roundTripBuckets,
	}, []string{"queue"})
	e.claimErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_claim_errors_total",
		Help: "Claim calls that failed after their retries.",
	}, []string{"queue"})
	e.reportRTT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgrun_report_round_trip_seconds",
		Help:    "Time from reporting a job's outcome to its commit, per job (jobs completed in one batch share its call).",
		Buckets: roundTripBuckets,
	}, []string{"queue"})
	e.reportErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_report_errors_total",
		Help: "Outcomes that could not be reported after their retries (the job's lease brings it back).",
	}, []string{"queue"})
	e.leaseLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_lease_lost_total",
		Help: "Running jobs whose lease this process lost, or whose claim was taken back.",
	}, []string{"queue"})
	e.stepTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgrun_maintain_step_seconds",
		Help:    "Time of each pgrun.maintain() step in rounds this process led (step \"maintain\": the whole round, when maintain() does not time its steps).",
		Buckets: stepBuckets,
	}, []string{"step"})
	e.stepRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_maintain_rows_total",
		Help: "Rows each pgrun.maintain() step handled in rounds this process led (leases requeued, jobs timed out, history pruned, ...).",
	}, []string{"step"})
	e.stepErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgrun_maintain_step_errors_total",
		Help: "pgrun.maintain() steps that failed (rolled back alone) or calls that failed (step \"maintain\").",
	}, []string{"step"})
	e.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pgrun_maintain_leader",
		Help: "1 if this process led its last pgrun.maintain() round, else 0.",
	})
	e.reg.MustRegister(e.claimed, e.succeeded, e.failed, e.retried, e.outcomes, e.runTime, e.waitTime,
		e.claimRTT, e.claimErrs, e.reportRTT, e.reportErrs, e.leaseLost, e.stepTime, e.stepRows, e.stepErrs,
		e.leader)
	if pool != nil {
		// NewClient fails only on a bad Config; the zero Config is valid.
		client, err := pgrun.NewClient(pool, pgrun.Config{})
		if err != nil {
			panic(err)
		}
		e.queues = newQueueCollector(client)
		e.reg.MustRegister(e.queues)
	}
	e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return e
}

// Registry is the exporter's registry, to serve with other handlers or to add
// collectors to.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg})
}

// Hooks returns the runner hooks that feed the exporter; add them to
// runner.Config.Hooks of each runner it should count.
func (e *Exporter) Hooks() runner.Hooks {
	return runner.Hooks{
		OnClaim:     e.onClaim,
		OnOutcome:   e.onOutcome,
		OnMaintain:  e.onMaintain,
		OnLeaseLost: func(j *pgrun.Job) { e.leaseLost.WithLabelValues(j.Queue).Inc() },
	}
}

type seriesKey struct{ queue, kind string }

// jobSeries are the children of one (queue, kind).
type jobSeries struct {
	claimed, succeeded, failed, retried prometheus.Counter
	run, wait, report                   prometheus.Observer
	outcomes                            sync.Map // runner.Outcome -> prometheus.Counter
}

func (e *Exporter) seriesFor(queue, kind string) *jobSeries {
	k := seriesKey{queue, kind}
	if s, ok := e.series.Load(k); ok {
		return s.(*jobSeries)
	}
	s := &jobSeries{
		claimed:   e.claimed.WithLabelValues(queue, kind),
		succeeded: e.succeeded.WithLabelValues(queue, kind),
		failed:    e.failed.WithLabelValues(queue, kind),
		retried:   e.retried.WithLabelValues(queue, kind),
		run:       e.runTime.WithLabelValues(queue, kind),
		wait:      e.waitTime.WithLabelValues(queue),
		report:    e.reportRTT.WithLabelValues(queue),
	}
	got, _ := e.series.LoadOrStore(k, s)
	return got.(*jobSeries)
}

func (e *Exporter) onClaim(ev runner.ClaimEvent) {
	e.claimRTT.WithLabelValues(ev.Queue).Observe(ev.RoundTrip.Seconds())
	if ev.Err != nil {
		e.claimErrs.WithLabelValues(ev.Queue).Inc()
		return
	}
	for _, j := range ev.Jobs {
		e.seriesFor(j.Queue, j.Kind).claimed.Inc()
	}
}

func (e *Exporter) onOutcome(ev runner.OutcomeEvent) {
	s := e.seriesFor(ev.Job.Queue, ev.Job.Kind)
	s.run.Observe(ev.Run.Seconds())
	s.wait.Observe(ev.Wait.Seconds())
	if ev.Err != nil {
		e.reportErrs.WithLabelValues(ev.Job.Queue).Inc()
		return
	}
	if ev.ReportRoundTrip > 0 {
		s.report.Observe(ev.ReportRoundTrip.Seconds())
	}
	switch ev.Outcome {
	case runner.OutcomeSucceeded:
		s.succeeded.Inc()
	case runner.OutcomeFailed:
		s.failed.Inc()
	case runner.OutcomeRetried:
		s.retried.Inc()
	}
	c, ok := s.outcomes.Load(ev.Outcome)
	if !ok {
		c, _ = s.outcomes.LoadOrStore(ev.Outcome, e.outcomes.WithLabelValues(ev.Job.Queue, ev.Job.Kind, string(ev.Outcome)))
	}
	c.(prometheus.Counter).Inc()
}

func (e *Exporter) onMaintain(ev runner.MaintainEvent) {
	if ev.Err != nil {
		e.stepErrs.WithLabelValues(ev.Step).Inc()
	}
	if !ev.Leader {
		if ev.Err == nil {
			e.leader.Set(0)
		}
		return
	}
	e.leader.Set(1)
	e.stepTime.WithLabelValues(ev.Step).Observe(ev.Elapsed.Seconds())
	if ev.Rows > 0 {
		e.stepRows.WithLabelValues(ev.Step).Add(float64(ev.Rows))
	}
}
