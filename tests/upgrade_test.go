package tests

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// The database records the version of its SQL API, and Migrate refuses to install an
// older function set over a newer one, naming both versions, changing nothing.
func TestMigrateRefusesAnOlderFunctionSet(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.ctx, b.pool))
	v, since, err := pgrun.DatabaseAPI(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, pgrun.APIVersion(), v)
	require.Equal(t, pgrun.APICompatibleSince(), since)

	newer := pgrun.APIVersion() + 1
	_, err = b.pool.Exec(b.ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(newer)+`'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `delete from pgrun.function_ledger`) // as if this build's set were not applied
	require.NoError(t, err)
	before := functionsXmin(t, b)
	err = pgrun.Migrate(b.ctx, b.pool)
	require.ErrorIs(t, err, pgrun.ErrNewerSchema)
	require.Contains(t, err.Error(), "version "+strconv.Itoa(newer))
	require.Contains(t, err.Error(), "has "+strconv.Itoa(pgrun.APIVersion()))
	require.Equal(t, before, functionsXmin(t, b), "a refused Migrate changed functions")
}

// A function that is no longer part of the set is dropped when the set is applied.
func TestMigrateDropsFunctionsRemovedFromTheSet(t *testing.T) {
	b := emptyDB(t)
	require.NoError(t, pgrun.Migrate(b.ctx, b.pool))
	_, err := b.pool.Exec(b.ctx, `create function pgrun.retired_long_ago(x int) returns int language sql as 'select x'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	require.NoError(t, pgrun.Migrate(b.ctx, b.pool))
	var gone bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `select to_regprocedure('pgrun.retired_long_ago(integer)') is null`).Scan(&gone))
	require.True(t, gone, "a function removed from the set survived the upgrade")
	_, err = pgrun.Enqueue(b.ctx, b.pool, "noop", nil)
	require.NoError(t, err)
}

// Re-applying the function set while runners burn down jobs and a long transaction
// holds a row of pgrun.jobs: unchanged triggers and views are left alone, so the
// re-apply takes no lock that waits for the long transaction, claims keep flowing,
// and no job is lost. A trigger that did change waits for its lock only 500 ms at a
// time (lock_timeout, then a retry), so claims flow between the tries, and it is
// installed once the long transaction ends.
func TestReapplyNeverStallsClaims(t *testing.T) {
	b := setup(t)
	const jobs = 3000
	specs := make([]pgrun.JobSpec, jobs)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "upgrade"}
	}
	_, err := pgrun.EnqueueMany(b.ctx, b.pool, specs)
	require.NoError(t, err)
	held, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.Queue("held"))
	require.NoError(t, err)

	// The long transaction: it has written a row of pgrun.jobs and stays open.
	long, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer long.Rollback(context.Background()) //nolint:errcheck
	_, err = long.Exec(b.ctx, `update pgrun.jobs set priority = 1 where id = $1`, held.ID)
	require.NoError(t, err)

	r := newRunner(b.pool, runner.Config{Queues: map[string]runner.QueueConfig{"upgrade": {Workers: 10}}, MaxClaim: 20})
	startRunner(t, r)
	eventually(t, 30*time.Second, "the runner completes jobs", func() bool { return r.Stats().Completed > 0 })

	// An unchanged set, applied again (the ledger forgotten): it finishes although
	// the long transaction is still open.
	_, err = b.pool.Exec(b.ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	require.NoError(t, pgrun.Migrate(b.ctx, b.pool))

	// A changed trigger: Migrate keeps trying while the long transaction is open, and
	// claims go on meanwhile.
	_, err = b.pool.Exec(b.ctx, `comment on trigger jobs_dispatch on pgrun.jobs is 'changed'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `delete from pgrun.function_ledger`)
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() { migrated <- pgrun.Migrate(b.ctx, b.pool) }()
	during := r.Stats().Completed
	eventually(t, 30*time.Second, "claims flow while Migrate waits for its lock", func() bool {
		return r.Stats().Completed >= during+200 || r.Stats().Completed == jobs
	})
	select {
	case err := <-migrated:
		t.Fatalf("Migrate re-created a trigger while a transaction held a row of pgrun.jobs (err %v)", err)
	default:
	}
	require.NoError(t, long.Rollback(b.ctx))
	select {
	case err := <-migrated:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Migrate did not finish after the long transaction ended")
	}
	var comment string
	require.NoError(t, b.pool.QueryRow(b.ctx, `select obj_description(t.oid, 'pg_trigger') from pg_trigger t
		where t.tgrelid = 'pgrun.jobs'::regclass and t.tgname = 'jobs_dispatch'`).Scan(&comment))
	require.NotEqual(t, "changed", comment, "the changed trigger was not re-created")

	eventually(t, time.Minute, "every job completes", func() bool { return r.Stats().Completed == jobs })
	var succeeded int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs where queue = 'upgrade' and status = 'succeeded'`).Scan(&succeeded))
	require.Equal(t, jobs, succeeded, "jobs were lost across the re-apply")
}

// A runner whose build expects a newer SQL API than the database has waits for
// `migrate up`, saying so; one the database no longer serves exits with an error.
func TestRunnerChecksTheAPIVersion(t *testing.T) {
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `create or replace function pgrun.api_compatible_since() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion()+1)+`'`)
	require.NoError(t, err)
	r, err := runner.New(b.pool, runner.Config{Queues: map[string]runner.QueueConfig{"q": {Workers: 1}},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.True(t, errors.Is(err, runner.ErrAPITooOld), "Run returned %v", err)

	_, err = b.pool.Exec(b.ctx, `create or replace function pgrun.api_compatible_since() returns integer
		language sql immutable as 'select 0'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion()-1)+`'`)
	require.NoError(t, err)
	job, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.Queue("q"))
	require.NoError(t, err)
	var logs lockedBuffer
	r = newRunner(b.pool, runner.Config{Queues: map[string]runner.QueueConfig{"q": {Workers: 1}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	startRunner(t, r)
	// It says once that it waits for `migrate up`, and claims nothing meanwhile.
	eventually(t, 30*time.Second, "the runner says it waits for migrate up", func() bool {
		return strings.Contains(logs.String(), "waiting for `runner migrate up`")
	})
	require.Zero(t, r.Stats().ClaimCalls)
	require.Equal(t, pgrun.StatusQueued, jobStatus(t, b, job.ID))
	_, err = b.pool.Exec(b.ctx, `create or replace function pgrun.api_version() returns integer
		language sql immutable as 'select `+strconv.Itoa(pgrun.APIVersion())+`'`)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the job runs once the database is current", func() bool {
		return jobStatus(t, b, job.ID) == pgrun.StatusSucceeded
	})
	require.Equal(t, 1, strings.Count(logs.String(), "waiting for `runner migrate up`"), "the wait was logged more than once")
}

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every retired signature is recorded in sql/functions/02_retired.sql with the API
// version that retired it, and none of them exists after Migrate.
func TestRetiredSignaturesAreRecordedAndGone(t *testing.T) {
	b := setup(t)
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
		require.NoError(t, b.pool.QueryRow(b.ctx, `select to_regprocedure($1) is null`, string(m[1])).Scan(&gone))
		require.True(t, gone, "%s survived Migrate", m[1])
	}
}
