package pgrun

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// PoolerExecMode is the pgx query exec mode for a pool that reaches PostgreSQL through
// a transaction-mode pooler (PgBouncer, a cloud provider's pooler): put
// default_query_exec_mode=cache_describe in that pool's URL. pgx's default,
// cache_statement, prepares named statements on whichever server connection the
// pooler lent for one transaction, and the next transaction finds them missing (or
// already there: `prepared statement "stmtcache_…" already exists`). cache_describe
// names no statement: it asks the server once per connection for a statement's
// parameter and result types and then sends each execution as one unnamed
// parse-bind-execute, a single round trip that needs nothing left on the server.
// PgBouncer before 1.21 (Debian 12 ships 1.18) has no prepared-statement support at
// all, so this is the mode that works with every version. The modes exec and
// simple_protocol also avoid prepared statements but guess parameter types from Go
// types, and send the []byte JSON the client passes as bytea, which the server
// refuses as jsonb.
const PoolerExecMode = pgx.QueryExecModeCacheDescribe

// ThroughPooler reports whether conn reaches PostgreSQL through a connection pooler
// that shares server connections between clients (PgBouncer, pgcat, Supavisor, RDS
// Proxy) rather than directly. Such a pooler cannot hand a client the server's own
// process id and cancel key, so it makes up its own at startup: the process id pgx
// received then differs from the pg_backend_pid() of the server connection that
// runs the query. A proxy that only forwards bytes (a port mapping, an SSH tunnel,
// Cloud SQL's proxy) passes the server's through and is rightly not a pooler here:
// LISTEN and prepared statements work through it. A pooler in session mode is
// reported too; LISTEN works there, but nothing can tell the two modes apart from the
// client side.
//
// The query uses the simple protocol, so it works whatever conn's exec mode.
func ThroughPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var backend uint32
	err := conn.QueryRow(ctx, sqlapi.BackendPID, pgx.QueryExecModeSimpleProtocol).Scan(&backend)
	if err != nil {
		return false, fmt.Errorf("pgrun: check for a pooler: %w", err)
	}
	return backend != conn.PgConn().PID(), nil
}

// PoolThroughPooler is [ThroughPooler] on one of pool's connections.
func PoolThroughPooler(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("pgrun: check for a pooler: %w", err)
	}
	defer conn.Release()
	return ThroughPooler(ctx, conn.Conn())
}
