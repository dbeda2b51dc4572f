package embeddings

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed sql/*.sql
var migrations embed.FS

// Errors Migrate returns when pgvector is missing, each naming the extension.
var (
	// ErrNoPgvector: the server has no pgvector extension to create.
	ErrNoPgvector = errors.New("the PostgreSQL extension \"vector\" (pgvector) is not installed on the server; run scripts/install-pgvector.sh")
	// ErrVectorNotCreated: the extension exists on the server but not in this
	// database, and this role may not create it.
	ErrVectorNotCreated = errors.New("the PostgreSQL extension \"vector\" is not created in this database and this role may not create it")
)

// Migrate creates the example's tables (schema pgrun_examples, a vector(384) column
// with an HNSW index), in a migration history of their own: the engine itself works
// without pgvector. Creating the extension needs a role allowed to (a superuser on
// a development server).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	var available bool
	if err := pool.QueryRow(ctx, `select exists (select 1 from pg_available_extensions where name = 'vector')`).Scan(&available); err != nil {
		return err
	}
	if !available {
		return ErrNoPgvector
	}
	var created bool
	if err := pool.QueryRow(ctx, `select exists (select 1 from pg_extension where extname = 'vector')`).Scan(&created); err != nil {
		return err
	}
	if !created {
		if _, err := pool.Exec(ctx, `create extension if not exists vector`); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				return fmt.Errorf("%w: run CREATE EXTENSION vector as a superuser in this database", ErrVectorNotCreated)
			}
			return fmt.Errorf("embeddings: create extension vector: %w", err)
		}
	}
	src, err := iofs.New(migrations, "sql")
	if err != nil {
		return err
	}
	drv, err := migratepgx.WithInstance(stdlib.OpenDBFromPool(pool), &migratepgx.Config{
		MigrationsTable: "pgrun_examples_schema_migrations", SchemaName: "public"})
	if err != nil {
		return fmt.Errorf("embeddings: migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		return fmt.Errorf("embeddings: migrations: %w", err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("embeddings: migrate: %w", err)
	}
	return nil
}
