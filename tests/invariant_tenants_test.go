package tests

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// tenantKit is a database with the tenant mode on and two enqueuer roles mapped to
// two tenants.
type tenantKit struct {
	*testkit.DB
	admin, acme, globex *pgxpool.Pool
	acmeRole            string
}

func newTenantKit(t *testing.T) tenantKit {
	t.Helper()
	b := testkit.Setup(t)
	k := tenantKit{DB: b}
	_, k.admin = testkit.NewRole(t, b, "pgrun_admin")
	var globexRole string
	k.acmeRole, k.acme = testkit.NewRole(t, b, "pgrun_enqueuer")
	globexRole, k.globex = testkit.NewRole(t, b, "pgrun_enqueuer")
	testkit.Allowed(t, b, k.admin, `select pgrun.grant_tenant($1, 'acme')`, k.acmeRole)
	testkit.Allowed(t, b, k.admin, `select pgrun.grant_tenant($1, 'globex')`, globexRole)
	testkit.Allowed(t, b, k.admin, `select pgrun.set_tenant_mode(true)`)
	return k
}

// one runs a query returning one value as p.
func one[T any](t *testing.T, ctx context.Context, p *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, p.QueryRow(ctx, sql, args...).Scan(&v), sql)
	return v
}

// notFound asserts that sql fails with P0002 (another tenant's row does not exist for
// the caller) and changed nothing.
func notFound(t *testing.T, b *testkit.DB, p *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	testkit.Refused(t, b, p, "P0002", sql, args...)
}

