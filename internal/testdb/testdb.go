// Package testdb gives each test its own PostgreSQL database with schema pgrun
// installed, cloned by pgtestdb from a template that is migrated once per version of
// the embedded SQL.
//
// The server comes from PGRUN_DATABASE_URL, then DATABASE_URL, then
// postgres://postgres@127.0.0.1:5432/postgres (scripts/ensure-postgres.sh prints the
// URL to use).
package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// TB is what the functions here need of a test: a *testing.T or *testing.B, or,
// for runnable examples (which have none), a stand-in of the caller's.
type TB = pgtestdb.TB

// DefaultURL is the server tests use when no URL is configured.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the admin URL of the server tests create their databases on.
func ServerURL() string {
	for _, k := range []string{"PGRUN_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return DefaultURL
}

// Migrator installs the engine with pgrun.MigrateURL. Its hash covers every embedded
// SQL file, so changing a migration or function rebuilds the template.
type Migrator struct{}

// Hash identifies the migrated state: the latest migration and the function set.
func (Migrator) Hash() (string, error) {
	return pgrun.SchemaHash(), nil
}

// Migrate installs schema pgrun into the template database and enables the test
// clock seam there (SET pgrun.now), which production databases never honour.
func (Migrator) Migrate(ctx context.Context, db *sql.DB, conf pgtestdb.Config) error {
	if err := pgrun.MigrateURL(ctx, conf.URL()); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, sqlapi.EnableTestClock)
	return err
}

// ensureRoles creates pgrun's three roles on the server with the admin connection
// once per process: roles belong to the whole server, and the role tests use to
// migrate may not create them.
var ensureRoles = sync.OnceValue(func() error {
	db, err := sql.Open("pgx", ServerURL())
	if err != nil {
		return err
	}
	defer db.Close()
	r := pgrun.RolesFor("")
	for _, n := range []string{r.Enqueuer, r.Worker, r.Admin} {
		// Role names here are pgrun's own constants; parallel test processes may race
		// (duplicate_object, or a unique violation in pg_authid).
		_, err := db.Exec(sqlapi.CreateRole(n))
		if err != nil && !strings.Contains(err.Error(), "already exists") && !strings.Contains(err.Error(), "duplicate key") {
			return fmt.Errorf("create role %s: %w", n, err)
		}
	}
	return nil
})

// Config is the pgtestdb configuration for ServerURL. Tests connect as the server's
// own user (a superuser on a development server) so that they can create extensions
// and terminate the connections of processes they kill.
func Config(tb TB) pgtestdb.Config {
	tb.Helper()
	if err := ensureRoles(); err != nil {
		tb.Fatalf("testdb: roles: %v", err)
	}
	u, err := url.Parse(ServerURL())
	if err != nil {
		tb.Fatalf("testdb: bad database URL: %v", err)
	}
	pw, _ := u.User.Password()
	conf := pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      u.Port(),
		User:                      u.User.Username(),
		Password:                  pw,
		Database:                  strings.TrimPrefix(u.Path, "/"),
		Options:                   u.RawQuery,
		ForceTerminateConnections: true,
	}
	if conf.Port == "" {
		conf.Port = "5432"
	}
	if conf.Database == "" {
		conf.Database = "postgres"
	}
	if conf.Options == "" {
		conf.Options = "sslmode=disable"
	}
	return conf
}

// URL creates a fresh migrated database for tb and returns its URL. The database is
// dropped when the test ends (kept if it failed, for a look with psql).
func URL(tb TB) string {
	tb.Helper()
	return pgtestdb.Custom(tb, Config(tb), Migrator{}).URL()
}

// Pool creates a fresh migrated database for tb and returns a pool on it, closed
// when the test ends.
func Pool(tb TB) *pgxpool.Pool {
	tb.Helper()
	return PoolFor(tb, URL(tb))
}

// PoolFor opens a pool on dbURL, closed when the test ends.
func PoolFor(tb TB, dbURL string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		tb.Fatalf("testdb: parse %s: %v", dbURL, err)
	}
	cfg.MaxConns = 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("testdb: connect: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
