package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
)

// AsServerUser connects to the database of dbURL as the server's own user (the
// credentials of testdb.ServerURL), for what the test role may not do: create an
// extension, write rows with triggers off. The connection is closed when the test
// ends.
func AsServerUser(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	admin, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	admin.Path = u.Path
	conn, err := pgx.Connect(context.Background(), admin.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// AsRole creates a login role that is a member of member (none: CONNECT only) and
// returns a pool on the test's database connected as it. The role is dropped when
// the test ends.
func AsRole(t testing.TB, db *DB, member string) *pgxpool.Pool {
	t.Helper()
	_, p := NewRole(t, db, member)
	return p
}

// NewRole is AsRole that also returns the role's name.
func NewRole(t testing.TB, db *DB, member string) (string, *pgxpool.Pool) {
	t.Helper()
	name := fmt.Sprintf("t_%s_%04x", strings.TrimPrefix(member, "pgrun_"), rand.N(1<<16))
	if member == "" {
		name = fmt.Sprintf("t_connect_%04x", rand.N(1<<16))
	}
	testURL, err := url.Parse(db.URL)
	require.NoError(t, err)
	admin, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	admin.Path = testURL.Path // the test's database, as the server's admin
	sdb, err := sql.Open("pgx", admin.String())
	require.NoError(t, err)
	t.Cleanup(func() { sdb.Close() })
	stmt := fmt.Sprintf(`create role %q login`, name)
	if member != "" {
		stmt += fmt.Sprintf(` in role %q`, member)
	}
	_, err = sdb.Exec(stmt)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = sdb.Exec(fmt.Sprintf(`drop owned by %q`, name))
		_, _ = sdb.Exec(fmt.Sprintf(`drop role %q`, name))
	})
	as := *testURL
	as.User = url.User(name)
	return name, testdb.PoolFor(t, as.String())
}

// Denied asserts that sql, run on p, fails for lack of privilege and changes nothing.
func Denied(t testing.TB, db *DB, p *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	Refused(t, db, p, "42501", sql, args...)
}

// Refused asserts that sql, run on p, fails with SQLSTATE state and changes nothing.
func Refused(t testing.TB, db *DB, p *pgxpool.Pool, state, sql string, args ...any) {
	t.Helper()
	before := Counts(t, db.Pool)
	_, err := p.Exec(db.Ctx, sql, args...)
	require.Error(t, err, sql)
	require.Equal(t, state, SQLState(err), "%s: %v", sql, err)
	require.Equal(t, before, Counts(t, db.Pool), sql)
}

// Allowed asserts that sql runs on p.
func Allowed(t testing.TB, db *DB, p *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := p.Exec(db.Ctx, sql, args...)
	require.NoError(t, err, sql)
}
