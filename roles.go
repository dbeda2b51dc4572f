package pgrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// DefaultRolePrefix names the roles Migrate grants: pgrun_enqueuer, pgrun_worker and
// pgrun_admin.
const DefaultRolePrefix = "pgrun_"

// MigrateOptions configures the roles [MigrateWith] installs. The zero value creates
// (if missing) and grants pgrun_enqueuer, pgrun_worker and pgrun_admin: NOLOGIN
// roles that carry the privileges, for login roles to be granted membership of (see
// docs/security.md).
type MigrateOptions struct {
	// RolePrefix replaces "pgrun_" in the role names, for several installations or
	// naming rules on one server.
	RolePrefix string
	// NoCreateRoles leaves role creation to a DBA, for managed databases where the
	// migrating role may not CREATE ROLE: roles that exist are granted; if any is
	// missing, nothing is granted and [GrantsSQL] gives the statements to run.
	NoCreateRoles bool
}

// Roles are the names of the three roles.
type Roles struct {
	Enqueuer, Worker, Admin string
}

// roles returns the role names opts describes.
func (opts MigrateOptions) roles() Roles {
	p := opts.RolePrefix
	if p == "" {
		p = DefaultRolePrefix
	}
	return Roles{Enqueuer: p + "enqueuer", Worker: p + "worker", Admin: p + "admin"}
}

// RolesFor returns the role names for prefix ("" for the default).
func RolesFor(prefix string) Roles { return MigrateOptions{RolePrefix: prefix}.roles() }

// MaxRoleNameBytes is the longest role name PostgreSQL keeps whole (NAMEDATALEN - 1):
// it cuts a longer one with only a notice, so three long names could become one.
const MaxRoleNameBytes = 63

// CheckRolePrefix returns an error when the role names for prefix ("" for the
// default) are longer than [MaxRoleNameBytes]: the check [MigrateWith], [GrantsSQL]
// and [InstallSQL] apply, for a caller that checks a flag before connecting.
func CheckRolePrefix(prefix string) error {
	r := RolesFor(prefix)
	for _, n := range []string{r.Enqueuer, r.Worker, r.Admin} {
		if len(n) > MaxRoleNameBytes {
			return fmt.Errorf("pgrun: role name %q is longer than %d bytes", n, MaxRoleNameBytes)
		}
	}
	return nil
}

// ensureRoles creates the missing roles when create is set (and the migrating role
// may), and reports whether all three exist, so that they can be granted.
func ensureRoles(ctx context.Context, tx *sql.Tx, r Roles, create bool) (bool, error) {
	names := []string{r.Enqueuer, r.Worker, r.Admin}
	for _, n := range names {
		if len(n) > MaxRoleNameBytes {
			return false, fmt.Errorf("pgrun: role name %q is longer than %d bytes", n, MaxRoleNameBytes)
		}
	}
	var missing []string
	for _, n := range names {
		var exists bool
		if err := tx.QueryRowContext(ctx, sqlapi.RoleExists, n).Scan(&exists); err != nil {
			return false, fmt.Errorf("pgrun: look up role %s: %w", n, err)
		}
		if !exists {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return true, nil
	}
	if !create {
		return false, nil
	}
	var may bool
	if err := tx.QueryRowContext(ctx, sqlapi.MayCreateRoles).Scan(&may); err != nil {
		return false, fmt.Errorf("pgrun: check CREATEROLE: %w", err)
	}
	if !may {
		return false, fmt.Errorf("pgrun: roles %s do not exist and this role may not create them: have a DBA run the statements of `runner migrate grants`, or migrate with NoCreateRoles (--no-create-roles)",
			strings.Join(missing, ", "))
	}
	for _, n := range missing {
		// Another Migrate may create the role at the same moment: its duplicate is fine,
		// in a savepoint so that the transaction goes on.
		if _, err := tx.ExecContext(ctx, sqlapi.SavepointCreateRole); err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, sqlapi.CreateRole(n)); err != nil {
			if !isSQLState(err, "42710") {
				return false, fmt.Errorf("pgrun: create role %s: %w", n, err)
			}
			if _, err := tx.ExecContext(ctx, sqlapi.RollbackCreateRole); err != nil {
				return false, err
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, sqlapi.ReleaseCreateRole); err != nil {
			return false, err
		}
	}
	return true, nil
}

// GrantsSQL returns, one per line, the statements that create the roles for prefix
// ("" for the default) and grant them their privileges on an installed schema, for
// a DBA to run where the migrating role may not.
func GrantsSQL(ctx context.Context, pool *pgxpool.Pool, prefix string) (string, error) {
	if err := CheckRolePrefix(prefix); err != nil {
		return "", err
	}
	r := RolesFor(prefix)
	var b strings.Builder
	for _, n := range []string{r.Enqueuer, r.Worker, r.Admin} {
		b.WriteString(sqlapi.CreateRoleIfMissing(n))
	}
	rows, err := pool.Query(ctx, sqlapi.RoleGrants, r.Enqueuer, r.Worker, r.Admin)
	if err != nil {
		return "", fmt.Errorf("pgrun: grants: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			return "", err
		}
		b.WriteString(stmt + ";\n")
	}
	return b.String(), rows.Err()
}

// isSQLState reports whether err carries SQLSTATE code.
func isSQLState(err error, code string) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == code
}
