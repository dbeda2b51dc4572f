package runner

import "sync/atomic"

// Stats counts what a runner has done since it started. Bench and the operator's
// tools read it instead of counting rows in the database, which on a large backlog
// costs the database more than the work being measured.
type Stats struct {
	// Claimed is the number of jobs handed to this runner by claim_jobs.
	Claimed int64
	// Handed is the number of jobs of sequences handed to this runner as it completed
	// the job before them (the handoff), not claimed.
	Handed int64
	// Completed is the number of successes recorded (committed by complete_jobs).
	Completed int64
	// ClaimCalls and CompleteCalls count the claim_jobs and complete_jobs calls that
	// succeeded: Claimed/ClaimCalls is the average claim, the figure that says how
	// well round trips are amortised.
	ClaimCalls    int64
	CompleteCalls int64
	// Outages counts the times the database became unreachable (logged once each);
	// FailedCalls the background calls that failed for it meanwhile.
	Outages     int64
	FailedCalls int64
	// ReportsKept counts the tries at recording a finished attempt's outcome that ran
	// out while the database was away, after which the runner kept the outcome and
	// tried again (keepReporting) rather than leave the job to its lease.
	ReportsKept int64
}

// stats holds the live counters behind [Runner.Stats].
type stats struct {
	claimed       atomic.Int64
	handed        atomic.Int64
	completed     atomic.Int64
	claimCalls    atomic.Int64
	completeCalls atomic.Int64
	reportsKept   atomic.Int64
}

// Stats returns a snapshot of the runner's counters; safe to call at any time.
func (r *Runner) Stats() Stats {
	return Stats{
		Claimed:       r.stats.claimed.Load(),
		Handed:        r.stats.handed.Load(),
		Completed:     r.stats.completed.Load(),
		ClaimCalls:    r.stats.claimCalls.Load(),
		CompleteCalls: r.stats.completeCalls.Load(),
		Outages:       r.down.count.Load(),
		FailedCalls:   r.down.total.Load(),
		ReportsKept:   r.stats.reportsKept.Load(),
	}
}
