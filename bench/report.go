package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/pgrun/pgrun/bench/internal/riverbench"
)

// roundResult is one engine's figures in one round. LimitPerSec is pgrun's bare
// claim/complete loop; River has none.
type roundResult struct {
	Round        int     `json:"round"`
	Engine       string  `json:"engine"`
	Workers      int     `json:"workers"`
	InsertPerSec float64 `json:"insert_per_sec"`
	BurnSeconds  float64 `json:"burn_seconds"`
	BurnPerSec   float64 `json:"burn_per_sec"`
	// FirstJobMS is how long after the engine's start its first handler ran: the
	// start-up share of BurnSeconds.
	FirstJobMS float64 `json:"first_job_ms"`
	// LastJobMS is when the last handler ran; BurnSeconds past it is the wait for
	// the last completions to be committed (and seen by the bench's poll).
	LastJobMS   float64 `json:"last_job_ms"`
	LimitPerSec float64 `json:"limit_per_sec,omitempty"`
	// Stats are pgrun's function statistics of the burn-down (--pgrun-stats).
	Stats *pgrunStats `json:"pgrun_stats,omitempty"`
}

// medians are the per-engine medians over the rounds.
type medians struct {
	InsertPerSec float64 `json:"insert_per_sec"`
	BurnPerSec   float64 `json:"burn_per_sec"`
	LimitPerSec  float64 `json:"limit_per_sec,omitempty"`
}

// ratios compare the medians: above 1 means pgrun is faster, and RunnerShare is
// the fraction of the database-side limit the runner reaches.
type ratios struct {
	BurnPgrunOverRiver   float64 `json:"burn_pgrun_over_river"`
	InsertPgrunOverRiver float64 `json:"insert_pgrun_over_river"`
	RunnerShare          float64 `json:"pgrun_runner_over_db_limit,omitempty"`
}

// result is everything the bench prints; --json prints it as is.
type result struct {
	Date    string             `json:"date"`
	Server  string             `json:"server_version"`
	Config  config             `json:"config"`
	Rounds  []roundResult      `json:"rounds"`
	Medians map[string]medians `json:"medians"`
	Ratios  ratios             `json:"ratios"`
}

// summarize fills Medians and Ratios from Rounds.
func (r *result) summarize() {
	r.Medians = map[string]medians{}
	for _, engine := range []string{"pgrun", "river"} {
		if r.Config.Only != "" && r.Config.Only != engine {
			continue
		}
		var ins, burn, limit []float64
		for _, x := range r.Rounds {
			if x.Engine == engine {
				ins, burn = append(ins, x.InsertPerSec), append(burn, x.BurnPerSec)
				if x.LimitPerSec > 0 {
					limit = append(limit, x.LimitPerSec)
				}
			}
		}
		r.Medians[engine] = medians{InsertPerSec: median(ins), BurnPerSec: median(burn), LimitPerSec: median(limit)}
	}
	p, rv := r.Medians["pgrun"], r.Medians["river"]
	r.Ratios = ratios{
		BurnPgrunOverRiver:   ratio(p.BurnPerSec, rv.BurnPerSec),
		InsertPgrunOverRiver: ratio(p.InsertPerSec, rv.InsertPerSec),
		RunnerShare:          ratio(p.BurnPerSec, p.LimitPerSec),
	}
}

// median of xs; 0 for none. With an even count it is the mean of the middle two.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func printJSON(w io.Writer, r *result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// printTables prints one table per round, then the medians and the ratios.
func printTables(w io.Writer, r *result) {
	c := r.Config
	fmt.Fprintf(w, "pgrun vs River, PostgreSQL %s: %d no-op jobs per engine per round, inserts in batches of %d\n",
		r.Server, c.Jobs, c.Batch)
	fmt.Fprintf(w, "pgrun runner: %d slots, GOGC %d; River: MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, GOGC %d; bare loop: %d connection(s), claims of %d\n\n",
		c.PgrunWorkers, c.PgrunGOGC, c.RiverWorkers, riverbench.FetchCooldown, riverbench.FetchPollInterval, c.RiverGOGC, c.LimitConns, c.LimitClaim)
	for i := 1; i <= c.Rounds; i++ {
		fmt.Fprintf(w, "round %d\n", i)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "engine\tinsert jobs/s\tburn-down s\tfirst job ms\tlast job ms\tburn-down jobs/s\tbare loop jobs/s\t")
		for _, x := range r.Rounds {
			if x.Round == i {
				fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%s\t\n",
					x.Engine, x.InsertPerSec, x.BurnSeconds, x.FirstJobMS, x.LastJobMS, x.BurnPerSec, orDash(x.LimitPerSec))
			}
		}
		tw.Flush()
		for _, x := range r.Rounds {
			if x.Round == i && x.Stats != nil {
				fmt.Fprintf(w, "  %s burn-down: %s\n", x.Engine, x.Stats.describe(c.Jobs, x.BurnSeconds))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "medians over %d round(s)\n", c.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "engine\tinsert jobs/s\tburn-down jobs/s\tbare loop jobs/s\t")
	for _, engine := range []string{"pgrun", "river"} {
		m, ok := r.Medians[engine]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t\n", engine, m.InsertPerSec, m.BurnPerSec, orDash(m.LimitPerSec))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if r.Ratios.BurnPgrunOverRiver > 0 {
		fmt.Fprintf(w, "burn-down  pgrun / River          %.2f\n", r.Ratios.BurnPgrunOverRiver)
		fmt.Fprintf(w, "insert     pgrun / River          %.2f\n", r.Ratios.InsertPgrunOverRiver)
	}
	if r.Ratios.RunnerShare > 0 {
		fmt.Fprintf(w, "pgrun      runner / bare loop     %.2f\n", r.Ratios.RunnerShare)
	}
}

func orDash(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", x)
}