// With the tenant mode on, an enqueuer sees only its tenant's jobs, events and
// views, and its timeline, cancel and unique-key replace reach nothing of another's.
func TestTenantEnqueuerSeesOnlyItsOwnJobs(t *testing.T) {
	k := newTenantKit(t)
	ctx := k.Ctx
	mine, err := pgrun.Enqueue(ctx, k.acme, "noop", map[string]string{"secret": "acme-payload"},
		pgrun.Queue("tenants"), pgrun.UniqueKey("k"))
	require.NoError(t, err)
	require.NotNil(t, mine.Tenant)
	require.Equal(t, "acme", *mine.Tenant, "the tenant comes from the role")
	theirs, err := pgrun.Enqueue(ctx, k.globex, "noop", map[string]string{"secret": "globex-payload"},
		pgrun.Queue("tenants"), pgrun.UniqueKey("k"))
	require.NoError(t, err)
	require.NotEqual(t, mine.ID, theirs.ID, "unique keys are per tenant")
	require.Equal(t, "globex", *theirs.Tenant)

	require.Equal(t, 1, one[int](t, ctx, k.acme, `select count(*) from pgrun.jobs`))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.jobs where id = $1`, mine.ID))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.jobs where args::text like '%acme%'`))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.job_events where job_id = $1`, mine.ID))
	notFound(t, k.DB, k.globex, `select * from pgrun.job_timeline($1)`, mine.ID)
	require.Positive(t, one[int](t, ctx, k.acme, `select count(*) from pgrun.job_timeline($1)`, mine.ID))

	// Replacing by unique key touches the caller's own holder only.
	testkit.Allowed(t, k.DB, k.globex, `select pgrun.enqueue_job('noop', '{"secret": "overwritten"}', queue => 'tenants', unique_key => 'k', on_conflict => 'replace')`)
	require.Equal(t, `{"secret": "acme-payload"}`, one[string](t, ctx, k.Pool, `select args::text from pgrun.jobs where id = $1`, mine.ID))
	require.Equal(t, `{"secret": "overwritten"}`, one[string](t, ctx, k.Pool, `select args::text from pgrun.jobs where id = $1`, theirs.ID))
	var replaced *int64
	require.NoError(t, k.globex.QueryRow(ctx, `select (pgrun.replace_queued($1, 'k', '{}', 0, null)).id`, mine.ID).Scan(&replaced))
	require.Nil(t, replaced, "replace_queued called directly on another tenant's job")

	// Cancel: another tenant's job does not exist; the caller's own can be cancelled.
	notFound(t, k.DB, k.globex, `select pgrun.cancel_job($1)`, mine.ID)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, k.DB, mine.ID))
	testkit.Allowed(t, k.DB, k.acme, `select pgrun.cancel_job($1)`, mine.ID)
	require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, k.DB, mine.ID))

	// Workers and administrators see every tenant.
	require.Equal(t, 2, one[int](t, ctx, k.admin, `select count(*) from pgrun.jobs`))
	_, worker := testkit.NewRole(t, k.DB, "pgrun_worker")
	testkit.Allowed(t, k.DB, worker, `select pgrun.worker_heartbeat('w1', 'h', 1, array['tenants'])`)
	require.Equal(t, 2, one[int](t, ctx, worker, `select count(*) from pgrun.jobs`))
	require.Len(t, testkit.ClaimN(t, worker, "tenants", "w1", 1, "30 seconds"), 1) // globex's job
	require.Zero(t, one[int](t, ctx, k.acme, `select count(*) from pgrun.active_jobs`), "views read with the reader's rights")
	require.Equal(t, 1, one[int](t, ctx, k.globex, `select count(*) from pgrun.active_jobs`))
}

// The tenant comes from the role, never from the caller: naming one is refused, a
// role without one cannot enqueue, and a role mapped to several picks among them only.
func TestTenantComesFromTheRole(t *testing.T) {
	k := newTenantKit(t)
	testkit.Denied(t, k.DB, k.acme, `insert into pgrun.jobs (kind, tenant) values ('noop', 'globex')`)
	testkit.Denied(t, k.DB, k.acme, `select pgrun.grant_tenant(current_user, 'globex')`)
	testkit.Denied(t, k.DB, k.acme, `select pgrun.set_tenant_mode(false)`)
	testkit.Denied(t, k.DB, k.acme, `insert into pgrun.tenant_roles values (current_user, 'globex')`)

	_, nobody := testkit.NewRole(t, k.DB, "pgrun_enqueuer")
	testkit.Denied(t, k.DB, nobody, `select pgrun.enqueue_job('noop')`)
	testkit.Denied(t, k.DB, nobody, `insert into pgrun.jobs (kind) values ('noop')`)
	require.Zero(t, one[int](t, k.Ctx, nobody, `select count(*) from pgrun.jobs`))

	multiRole, multi := testkit.NewRole(t, k.DB, "pgrun_enqueuer")
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.grant_tenant($1, 'acme')`, multiRole)
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.grant_tenant($1, 'globex')`, multiRole)
	testkit.Denied(t, k.DB, multi, `select pgrun.enqueue_job('noop')`)
	conn, err := multi.Acquire(k.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(k.Ctx, `set pgrun.tenant = 'initech'`)
	require.NoError(t, err)
	_, err = conn.Exec(k.Ctx, `select pgrun.enqueue_job('noop')`)
	require.Equal(t, "42501", testkit.SQLState(err), "a tenant the role is not mapped to: %v", err)
	_, err = conn.Exec(k.Ctx, `set pgrun.tenant = 'globex'`)
	require.NoError(t, err)
	var tenant string
	require.NoError(t, conn.QueryRow(k.Ctx, `select tenant from pgrun.enqueue_job('noop')`).Scan(&tenant))
	require.Equal(t, "globex", tenant)

	// An administrator without a tenant is not scoped; a revoked mapping ends access.
	require.Equal(t, 1, one[int](t, k.Ctx, k.admin, `select pgrun.revoke_tenant($1)`, k.acmeRole))
	testkit.Denied(t, k.DB, k.acme, `select pgrun.enqueue_job('noop')`)
}

// Children belong to their parent's tenant, whoever inserts them; runs and their
// nodes to the starter's; another tenant's run takes no input and is not listed.
func TestTenantRunsAndChildren(t *testing.T) {
	k := newTenantKit(t)
	ctx := k.Ctx
	testkit.DefineWorkflow(t, k.DB, "tenant_wf", `{"nodes": [{"name": "approve", "input": true},
		{"name": "go", "kind": "noop", "deps": ["approve"]}]}`)
	runID := one[int64](t, ctx, k.acme, `select id from pgrun.start_run('tenant_wf', unique_key => 'r')`)
	require.NotEqual(t, runID, one[int64](t, ctx, k.globex, `select id from pgrun.start_run('tenant_wf', unique_key => 'r')`),
		"run unique keys are per tenant")
	require.Equal(t, "acme", one[string](t, ctx, k.Pool, `select tenant from pgrun.runs where id = $1`, runID))
	require.Zero(t, one[int](t, ctx, k.Pool, `select count(*) from pgrun.jobs where run_id = $1 and tenant is distinct from 'acme'`, runID))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.run_status where run_id = $1`, runID))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.runs where id = $1`, runID))
	notFound(t, k.DB, k.globex, `select pgrun.submit_input($1, 'approve', '{"ok": true}')`, runID)
	notFound(t, k.DB, k.globex, `select pgrun.cancel_run($1)`, runID)
	require.True(t, one[bool](t, ctx, k.acme, `select pgrun.submit_input($1, 'approve', '{"ok": true}')`, runID))
	require.Equal(t, 1, one[int](t, ctx, k.acme, `select count(*) from pgrun.run_inputs where run_id = $1`, runID))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.run_inputs where run_id = $1`, runID))

	// A worker (no tenant) defers an acme job to children: they are acme's.
	_, worker := testkit.NewRole(t, k.DB, "pgrun_worker")
	testkit.Allowed(t, k.DB, worker, `select pgrun.worker_heartbeat('w1', 'h', 1, array['tenant_fan'])`)
	parent, err := pgrun.Enqueue(ctx, k.acme, "fan", nil, pgrun.Queue("tenant_fan"))
	require.NoError(t, err)
	c := testkit.ClaimN(t, worker, "tenant_fan", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	require.Equal(t, parent.ID, c[0].ID)
	testkit.Allowed(t, k.DB, worker, `select pgrun.defer_job($1, $2, '[{"kind": "noop"}, {"kind": "noop", "unique_key": "child"}]',
		worker => 'w1', claim_id => pgrun.claim_token($1))`, c[0].ID, c[0].Attempt)
	require.Equal(t, 2, one[int](t, ctx, k.acme, `select count(*) from pgrun.jobs where parent_id = $1 and tenant = 'acme'`, parent.ID))
	require.Zero(t, one[int](t, ctx, k.globex, `select count(*) from pgrun.jobs where parent_id = $1`, parent.ID))
}

// With the mode off (the default), roles alone decide: every enqueuer sees every job,
// and only administrators cancel.
func TestTenantModeOff(t *testing.T) {
	k := newTenantKit(t)
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.set_tenant_mode(false)`)
	require.False(t, one[bool](t, k.Ctx, k.Pool, `select pgrun.tenant_mode()`))
	j, err := pgrun.Enqueue(k.Ctx, k.acme, "noop", nil)
	require.NoError(t, err)
	require.Nil(t, j.Tenant, "no tenant with the mode off")
	require.Equal(t, 1, one[int](t, k.Ctx, k.globex, `select count(*) from pgrun.jobs where id = $1`, j.ID))
	testkit.Denied(t, k.DB, k.globex, `select pgrun.cancel_job($1)`, j.ID)
	testkit.Denied(t, k.DB, k.acme, `insert into pgrun.jobs (kind, tenant) values ('noop', 'acme')`)
	testkit.Denied(t, k.DB, k.acme, `select pgrun.cancel_job($1)`, j.ID)
	require.Zero(t, one[int](t, k.Ctx, k.Pool, `select count(*) from pg_trigger where tgname = 'jobs_tenant'`),
		"the enqueue path pays nothing for the mode when it is off")
}
