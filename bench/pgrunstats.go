package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// funcStats is what PostgreSQL's function statistics (track_functions) say about
// one pgrun function during a burn-down: how often the runner called it and how
// long the calls took inside the server. With --pgrun-stats they show where the
// runner's time goes: how full its claims and completion batches are, and how
// much of the wall clock the database spent on them.
type funcStats struct {
	Calls   int64   `json:"calls"`
	TotalMS float64 `json:"total_ms"`
}

// pgrunStats are the runner's claim and completion calls in one burn-down.
type pgrunStats struct {
	Claim    funcStats `json:"claim_jobs"`
	Complete funcStats `json:"complete_jobs"`
}

// trackFunctions turns on function statistics in database name, before the bench
// pool opens its first connection (the setting is read at connection start).
func trackFunctions(ctx context.Context, admin *pgx.Conn, name string) error {
	_, err := admin.Exec(ctx, `alter database `+pgx.Identifier{name}.Sanitize()+` set track_functions = 'pl'`)
	return err
}

// flushStats closes the pool's connections, whose exit flushes their pending
// statistics, and gives the server a moment to take them in. The pool stays
// usable: it opens new connections on demand.
func flushStats(pool *pgxpool.Pool) {
	pool.Reset()
	time.Sleep(300 * time.Millisecond)
}

// resetStats starts the database's statistics from zero, after flushing what the
// insert left pending.
func resetStats(ctx context.Context, pool *pgxpool.Pool) error {
	flushStats(pool)
	_, err := pool.Exec(ctx, `select pg_stat_reset()`)
	return err
}

// readStats reads the claim and completion calls since resetStats.
func readStats(ctx context.Context, pool *pgxpool.Pool) (*pgrunStats, error) {
	flushStats(pool)
	var s pgrunStats
	rows, err := pool.Query(ctx, `select funcname, calls, total_time from pg_stat_user_functions
		where schemaname = 'pgrun' and funcname in ('claim_jobs', 'complete_jobs')`)
	if err != nil {
		return nil, err
	}
	var (
		name  string
		calls int64
		total float64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &calls, &total}, func() error {
		switch name {
		case "claim_jobs":
			s.Claim = funcStats{Calls: calls, TotalMS: total}
		case "complete_jobs":
			s.Complete = funcStats{Calls: calls, TotalMS: total}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("function statistics: %w", err)
	}
	return &s, nil
}

// describe is the one-line summary printed under a round's table.
func (s *pgrunStats) describe(jobs int, burnSeconds float64) string {
	per := func(f funcStats) (float64, float64) {
		if f.Calls == 0 {
			return 0, 0
		}
		return float64(jobs) / float64(f.Calls), f.TotalMS / float64(f.Calls)
	}
	cj, cms := per(s.Claim)
	pj, pms := per(s.Complete)
	wall := burnSeconds * 1000
	return fmt.Sprintf("claim_jobs %d calls, %.0f jobs and %.1f ms each (%.0f%% of the wall clock); "+
		"complete_jobs %d calls, %.0f jobs and %.1f ms each (%.0f%%)",
		s.Claim.Calls, cj, cms, 100*s.Claim.TotalMS/wall, s.Complete.Calls, pj, pms, 100*s.Complete.TotalMS/wall)
}
