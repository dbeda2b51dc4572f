package pgrun

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// MigrationsTable is where golang-migrate records the schema version. It lives in
// schema public, outside pgrun, because the first migration creates pgrun and the
// last down migration drops it.
const MigrationsTable = "pgrun_schema_migrations"

// functionsLockKey serialises concurrent applications of the function set (two
// runners starting at once against a fresh database).
const functionsLockKey = 0x70677275 // "pgru"

// Migrate brings schema pgrun to the newest version: it runs the pending migrations
// in sql/migrations, then applies the function set in sql/functions and the grants
// of the three roles (see [MigrateOptions]) in one transaction under an advisory
// lock. The function set is recorded by checksum, so a second Migrate with the same
// files and roles changes nothing.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return MigrateWith(ctx, pool, MigrateOptions{})
}

// MigrateWith is [Migrate] with options.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) error {
	return migrateUp(ctx, stdlib.OpenDBFromPool(pool), opts)
}

// MigrateURL is [Migrate] on a database given by URL, for tools that hold no pool.
func MigrateURL(ctx context.Context, dbURL string) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("pgrun: migrate: %w", err)
	}
	return migrateUp(ctx, db, MigrateOptions{})
}

// migrateUp migrates and applies the functions on db, then closes db (the
// migrations driver holds a connection of its own until it is closed).
func migrateUp(ctx context.Context, db *sql.DB, opts MigrateOptions) (err error) {
	if err := checkServer(ctx, db); err != nil {
		db.Close()
		return err
	}
	m, err := newMigrate(db)
	if err != nil {
		db.Close()
		return err
	}
	defer func() {
		if _, cerr := m.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pgrun: migrate: close: %v", cerr)
		}
	}()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pgrun: migrate up: %w", err)
	}
	return applyFunctions(ctx, db, opts)
}

// MigrateDown reverses every migration, dropping schema pgrun and all it holds.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := newMigrate(stdlib.OpenDBFromPool(pool))
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pgrun: migrate down: %w", err)
	}
	return nil
}

// SchemaVersion reports the applied migration version (0 when none is) and whether
// a migration failed half-way (dirty).
func SchemaVersion(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	m, err := newMigrate(stdlib.OpenDBFromPool(pool))
	if err != nil {
		return 0, false, err
	}
	defer m.Close()
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// LatestVersion is the newest migration version this build embeds.
func LatestVersion() uint {
	var latest uint
	entries, _ := fs.ReadDir(sqlFiles, "sql/migrations")
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// WaitForSchema blocks until schema pgrun is installed (its function set applied),
// polling every poll, or until ctx is done. A runner started before `migrate up`
// waits here instead of failing.
func WaitForSchema(ctx context.Context, db DB, poll time.Duration) error {
	for {
		var ready bool
		err := db.QueryRow(ctx, sqlapi.SchemaReady).Scan(&ready)
		if err == nil && ready {
			return nil
		}
		if err != nil && schemaMissing(err) {
			err = nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("pgrun: waiting for schema: %w (last error: %v)", ctx.Err(), err)
			}
			return fmt.Errorf("pgrun: waiting for schema (run `runner migrate up`): %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// schemaMissing reports errors that mean "not installed yet": the ledger
// query can fail when the schema appears between the two halves of the check.
func schemaMissing(err error) bool {
	var code string
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		code = pe.SQLState()
	}
	return code == "42P01" || code == "3F000"
}

// newMigrate returns a golang-migrate instance on db. Closing it closes db; on error
// db is closed here.
func newMigrate(db *sql.DB) (*migrate.Migrate, error) {
	src, err := iofs.New(sqlFiles, "sql/migrations")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("pgrun: migrations source: %w", err)
	}
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{
		MigrationsTable: MigrationsTable,
		SchemaName:      "public",
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("pgrun: migrations driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		return nil, fmt.Errorf("pgrun: migrate: %w", err)
	}
	return m, nil
}

// SchemaHash identifies the state Migrate produces: a checksum of every embedded
// migration and function file. Tools that cache migrated databases (pgtestdb
// templates) key on it.
func SchemaHash() string {
	h := sha256.New()
	_ = fs.WalkDir(sqlFiles, "sql", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sqlFiles, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}
