package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/peterldowns/pgtestdb"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// emptyDB is a fresh database without the schema.
func emptyDB(t *testing.T) *testkit.DB {
	t.Helper()
	t.Parallel()
	url := pgtestdb.Custom(t, testdb.Config(t), pgtestdb.NoopMigrator{}).URL()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &testkit.DB{Ctx: ctx, Pool: testdb.PoolFor(t, url), URL: url}
}

// functionsXmin identifies the current version of every pgrun function: a
// re-created function gets a new xmin.
func functionsXmin(t *testing.T, b *testkit.DB) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select string_agg(xmin::text, ',' order by oid)
		from pg_proc where pronamespace = 'pgrun'::regnamespace`).Scan(&s))
	return s
}

func TestMigrateTwiceChangesNothing(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	v, dirty, err := pgrun.SchemaVersion(b.Ctx, b.Pool)
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, pgrun.LatestVersion(), v)
	before := functionsXmin(t, b)
	require.NotEmpty(t, before)

	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	require.Equal(t, before, functionsXmin(t, b), "a second Migrate re-created functions")
	var ledger int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.function_ledger`).Scan(&ledger))
	require.Equal(t, 1, ledger)
}

func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	b := emptyDB(t)
	var g errgroup.Group
	for range 4 {
		g.Go(func() error { return pgrun.Migrate(b.Ctx, b.Pool) })
	}
	require.NoError(t, g.Wait())
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
}

func TestMigrateDownRemovesTheSchema(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	require.NoError(t, pgrun.MigrateDown(b.Ctx, b.Pool))
	var exists bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select exists (select 1 from pg_namespace where nspname = 'pgrun')`).Scan(&exists))
	require.False(t, exists)
	v, _, err := pgrun.SchemaVersion(b.Ctx, b.Pool)
	require.NoError(t, err)
	require.Zero(t, v)
	// and back up again
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
}

func TestRunnerStartedBeforeTheSchemaWaitsForIt(t *testing.T) {
	b := emptyDB(t)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.StartRunner(t, r)
	// The runner is up and waiting; now install the schema and enqueue.
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"late": true})
	require.NoError(t, err)
	testkit.Eventually(t, 15*time.Second, "the waiting runner ran the job", func() bool {
		return testkit.JobStatus(t, b, j.ID) == pgrun.StatusSucceeded
	})
}

// A runner started before `migrate up` says once why it waits, and starts working
// once the schema is there.
func TestRunnerWaitingForTheSchemaSaysWhy(t *testing.T) {
	b := emptyDB(t)
	p := startWorker(t, b, "--queues", "default=2")
	testkit.Eventually(t, 20*time.Second, "the runner says why it waits", func() bool {
		return strings.Contains(p.Output(), "run `runner migrate up`")
	})
	require.Equal(t, 1, strings.Count(p.Output(), "waiting for schema"), "said once")
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]int{"n": 1})
	require.NoError(t, err)
	testkit.Eventually(t, 20*time.Second, "the job ran", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded })
}
