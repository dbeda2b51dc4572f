package main

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connectAdmin opens the one connection that creates and drops bench databases.
func connectAdmin(ctx context.Context, adminURL string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the admin URL: %w", err)
	}
	return conn, nil
}

// benchDB is one engine's fresh database for one round.
type benchDB struct {
	name  string
	admin *pgx.Conn
	Pool  *pgxpool.Pool
}

// createDB (re)creates database name and opens a pool on it. A database of that
// name left by an aborted run is dropped first, so every round starts empty.
func createDB(ctx context.Context, admin *pgx.Conn, c config, name string) (*benchDB, error) {
	name += c.DBSuffix
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `drop database if exists `+ident+` with (force)`); err != nil {
		return nil, fmt.Errorf("drop %s: %w", name, err)
	}
	if _, err := admin.Exec(ctx, `create database `+ident); err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	d := &benchDB{name: name, admin: admin}
	u, err := url.Parse(admin.Config().ConnString())
	if err != nil {
		d.drop()
		return nil, fmt.Errorf("admin URL: %w", err)
	}
	// Only URLs are supported (not key=value strings): the database is swapped in
	// the path.
	if u.Scheme == "" {
		d.drop()
		return nil, fmt.Errorf("the admin URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		d.drop()
		return nil, err
	}
	if c.PoolConns > 0 {
		cfg.MaxConns = int32(c.PoolConns)
	}
	if d.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		d.drop()
		return nil, err
	}
	checkpoint(ctx, d.Pool)
	return d, nil
}

// checkpoint asks for a checkpoint before a timed part, so that one requested by the
// WAL of the rounds before does not fall inside this one by chance (its full-page
// writes and fsyncs slow whichever engine it lands on). A role that may not is told
// so, and the round goes on.
func checkpoint(ctx context.Context, pool *pgxpool.Pool) {
	if _, err := pool.Exec(ctx, `checkpoint`); err != nil && ctx.Err() == nil {
		progress("no checkpoint before the timed part: %v", err)
	}
}

// drop closes the pool and drops the database, even when the bench's context was
// cancelled (a signal): the databases are big and must not be left behind.
func (d *benchDB) drop() {
	if d.Pool != nil {
		d.Pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.admin.Exec(ctx, `drop database if exists `+pgx.Identifier{d.name}.Sanitize()+` with (force)`); err != nil {
		progress("could not drop database %s: %v", d.name, err)
	}
}

// vacuum analyzes table so that both engines start their burn-down with fresh
// statistics and a visibility map, outside the timed part, and from a fresh
// checkpoint.
func vacuum(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if _, err := pool.Exec(ctx, `vacuum (analyze) `+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	checkpoint(ctx, pool)
	return nil
}

// insertBatches calls insert for every batch of the n jobs and returns the rate.
func insertBatches(ctx context.Context, n, batch int, insert func(ctx context.Context, size int) error) (perSec float64, err error) {
	start := time.Now()
	last := start
	for done := 0; done < n; done += batch {
		if err := insert(ctx, min(batch, n-done)); err != nil {
			return 0, err
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			progress("  inserted %d of %d", done+min(batch, n-done), n)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// counter is what the no-op handlers of either engine record: how many ran, and
// when the first and the last one did (the engine's start-up and its tail).
type counter struct {
	start  time.Time // set just before the engine starts
	worked atomic.Int64
	first  atomic.Int64 // nanoseconds after start; 0 until the first job
	last   atomic.Int64 // nanoseconds after start of the latest job
}

// ran is called by every handler.
func (c *counter) ran() {
	now := int64(max(1, time.Since(c.start)))
	if c.worked.Add(1) == 1 {
		c.first.Store(now)
	}
	c.last.Store(now) // racy by a few nanoseconds at worst: good enough for a tail
}

// firstMS is how long after start the first handler ran, in milliseconds.
func (c *counter) firstMS() float64 { return float64(c.first.Load()) / 1e6 }

// lastMS is how long after start the last handler ran, in milliseconds.
func (c *counter) lastMS() float64 { return float64(c.last.Load()) / 1e6 }

// waitDrained waits until the database reports no job left to run (left returns 0
// exactly when no job is queued or running, and a count that falls as they finish).
// The handlers count what they ran in count; while that is short of n the database
// is not asked at all, and progress and stalls are read off the handlers' count, so
// that the harness takes nothing from the engine it measures (a count of a
// million-job backlog once a second was a parallel sequential scan of 100 ms, up to
// a tenth of this machine's two cores). Once every
// handler has run, it asks every 10 ms, so that the end is timed to within 10 ms. It
// is the same for both engines: a job counts as done when its completion is
// committed, not when its handler returns. It fails when neither count moves for
// stall.
func waitDrained(ctx context.Context, n int64, count *counter, stall time.Duration, left func(context.Context) (int64, error)) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var (
		lastShown  time.Time
		lastWorked int64 = -1
		lastLeft   int64 = -1
		lastMove         = time.Now()
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		worked := count.worked.Load()
		if now.Sub(lastShown) >= 5*time.Second {
			lastShown = now
			progress("  handlers ran %d of %d", worked, n)
		}
		if worked < n {
			if worked != lastWorked {
				lastWorked, lastMove = worked, now
			} else if now.Sub(lastMove) > stall {
				return fmt.Errorf("stalled: handlers ran %d of %d jobs, none for %s", worked, n, stall)
			}
			continue
		}
		l, err := left(ctx)
		if err != nil {
			return fmt.Errorf("count jobs left: %w", err)
		}
		if l == 0 {
			return nil
		}
		if l != lastLeft {
			lastLeft, lastMove = l, now
		} else if now.Sub(lastMove) > stall {
			return fmt.Errorf("stalled: %d jobs left for %s", l, stall)
		}
	}
}
