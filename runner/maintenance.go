package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// maintenanceLockKey is the session advisory lock whose holder is the maintenance
// leader.
const maintenanceLockKey = 0x7067726d // "pgrm"

// maintainLoop makes this runner the maintenance leader when no other runner is:
// it holds a session advisory lock on a connection of its own and calls
// pgrun.maintain() every MaintenanceInterval. If the connection dies, the lock goes
// with it and another runner takes over. (maintain() also guards itself with a
// transaction lock, so an outside caller such as pg_cron never overlaps.)
func (r *Runner) maintainLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.MaintenanceInterval)
	defer t.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil || conn.IsClosed() {
			conn = r.tryLead(ctx)
			if conn == nil {
				continue
			}
			r.log.Info("maintenance leader")
		}
		var out []byte
		if err := conn.QueryRow(ctx, `select pgrun.maintain()::text`).Scan(&out); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("maintain failed; giving up leadership", "err", err)
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		r.logMaintenance(out)
	}
}

// tryLead returns a connection holding the leader lock, or nil.
func (r *Runner) tryLead(ctx context.Context) *pgx.Conn {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil
	}
	var got bool
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1)`, maintenanceLockKey).Scan(&got); err != nil || !got {
		conn.Close(context.Background())
		return nil
	}
	return conn
}

// logMaintenance logs a maintain() round that did something.
func (r *Runner) logMaintenance(out []byte) {
	var m map[string]any
	if json.Unmarshal(out, &m) != nil {
		return
	}
	for _, v := range m {
		if n, ok := v.(float64); ok && n > 0 {
			r.log.Info("maintenance", "did", string(out))
			return
		}
	}
}
