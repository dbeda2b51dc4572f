package metrics

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgrun/pgrun"
)

// ScrapeTimeout bounds the database query of one scrape: Prometheus's default scrape
// timeout is 10 s, and a scrape that cannot read the queues in 5 s says so
// (pgrun_database_up 0) rather than timing out whole.
const ScrapeTimeout = 5 * time.Second

// queueCollector reads every queue's gauges from the database at each scrape, with
// one call of pgrun.queue_counts(): exact counts up to stats_exact_limit() rows per
// number and estimates past it, never a count over the table.
type queueCollector struct {
	client *pgrun.Client
	// failing is set while scrapes fail to read the database, so that a failure is
	// logged once (to slog.Default()) and not at every scrape.
	failing atomic.Bool

	jobs, oldest, paused, unhandled, estimated, up, took *prometheus.Desc
}

func newQueueCollector(client *pgrun.Client) *queueCollector {
	q := []string{"queue"}
	return &queueCollector{
		client: client,
		jobs: prometheus.NewDesc("pgrun_queue_jobs",
			"Jobs of the queue by state: queued (due now), scheduled (queued, due later), running, pending, waiting. Exact up to pgrun.stats_exact_limit() per number, estimated past it.",
			[]string{"queue", "state"}, nil),
		oldest: prometheus.NewDesc("pgrun_queue_oldest_queued_age_seconds",
			"Age of the queue's oldest due job, from its run_at; 0 when none is due.", q, nil),
		paused: prometheus.NewDesc("pgrun_queue_paused",
			"1 if the queue is paused (pgrun.pause_queue), else 0.", q, nil),
		unhandled: prometheus.NewDesc("pgrun_queue_unhandled_jobs",
			"Due jobs of kinds no live worker serving the queue handles.", q, nil),
		estimated: prometheus.NewDesc("pgrun_queue_counts_estimated",
			"1 if a count of the queue is an estimate (its backlog is over pgrun.stats_exact_limit()), else 0.", q, nil),
		up: prometheus.NewDesc("pgrun_database_up",
			"1 if the last scrape read the queues from the database, else 0.", nil, nil),
		took: prometheus.NewDesc("pgrun_database_scrape_duration_seconds",
			"How long the last scrape took to read the queues from the database.", nil, nil),
	}
}

// Describe sends the descriptors of every metric the collector makes.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.oldest, c.paused, c.unhandled, c.estimated, c.up, c.took} {
		ch <- d
	}
}

// Collect reads the queues. A failed read reports pgrun_database_up 0 and no queue
// gauges, so that the runner metrics of the same scrape still arrive.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	began := time.Now()
	queues, err := c.client.Queues(ctx)
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, time.Since(began).Seconds())
	if err != nil {
		if !c.failing.Swap(true) {
			slog.Warn("metrics: could not read the queues from the database; pgrun_database_up is 0", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	if c.failing.Swap(false) {
		slog.Info("metrics: reading the queues from the database again")
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, q := range queues {
		for state, n := range map[string]int64{"queued": q.Queued, "scheduled": q.Scheduled, "running": q.Running,
			"pending": q.Pending, "waiting": q.Waiting} {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), q.Queue, state)
		}
		var oldest float64 // 0 when nothing is due
		if q.OldestQueuedAge != nil {
			oldest = q.OldestQueuedAge.Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest, q.Queue)
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, b2f(q.Paused), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.unhandled, prometheus.GaugeValue, float64(q.Unhandled), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.estimated, prometheus.GaugeValue, b2f(q.Estimated), q.Queue)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
