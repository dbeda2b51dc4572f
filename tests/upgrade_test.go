package tests

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The database records the version of its SQL API, and Migrate refuses to install an
// older function set over a newer one, naming both versions, changing nothing.
func TestMigrateRefusesAnOlderFunctionSet(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	v, since, err := pgrun.DatabaseAPI(b.Ctx, b.Pool)
	require.NoError(t, err)
	require.Equal(t, pgrun.APIVersion(), v)
	require.Equal(t, pgrun.APICompatibleSince(), since)

	newer := pgrun.APIVersion() + 1
	_, err = b.Pool.Exec(b.Ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(newer)+`'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.function_ledger`) // as if this build's set were not applied
	require.NoError(t, err)
	before := functionsXmin(t, b)
	err = pgrun.Migrate(b.Ctx, b.Pool)
	require.ErrorIs(t, err, pgrun.ErrNewerSchema)
	require.Contains(t, err.Error(), "version "+strconv.Itoa(newer))
	require.Contains(t, err.Error(), "has "+strconv.Itoa(pgrun.APIVersion()))
	require.Equal(t, before, functionsXmin(t, b), "a refused Migrate changed functions")
}

// A function that is no longer part of the set is dropped when the set is applied.
func TestMigrateDropsFunctionsRemovedFromTheSet(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	_, err := b.Pool.Exec(b.Ctx, `create function pgrun.retired_long_ago(x int) returns int language sql as 'select x'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))
	var gone bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select to_regprocedure('pgrun.retired_long_ago(integer)') is null`).Scan(&gone))
	require.True(t, gone, "a function removed from the set survived the upgrade")
	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
}

// Re-applying the function set while runners burn down jobs and a long transaction
// holds a row of pgrun.jobs: unchanged triggers and views are left alone, so the
// re-apply takes no lock that waits for the long transaction, claims keep flowing,
// and no job is lost. A trigger that did change waits for its lock only 500 ms at a
// time (lock_timeout, then a retry), so claims flow between the tries, and it is
// installed once the long transaction ends.
func TestReapplyNeverStallsClaims(t *testing.T) {
	b := testkit.Setup(t)
	const jobs = 3000
	specs := make([]pgrun.JobSpec, jobs)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "upgrade"}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	held, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("held"))
	require.NoError(t, err)

	// The long transaction: it has written a row of pgrun.jobs and stays open.
	long, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer long.Rollback(context.Background()) //nolint:errcheck
	_, err = long.Exec(b.Ctx, `update pgrun.jobs set priority = 1 where id = $1`, held.ID)
	require.NoError(t, err)

	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"upgrade": {Workers: 10}}, MaxClaim: 20})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 30*time.Second, "the runner completes jobs", func() bool { return r.Stats().Completed > 0 })

	// An unchanged set, applied again (the ledger forgotten): it finishes although
	// the long transaction is still open.
	_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	require.NoError(t, pgrun.Migrate(b.Ctx, b.Pool))

	// A changed trigger: Migrate keeps trying while the long transaction is open, and
	// claims go on meanwhile.
	_, err = b.Pool.Exec(b.Ctx, `comment on trigger jobs_dispatch on pgrun.jobs is 'changed'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() { migrated <- pgrun.Migrate(b.Ctx, b.Pool) }()
	during := r.Stats().Completed
	testkit.Eventually(t, 30*time.Second, "claims flow while Migrate waits for its lock", func() bool {
		return r.Stats().Completed >= during+200 || r.Stats().Completed == jobs
	})
	select {
	case err := <-migrated:
		t.Fatalf("Migrate re-created a trigger while a transaction held a row of pgrun.jobs (err %v)", err)
	default:
	}
	require.NoError(t, long.Rollback(b.Ctx))
	select {
	case err := <-migrated:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Migrate did not finish after the long transaction ended")
	}
	var comment string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select obj_description(t.oid, 'pg_trigger') from pg_trigger t
		where t.tgrelid = 'pgrun.jobs'::regclass and t.tgname = 'jobs_dispatch'`).Scan(&comment))
	require.NotEqual(t, "changed", comment, "the changed trigger was not re-created")

	testkit.Eventually(t, time.Minute, "every job completes", func() bool { return r.Stats().Completed == jobs })
	var succeeded int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'upgrade' and status = 'succeeded'`).Scan(&succeeded))
	require.Equal(t, jobs, succeeded, "jobs were lost across the re-apply")
}

// A runner whose build expects a newer SQL API than the database has waits for
// `migrate up`, saying so; one the database no longer serves exits with an error.
func TestRunnerChecksTheAPIVersion(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `create or replace function pgrun.api_compatible_since() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion()+1)+`'`)
	require.NoError(t, err)
	r, err := runner.New(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"q": {Workers: 1}},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.True(t, errors.Is(err, runner.ErrAPITooOld), "Run returned %v", err)

	_, err = b.Pool.Exec(b.Ctx, `create or replace function pgrun.api_compatible_since() returns integer
		language sql immutable as 'select 0'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion()-1)+`'`)
	require.NoError(t, err)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("q"))
	require.NoError(t, err)
	var logs testkit.Buffer
	r = testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"q": {Workers: 1}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testkit.StartRunner(t, r)
	// It says once that it waits for `migrate up`, and claims nothing meanwhile.
	testkit.Eventually(t, 30*time.Second, "the runner says it waits for migrate up", func() bool {
		return strings.Contains(logs.String(), "waiting for `runner migrate up`")
	})
	require.Zero(t, r.Stats().ClaimCalls)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, job.ID))
	_, err = b.Pool.Exec(b.Ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion())+`'`)
	require.NoError(t, err)
	testkit.Eventually(t, 30*time.Second, "the job runs once the database is current", func() bool {
		return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded
	})
	require.Equal(t, 1, strings.Count(logs.String(), "waiting for `runner migrate up`"), "the wait was logged more than once")
}

// Every retired signature is recorded in sql/functions/02_retired.sql with the API
// version that retired it, and none of them exists after Migrate.
func TestRetiredSignaturesAreRecordedAndGone(t *testing.T) {
	b := testkit.Setup(t)
	src, err := os.ReadFile("../sql/functions/02_retired.sql")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^drop function if exists (pgrun\.[a-z_]+\([^)]*\)); -- retired in version (\d+)$`)
	drops := regexp.MustCompile(`(?m)^drop function`).FindAllIndex(src, -1)
	found := line.FindAllSubmatch(src, -1)
	require.NotEmpty(t, found)
	require.Len(t, found, len(drops), "a drop in 02_retired.sql without its version")
	for _, m := range found {
		v, _ := strconv.Atoi(string(m[2]))
		require.LessOrEqual(t, v, pgrun.APIVersion(), "%s retired in a version after this one", m[1])
		var gone bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select to_regprocedure($1) is null`, string(m[1])).Scan(&gone))
		require.True(t, gone, "%s survived Migrate", m[1])
	}
}
