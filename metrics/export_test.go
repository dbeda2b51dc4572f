package metrics

import "github.com/prometheus/client_golang/prometheus"

// Collectors lists the exporter's own collectors (not the Go runtime's), for lint.
func Collectors(e *Exporter) []prometheus.Collector {
	out := []prometheus.Collector{e.claimed, e.succeeded, e.failed, e.retried, e.outcomes, e.runTime, e.waitTime,
		e.claimRTT, e.claimErrs, e.reportRTT, e.reportErrs, e.leaseLost, e.stepTime, e.stepRows, e.stepErrs, e.leader}
	if e.queues != nil {
		out = append(out, e.queues)
	}
	return out
}
