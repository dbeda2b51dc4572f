package pgrun

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// MinServerVersion is the oldest PostgreSQL major version pgrun runs on: the unique
// keys per tenant use NULLS NOT DISTINCT (15) and the function set uses CREATE OR
// REPLACE TRIGGER (14).
const MinServerVersion = 15

// ErrNewerSchema is returned by Migrate when the database holds a newer SQL API than
// this build: an older function set is never installed over a newer one (it would
// take away what newer callers rely on). Upgrade the binary instead.
var ErrNewerSchema = errors.New("pgrun: the database has a newer SQL API than this build")

// apiVersions reads the two numbers of sql/functions/00_version.sql, the one place they
// are written: the version of the API this build installs and the oldest version
// whose callers it still serves.
var apiVersions = sync.OnceValues(func() (version, compatibleSince int) {
	b, err := fs.ReadFile(sqlFiles, "sql/functions/00_version.sql")
	if err != nil {
		panic(err)
	}
	num := func(name string) int {
		m := regexp.MustCompile(`function pgrun\.` + name + `\(\)[\s\S]*?as \$\$ select (\d+) \$\$`).FindSubmatch(b)
		if m == nil {
			panic("pgrun: sql/functions/00_version.sql does not define " + name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	return num("api_version"), num("api_compatible_since")
})

// APIVersion is the version of the SQL API this build installs and calls; the
// database's is pgrun.api_version(). docs/upgrading.md has the compatibility rules.
func APIVersion() int { v, _ := apiVersions(); return v }

// APICompatibleSince is the oldest API version whose callers this build's function
// set still serves (pgrun.api_compatible_since()).
func APICompatibleSince() int { _, c := apiVersions(); return c }

// DatabaseAPI reports the SQL API installed in the database: its version and the
// oldest version whose callers it serves; zeros when no versioned function set is
// installed (none at all, or one from before versions).
func DatabaseAPI(ctx context.Context, db DB) (version, compatibleSince int, err error) {
	// Two steps: a call of a function that does not exist fails at parse time, even
	// in a branch that would not run.
	var installed bool
	if err := db.QueryRow(ctx, sqlapi.APIFunctionsExist).Scan(&installed); err != nil {
		return 0, 0, fmt.Errorf("pgrun: read the database's API version: %w", err)
	}
	if !installed {
		return 0, 0, nil
	}
	if err := db.QueryRow(ctx, sqlapi.DatabaseAPI).Scan(&version, &compatibleSince); err != nil {
		return 0, 0, fmt.Errorf("pgrun: read the database's API version: %w", err)
	}
	return version, compatibleSince, nil
}

// privilegesFile is applied last (its number is the highest): it grants the roles
// what the functions before it define.
const privilegesFile = "90_privileges.sql"

// functionFileName is the form of a function file's name: two digits that place it in
// the order of application, then what it holds (sql/functions/01_common.sql says how
// the numbers are chosen). A file without them would sort after the grants.
var functionFileName = regexp.MustCompile(`^[0-9]{2}_[a-z0-9_]+\.sql$`)

// functionFile is one file of the function set.
type functionFile struct {
	name string
	body string
}

// functionSet returns the function files in application order, which is the order
// of their names, and their combined checksum.
func functionSet() ([]functionFile, string, error) {
	entries, err := fs.ReadDir(sqlFiles, "sql/functions") // sorted by name
	if err != nil {
		return nil, "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !functionFileName.MatchString(e.Name()) {
			return nil, "", fmt.Errorf("sql/functions/%s: a function file is named NN_what.sql, NN its place in the order", e.Name())
		}
		names = append(names, e.Name())
	}
	h := sha256.New()
	files := make([]functionFile, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(sqlFiles, path.Join("sql/functions", name))
		if err != nil {
			return nil, "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
		files = append(files, functionFile{name: name, body: string(b)})
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

// FunctionsChecksum is the checksum of the function set this build embeds.
func FunctionsChecksum() string {
	_, sum, _ := functionSet()
	return sum
}

// Re-applying the function set waits at most applyLockTimeout for each lock (a
// changed trigger locks pgrun.jobs against writers; a changed view, its readers) and
// then gives up and tries again, for up to applyRetryFor: while it waits in the lock
// queue, everything that wants the same lock queues behind it, so it must never wait
// long behind a transaction that holds a row of the table.
const (
	applyLockTimeout = 500 * time.Millisecond
	applyRetryFor    = 2 * time.Minute
)

// checkServer refuses a server older than MinServerVersion with one clear error.
func checkServer(ctx context.Context, db *sql.DB) error {
	var num int
	var version string
	if err := db.QueryRowContext(ctx, sqlapi.ServerVersion).Scan(&num, &version); err != nil {
		return fmt.Errorf("pgrun: read the server version: %w", err)
	}
	if num < MinServerVersion*10000 {
		return fmt.Errorf("pgrun: PostgreSQL %s is too old: pgrun needs %d or newer", version, MinServerVersion)
	}
	return nil
}

// applyFunctions applies the function set and the grants in one transaction, unless
// the ledger shows them applied already; see applyFunctionsOnce. A lock it could not
// take within applyLockTimeout (or a deadlock) rolls the attempt back, and it tries
// again with a growing pause, for up to applyRetryFor.
func applyFunctions(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	deadline := time.Now().Add(applyRetryFor)
	pause := 100 * time.Millisecond
	for {
		err := applyFunctionsOnce(ctx, db, opts)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != "55P03" && pe.Code != "40P01") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// applyFunctionsOnce makes one attempt. It refuses a database whose SQL API is newer
// than this build's. Triggers and views are re-created only where their statement
// changed (pgrun.ensure_ddl), so re-applying takes no lock that conflicts with claims.
// Afterwards every function of schema pgrun that the set did not (re)create in this
// transaction is dropped: a function removed from the repository leaves the database
// with the upgrade.
func applyFunctionsOnce(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	files, sum, err := functionSet()
	if err != nil {
		return fmt.Errorf("pgrun: read function set: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pgrun: apply functions: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, sqlapi.LockFunctionSet, functionsLockKey); err != nil {
		return fmt.Errorf("pgrun: apply functions: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, sqlapi.SetLocalLockTimeout, fmt.Sprintf("%dms", applyLockTimeout.Milliseconds())); err != nil {
		return fmt.Errorf("pgrun: apply functions: %w", err)
	}
	var dbVersion int
	var versioned bool
	if err := tx.QueryRowContext(ctx, sqlapi.APIVersionExists).Scan(&versioned); err != nil {
		return fmt.Errorf("pgrun: apply functions: read the API version: %w", err)
	}
	if versioned {
		if err := tx.QueryRowContext(ctx, sqlapi.APIVersion).Scan(&dbVersion); err != nil {
			return fmt.Errorf("pgrun: apply functions: read the API version: %w", err)
		}
	}
	if dbVersion > APIVersion() {
		return fmt.Errorf("%w: the database has version %d, this build has %d; run a build of version %d or newer",
			ErrNewerSchema, dbVersion, APIVersion(), dbVersion)
	}
	roles := opts.roles()
	granted, err := ensureRoles(ctx, tx, roles, !opts.NoCreateRoles)
	if err != nil {
		return err
	}
	sum = ledgerChecksum(sum, roles, granted)
	var applied bool
	if err := tx.QueryRowContext(ctx, sqlapi.FunctionSetApplied, sum).Scan(&applied); err != nil {
		return fmt.Errorf("pgrun: apply functions: read ledger: %w", err)
	}
	if applied {
		return tx.Commit()
	}
	for _, f := range files {
		if f.name == privilegesFile {
			// Before the grants: their REVOKE ... ON ALL FUNCTIONS rewrites every
			// function's catalog row, the old ones' too.
			if _, err := tx.ExecContext(ctx, sqlapi.DropStaleFunctions); err != nil {
				return fmt.Errorf("pgrun: apply functions: drop functions no longer in the set: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, f.body); err != nil {
			return fmt.Errorf("pgrun: apply sql/functions/%s: %w", f.name, err)
		}
	}
	if granted {
		if _, err := tx.ExecContext(ctx, sqlapi.GrantRoles, roles.Enqueuer, roles.Worker, roles.Admin); err != nil {
			return fmt.Errorf("pgrun: grant roles: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, sqlapi.ClearFunctionLedger); err != nil {
		return fmt.Errorf("pgrun: apply functions: %w", err)
	}
	if _, err := tx.ExecContext(ctx, sqlapi.RecordFunctionSet, sum); err != nil {
		return fmt.Errorf("pgrun: apply functions: %w", err)
	}
	return tx.Commit()
}

// InstallSQL returns the complete installation as one SQL script, for teams that
// apply schema with their own tool (Flyway, Atlas, sqitch, psql): the server check,
// the migrations, the function set, the roles (created where missing) and their
// grants, and the bookkeeping that makes a later [Migrate] of the same build a no-op
// (golang-migrate's version table and the function ledger). It runs in one
// transaction (the function set's clean-up relies on it) and is meant for an empty
// database or one at an older version of this script.
func InstallSQL(opts MigrateOptions) (string, error) {
	if err := CheckRolePrefix(opts.RolePrefix); err != nil {
		return "", err
	}
	files, sum, err := functionSet()
	if err != nil {
		return "", err
	}
	roles := opts.roles()
	var b strings.Builder
	b.WriteString(sqlapi.InstallBegin(LatestVersion(), APIVersion(), sum[:12], MinServerVersion))
	b.WriteString(sqlapi.CreateMigrationsTable(MigrationsTable))
	migrations, err := upMigrations()
	if err != nil {
		return "", err
	}
	for _, m := range migrations {
		fmt.Fprintf(&b, "\n-- sql/migrations/%s\n", m.name)
		b.WriteString(m.body)
		b.WriteString("\n")
	}
	b.WriteString("\n" + sqlapi.SetMigrationsVersion(MigrationsTable, LatestVersion()))
	for _, f := range files {
		if f.name == privilegesFile {
			b.WriteString("\n-- functions of schema pgrun this set does not define\n")
			b.WriteString(sqlapi.DropStaleFunctions + ";\n")
		}
		fmt.Fprintf(&b, "\n-- sql/functions/%s\n%s\n", f.name, f.body)
	}
	b.WriteString("\n-- roles (created where missing) and their grants\n")
	for _, n := range []string{roles.Enqueuer, roles.Worker, roles.Admin} {
		b.WriteString(sqlapi.CreateRoleIfMissing(n))
	}
	b.WriteString(sqlapi.GrantRolesStatement(roles.Enqueuer, roles.Worker, roles.Admin))
	b.WriteString(sqlapi.InstallEnd(ledgerChecksum(sum, roles, true)))
	return b.String(), nil
}

// migrationFile is one up migration.
type migrationFile struct {
	version uint
	name    string
	body    string
}

// upMigrations returns the embedded up migrations in version order.
func upMigrations() ([]migrationFile, error) {
	entries, err := fs.ReadDir(sqlFiles, "sql/migrations")
	if err != nil {
		return nil, err
	}
	var out []migrationFile
	for _, e := range entries {
		var v uint
		if !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err != nil {
			continue
		}
		body, err := fs.ReadFile(sqlFiles, path.Join("sql/migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migrationFile{version: v, name: e.Name(), body: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// ledgerChecksum is what pgrun.function_ledger records for a function set applied
// with roles (granted: whether the grants ran): a Migrate after a DBA has created the
// roles grants them.
func ledgerChecksum(sum string, roles Roles, granted bool) string {
	return fmt.Sprintf("%s:%s:%t", sum, roles.Enqueuer+","+roles.Worker+","+roles.Admin, granted)
}
