package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// `runner migrate sql`, applied with psql to an empty database, installs a working
// engine: jobs enqueue, claim and complete through SQL, the roles exist with their
// grants, and a later Migrate of the same build changes nothing.
func TestMigrateSQLInstallsAWorkingEngine(t *testing.T) {
	b := emptyDB(t)
	script, err := exec.Command(runnerBin, "migrate", "sql").Output()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "pgrun.sql")
	require.NoError(t, os.WriteFile(file, script, 0o600))
	out, err := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file, b.URL).CombinedOutput()
	require.NoError(t, err, "psql: %s", out)

	var done int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `
		with e as (select pgrun.enqueue_job('noop', queue => 'sqlinstall')),
		     c as (select id, attempt from pgrun.claim_jobs('sqlinstall', 'psql-worker', 1) where exists (select 1 from e))
		select count(*) from pgrun.complete_jobs((select array_agg(id) from c), (select array_agg(attempt) from c), null, 'psql-worker')`).Scan(&done))
	require.Equal(t, 1, done)
	var roles int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_roles
		where rolname in ('pgrun_enqueuer', 'pgrun_worker', 'pgrun_admin')
		  and has_function_privilege(rolname, 'pgrun.api_version()', 'execute')`).Scan(&roles))
	require.Equal(t, 3, roles)

	v, dirty, err := pgrun.SchemaVersion(b.Ctx, b.Pool)
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, pgrun.LatestVersion(), v)
	before := functionsXmin(t, b)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	require.Equal(t, before, functionsXmin(t, b), "Migrate after the script re-applied the function set")

	// On an installed database the script refuses, changing nothing.
	out, err = exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file, b.URL).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "schema pgrun exists already")
	require.Equal(t, before, functionsXmin(t, b))
}

// `runner migrate down` drops every job, so it asks first; without a terminal to ask
// on it refuses unless --yes is given.
func TestMigrateDownAsksFirst(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	cmd := exec.Command(runnerBin, "migrate", "down", "--database-url", b.URL)
	cmd.Stdin = strings.NewReader("yes\n") // not a terminal: no prompt is trusted
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "--yes")
	require.Equal(t, 1, testkit.CountStatus(t, b, pgrun.StatusQueued), "a refused migrate down changed something")

	out, err = exec.Command(runnerBin, "migrate", "down", "--yes", "--database-url", b.URL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var exists bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select exists (select 1 from pg_namespace where nspname = 'pgrun')`).Scan(&exists))
	require.False(t, exists)
}
