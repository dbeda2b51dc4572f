package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
)

// closedPort returns 127.0.0.1:PORT where nothing listens: a port the kernel just
// gave a listener, closed again.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// emptyDatabase creates a database without schema pgrun on the test server and
// returns its URL; it is dropped when the test ends.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testdb.ServerURL())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(ctx) })
	name := fmt.Sprintf("pgrun_cli_empty_%d_%d", os.Getpid(), time.Now().UnixNano())
	ident := pgx.Identifier{name}.Sanitize()
	_, err = admin.Exec(ctx, "create database "+ident)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(ctx, "drop database if exists "+ident+" with (force)")
		require.NoError(t, err)
	})
	u, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// With nothing listening, every command says so on one line, with the cause pgx
// puts below its heading (and repeats for each TLS mode tried) said once.
func TestConnectionRefusedIsOneLineWithItsCause(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	dbURL := "postgres://postgres@" + addr + "/x?connect_timeout=5"
	for _, args := range [][]string{{"status"}, {"job", "list"}, {"queue", "list"}, {"migrate", "up"}} {
		code, stderr := stderrOf(append(args, "--database-url", dbURL)...)
		requireOneLineError(t, code, stderr, "runner: connect to "+addr+": connection refused (is PostgreSQL running? scripts/ensure-postgres.sh starts one)\n")
		require.Equal(t, 1, strings.Count(stderr, "connection refused"), "%v: %q", args, stderr)
		require.NotContains(t, stderr, "failed to connect", "%v", args)
	}
}

// A server that answers but refuses the login says why, after where.
func TestConnectionRefusedByTheServerSaysWhy(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	u.User = url.User("pgrun_no_such_role")
	code, stderr := stderrOf("status", "--database-url", u.String())
	requireOneLineError(t, code, stderr, "runner: connect to ", `role "pgrun_no_such_role" does not exist`)
	require.NotContains(t, stderr, "is PostgreSQL running", "the server is running")
}

// A database without schema pgrun is answered with the command that installs it,
// by every command but migrate's own; after that command, the same command works.
func TestEmptyDatabaseSaysRunMigrateUp(t *testing.T) {
	t.Parallel()
	dbURL := emptyDatabase(t)
	for args, cause := range map[string]string{
		"status":           `(relation "pgrun.queue_stats" does not exist)`,
		"job list":         `(relation "pgrun.jobs" does not exist)`,
		"queue list":       `(relation "pgrun.queues" does not exist)`,
		"top --once":       `(relation "pgrun.queue_stats" does not exist)`,
		"job enqueue noop": `(schema "pgrun" does not exist)`,
		"maintain run":     `(schema "pgrun" does not exist)`,
	} {
		code, stderr := stderrOf(append(strings.Fields(args), "--database-url", dbURL)...)
		requireOneLineError(t, code, stderr, "runner: schema pgrun is not installed in this database", cause,
			": run `runner migrate up`\n")
	}

	code, stderr := stderrOf("migrate", "grants", "--database-url", dbURL)
	requireOneLineError(t, code, stderr, `runner: schema "pgrun" does not exist`)
	require.NotContains(t, stderr, "migrate up", "migrate's own errors say what failed")

	code, stderr = stderrOf("migrate", "up", "--database-url", dbURL)
	require.Equal(t, 0, code, stderr)
	code, stderr = stderrOf("status", "--database-url", dbURL)
	require.Equal(t, 0, code, stderr)
}

func TestOneLineKeepsEveryLine(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		errors.New("first:\n\tsecond   part\r\n\nthird \n"):                      "first: second part; third",
		fmt.Errorf("claim: %w", &pgconn.PgError{Message: "m", Hint: "one\ntwo"}): "m (hint: one; two)",
	} {
		require.Equal(t, want, oneLine(err))
		require.Equal(t, want, errorLine(nil, err))
	}
}

// Only PostgreSQL's "does not exist" about a pgrun object is taken for a missing
// schema; the same codes about other names, and other codes about pgrun, are not.
func TestMissingSchemaNeedsAPgrunObject(t *testing.T) {
	t.Parallel()
	missing := []*pgconn.PgError{
		{Code: "42P01", Message: `relation "pgrun.jobs" does not exist`},
		{Code: "42883", Message: "function pgrun.enqueue_job(unknown) does not exist", Hint: "No function matches"},
		{Code: "3F000", Message: `schema "pgrun" does not exist`},
	}
	for _, pe := range missing {
		line := errorLine(nil, fmt.Errorf("enqueue: %w", pe))
		require.Contains(t, line, "schema pgrun is not installed in this database", pe.Message)
		require.Contains(t, line, "("+pe.Message+"): run `runner migrate up`")
	}
	for _, pe := range []*pgconn.PgError{
		{Code: "42P01", Message: `relation "public.pgrun_jobs" does not exist`},
		{Code: "42883", Message: "function mypgrun.f() does not exist"},
		{Code: "42704", Message: `unrecognized configuration parameter "pgrun.tenant"`},
		{Code: "P0002", Message: "queue 'pgrun.x' does not exist"},
	} {
		require.Equal(t, pe.Message, errorLine(nil, pe))
	}
	migrate, _, err := newRootCmd().Find([]string{"migrate", "up"})
	require.NoError(t, err)
	require.Equal(t, missing[0].Message, errorLine(migrate, missing[0]))
	status, _, err := newRootCmd().Find([]string{"status"})
	require.NoError(t, err)
	require.Contains(t, errorLine(status, missing[0]), "runner migrate up")
}

// TestCLIHintsNameRunnerCommands checks that the SQL API's hints which show a query
// reach the command line as the runner command that does the same, and that a hint
// with no such command passes unchanged.
func TestCLIHintsNameRunnerCommands(t *testing.T) {
	for hint, want := range map[string]string{
		"List queues with: SELECT name, paused FROM pgrun.queues ORDER BY name;":                          "runner queue list",
		"Check the id with: SELECT id, kind, status FROM pgrun.jobs ORDER BY id DESC LIMIT 20":            "runner job list",
		"List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20":           "runner workflow status ID",
		"List them with: SELECT name, cron, next_fire_at FROM pgrun.schedules":                            "runner schedule list",
		"Pass a host name as in SELECT DISTINCT host FROM pgrun.workers":                                  "runner worker list",
		"Define it first: SELECT pgrun.define_workflow(name, spec)":                                       "runner workflow define",
		"Start a new run: SELECT pgrun.start_run(workflow, input)":                                        "runner workflow start",
		"Wait for or cancel the job that holds the key: SELECT id FROM pgrun.jobs WHERE unique_key = ...": "runner job cancel ID",
		"Wait for or cancel the run that holds the key: SELECT id FROM pgrun.runs WHERE unique_key = ...": "runner workflow cancel ID",
	} {
		got := cliHint(hint)
		require.Contains(t, got, want, hint)
		require.NotContains(t, got, "SELECT", hint)
	}
	require.Equal(t, "Claim 1 to 10000 jobs per call.", cliHint("Claim 1 to 10000 jobs per call."))
}
