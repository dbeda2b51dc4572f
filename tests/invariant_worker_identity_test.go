package tests

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// identityKit is a database with two worker logins, A and B, each registered under a
// worker id of its own (w-a, w-b), and a job A holds: id, attempt and claim token.
type identityKit struct {
	*testkit.DB
	a, b        *pgxpool.Pool
	roleB       string
	id          int64
	attempt     int
	claim       string
	otherQueued int64
}

func newIdentityKit(t *testing.T) identityKit {
	t.Helper()
	db := testkit.Setup(t)
	k := identityKit{DB: db}
	_, k.a = testkit.NewRole(t, db, "pgrun_worker")
	k.roleB, k.b = testkit.NewRole(t, db, "pgrun_worker")
	testkit.Allowed(t, db, k.a, `select pgrun.worker_heartbeat('w-a', 'host-a', 1, array['ids'])`)
	testkit.Allowed(t, db, k.b, `select pgrun.worker_heartbeat('w-b', 'host-b', 2, array['ids'])`)
	testkit.ExecAll(t, db, `select pgrun.enqueue_job('noop', queue => 'ids') from generate_series(1, 2)`)
	require.NoError(t, k.a.QueryRow(db.Ctx, `select id, attempt, claim_id::text from pgrun.claim_jobs('ids', 'w-a', 1)`).
		Scan(&k.id, &k.attempt, &k.claim))
	require.NoError(t, db.Pool.QueryRow(db.Ctx, `select id from pgrun.jobs where status = 'queued'`).Scan(&k.otherQueued))
	return k
}

// One worker login cannot act for another: every call that acts under a worker id or
// on a claimed job is refused with 42501 when the id was registered by another login,
// even with the claim token in hand, and changes nothing. Each call works for the
// login that registered the id, so the check refuses the impostor, not the call.
func TestAWorkerLoginCannotActUnderAnothersWorkerID(t *testing.T) {
	k := newIdentityKit(t)
	before := testkit.Snap(t, k.Pool, k.id)
	var workerRow string
	require.NoError(t, k.Pool.QueryRow(k.Ctx, `select row_to_json(w)::text from pgrun.workers w where id = 'w-a'`).Scan(&workerRow))
	forged := []string{
		`select pgrun.complete_job($1, $2, '{"forged": 1}', 'w-a', $3::uuid)`,
		`select pgrun.complete_jobs(array[$1::bigint], array[$2::int], array['{"forged": 1}'::jsonb], 'w-a', array[$3::uuid])`,
		`select pgrun.fail_job($1, $2, '{"message": "forged", "class": "invalid_args"}', false, 'w-a', $3::uuid)`,
		`select pgrun.retry_later($1, $2, '1 hour', 'forged', 'w-a', $3::uuid)`,
		`select pgrun.requeue_job($1, $2, 'forged', 'w-a', $3::uuid)`,
		`select pgrun.defer_job($1, $2, '[]', 1.0, 'w-a', $3::uuid)`,
		`select pgrun.renew_leases('w-a', array[$1::bigint], '1 day', array[$3::uuid]) where $2::int is not null`,
		`select pgrun.beat(array[$1::bigint], 'w-a', array[$3::uuid]) where $2::int is not null`,
		`select pgrun.set_progress($1, 1, 2, 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.emit($1, 'forged', worker => 'w-a', claim_id => $3::uuid) where $2::int is not null`,
	}
	for _, sql := range forged {
		testkit.Denied(t, k.DB, k.b, sql, k.id, k.attempt, k.claim)
	}
	// The calls that take no job.
	for _, sql := range []string{
		`select pgrun.release_unheld('w-a')`,
		`select pgrun.worker_heartbeat('w-a', 'host-b', 2, array['ids'], state => 'stopped')`,
		`select pgrun.claim_jobs('ids', 'w-a', 1)`,
		`select pgrun.claim_job('ids', 'w-a')`,
		`select pgrun.queue_peers('w-a', array['ids'])`,
	} {
		testkit.Denied(t, k.DB, k.b, sql)
	}
	// Without naming a worker, or without the claim token, a worker login gets nothing.
	for _, sql := range []string{
		`select pgrun.complete_job($1, $2) where $3::uuid is not null`,
		`select pgrun.fail_job($1, $2, '{"message": "forged"}') where $3::uuid is not null`,
		`select pgrun.beat(array[$1::bigint]) where $2::int is not null and $3::uuid is not null`,
		`select pgrun.set_progress($1, 1, 2) where $2::int is not null and $3::uuid is not null`,
		`select pgrun.emit($1, 'forged') where $2::int is not null and $3::uuid is not null`,
		`select pgrun.beat(array[$1::bigint], 'w-b') where $2::int is not null and $3::uuid is not null`,
		`select pgrun.complete_job($1, $2, null, 'w-b') where $3::uuid is not null`,
	} {
		testkit.Denied(t, k.DB, k.b, sql, k.id, k.attempt, k.claim)
	}
	require.Equal(t, before, testkit.Snap(t, k.Pool, k.id), "A's job is as it was")
	var after string
	require.NoError(t, k.Pool.QueryRow(k.Ctx, `select row_to_json(w)::text from pgrun.workers w where id = 'w-a'`).Scan(&after))
	require.Equal(t, workerRow, after, "A's worker row is as it was")
	require.Equal(t, "queued", one[string](t, k.Ctx, k.Pool, `select status::text from pgrun.jobs where id = $1`, k.otherQueued),
		"B claimed nothing under A's name")

	// Under its own id, B reaches nothing of A's job: the reports match nothing.
	require.Zero(t, one[int](t, k.Ctx, k.b, `select count(*)::int from pgrun.beat(array[$1::bigint], 'w-b', array[$2::uuid])`, k.id, k.claim))
	require.False(t, one[bool](t, k.Ctx, k.b, `select pgrun.set_progress($1, 1, 2, 'w-b', $2::uuid)`, k.id, k.claim))
	require.Nil(t, testkit.NullID(t, k.b, `select pgrun.emit($1, 'x', worker => 'w-b', claim_id => $2::uuid)`, k.id, k.claim))
	require.False(t, one[bool](t, k.Ctx, k.b, `select pgrun.complete_job($1, $2, null, 'w-b', $3::uuid)`, k.id, k.attempt, k.claim))
	require.Nil(t, testkit.NullID(t, k.b, `select (pgrun.fail_job($1, $2, '{"message": "x"}', false, 'w-b', $3::uuid)).id`,
		k.id, k.attempt, k.claim))
	require.Empty(t, one[[]int64](t, k.Ctx, k.b, `select coalesce(array_agg(r), '{}') from pgrun.release_unheld('w-b') r`))
	require.Equal(t, before, testkit.Snap(t, k.Pool, k.id), "A's job is still as it was")

	// A itself does each of them.
	testkit.Allowed(t, k.DB, k.a, `select pgrun.queue_peers('w-a', array['ids'])`)
	require.Equal(t, 1, one[int](t, k.Ctx, k.a, `select count(*)::int from pgrun.beat(array[$1::bigint], 'w-a', array[$2::uuid])`, k.id, k.claim))
	require.True(t, one[bool](t, k.Ctx, k.a, `select pgrun.set_progress($1, 1, 2, 'w-a', $2::uuid)`, k.id, k.claim))
	require.NotNil(t, testkit.NullID(t, k.a, `select pgrun.emit($1, 'mine', worker => 'w-a', claim_id => $2::uuid)`, k.id, k.claim))
	require.Equal(t, 1, one[int](t, k.Ctx, k.a, `select count(*)::int from pgrun.renew_leases('w-a', array[$1::bigint], '1 day', array[$2::uuid])`,
		k.id, k.claim))
	require.True(t, one[bool](t, k.Ctx, k.a, `select pgrun.complete_job($1, $2, '{"ok": 1}', 'w-a', $3::uuid)`, k.id, k.attempt, k.claim))
	require.Equal(t, "succeeded", one[string](t, k.Ctx, k.Pool, `select status::text from pgrun.jobs where id = $1`, k.id))
	testkit.Allowed(t, k.DB, k.a, `select pgrun.worker_heartbeat('w-a', 'host-a', 1, array['ids'], state => 'stopped')`)
}

// A claim token is readable by its holder and administrators only: the column is
// refused to worker logins (the holder gets its token from the claim), and
// claim_token and active_jobs show it NULL to other worker and enqueuer logins. (An
// enqueuer may read the column itself, since the enqueue path returns whole rows;
// a token gives it nothing: only the login holding the claim may present it.)
func TestAClaimTokenIsReadableOnlyByItsHolder(t *testing.T) {
	k := newIdentityKit(t)
	_, enq := testkit.NewRole(t, k.DB, "pgrun_enqueuer")
	_, admin := testkit.NewRole(t, k.DB, "pgrun_admin")
	for _, p := range []*pgxpool.Pool{k.a, k.b} {
		testkit.Denied(t, k.DB, p, `select claim_id from pgrun.jobs`)
		testkit.Denied(t, k.DB, p, `select * from pgrun.jobs`)
		testkit.Allowed(t, k.DB, p, `select id, status, claimed_by, attempt from pgrun.jobs`)
	}
	token := `select coalesce(pgrun.claim_token($1)::text, '') `
	require.Equal(t, k.claim, one[string](t, k.Ctx, k.a, token, k.id), "the holder reads its token")
	require.Equal(t, k.claim, one[string](t, k.Ctx, admin, token, k.id), "an administrator reads it")
	require.Equal(t, k.claim, one[string](t, k.Ctx, admin, `select claim_id::text from pgrun.jobs where id = $1`, k.id))
	for _, p := range []*pgxpool.Pool{k.b, enq} {
		require.Empty(t, one[string](t, k.Ctx, p, token, k.id))
	}
	active := `select coalesce(claim_id::text, '') from pgrun.active_jobs where id = $1`
	require.Empty(t, one[string](t, k.Ctx, enq, active, k.id))
	require.Equal(t, k.claim, one[string](t, k.Ctx, admin, active, k.id))
}

// A worker id is registered once: the first login to heartbeat it owns it, and a
// second login's heartbeat under it is refused and changes nothing. A row from before
// ids were bound (login_role NULL) is adopted by the first login that uses it, so a
// runner holding jobs across the upgrade keeps reporting on them; after that it is
// that login's.
func TestAWorkerIDBelongsToTheLoginThatRegisteredIt(t *testing.T) {
	k := newIdentityKit(t)
	require.Equal(t, k.roleB, one[string](t, k.Ctx, k.Pool, `select login_role::text from pgrun.workers where id = 'w-b'`))
	testkit.Denied(t, k.DB, k.a, `select pgrun.worker_heartbeat('w-b', 'host-a', 1)`)
	require.Equal(t, "host-b", one[string](t, k.Ctx, k.Pool, `select host from pgrun.workers where id = 'w-b'`))

	// Upgrade: w-a's row loses its login, as rows registered before version 5 have none.
	testkit.ExecAll(t, k.DB, `update pgrun.workers set login_role = null where id = 'w-a'`)
	require.Equal(t, 1, one[int](t, k.Ctx, k.a, `select count(*)::int from pgrun.renew_leases('w-a', array[$1::bigint], null, array[$2::uuid])`,
		k.id, k.claim), "the first login to use it adopts it")
	testkit.Denied(t, k.DB, k.b, `select pgrun.renew_leases('w-a')`)
	require.True(t, one[bool](t, k.Ctx, k.a, `select pgrun.complete_job($1, $2, null, 'w-a', $3::uuid)`, k.id, k.attempt, k.claim))

	// An unregistered id is refused, not registered, by a claim.
	testkit.Denied(t, k.DB, k.b, `select pgrun.claim_jobs('ids', 'w-new', 1)`)
	require.Zero(t, one[int](t, k.Ctx, k.Pool, `select count(*)::int from pgrun.workers where id = 'w-new'`))
}

// forget_workers keeps a silent worker that still holds a running job: its id, and
// the login it is bound to, stay while a report under it may still come.
func TestForgetWorkersKeepsAWorkerHoldingAJob(t *testing.T) {
	k := newIdentityKit(t)
	testkit.ExecAll(t, k.DB, `update pgrun.workers set last_seen = now() - interval '2 days'`)
	require.Equal(t, 1, one[int](t, k.Ctx, k.Pool, `select pgrun.forget_workers()`), "w-b, which holds nothing")
	require.Equal(t, []string{"w-a"}, one[[]string](t, k.Ctx, k.Pool, `select array_agg(id) from pgrun.workers`))
}

// In the tenant mode a worker login mapped to a tenant claims, reads and so reports
// on that tenant's jobs only; an unmapped worker login serves every tenant.
func TestATenantsWorkerClaimsOnlyItsTenantsJobs(t *testing.T) {
	k := newTenantKit(t)
	workerRole, acmeWorker := testkit.NewRole(t, k.DB, "pgrun_worker")
	_, fleet := testkit.NewRole(t, k.DB, "pgrun_worker")
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.grant_tenant($1, 'acme')`, workerRole)
	// globex's jobs first in the queue's order, then acme's.
	testkit.Allowed(t, k.DB, k.globex, `select pgrun.enqueue_job('noop', queue => 'shared', priority => 0) from generate_series(1, 3)`)
	testkit.Allowed(t, k.DB, k.acme, `select pgrun.enqueue_job('noop', queue => 'shared', priority => 1) from generate_series(1, 2)`)
	testkit.Allowed(t, k.DB, acmeWorker, `select pgrun.worker_heartbeat('acme-w', 'h', 1, array['shared'])`)
	testkit.Allowed(t, k.DB, fleet, `select pgrun.worker_heartbeat('fleet-w', 'h', 2, array['shared'])`)

	got := one[[]string](t, k.Ctx, acmeWorker, `select array_agg(tenant) from pgrun.claim_jobs('shared', 'acme-w', 10)`)
	require.Equal(t, []string{"acme", "acme"}, got, "acme's worker claims acme's jobs only")
	require.Equal(t, []string{"acme"}, one[[]string](t, k.Ctx, acmeWorker, `select array_agg(distinct tenant) from pgrun.jobs`),
		"and reads acme's only")
	got = one[[]string](t, k.Ctx, fleet, `select array_agg(tenant) from pgrun.claim_jobs('shared', 'fleet-w', 10)`)
	require.Equal(t, []string{"globex", "globex", "globex"}, got, "an unmapped worker serves every tenant")

	// Another tenant's worker login reaches nothing of acme's claims, under acme's
	// worker id or its own.
	globexRole, globexWorker := testkit.NewRole(t, k.DB, "pgrun_worker")
	testkit.Allowed(t, k.DB, k.admin, `select pgrun.grant_tenant($1, 'globex')`, globexRole)
	testkit.Allowed(t, k.DB, globexWorker, `select pgrun.worker_heartbeat('globex-w', 'h', 3, array['shared'])`)
	var id int64
	var attempt int
	var claim string
	require.NoError(t, k.Pool.QueryRow(k.Ctx, `select id, attempt, claim_id::text from pgrun.jobs
		where claimed_by = 'acme-w' order by id limit 1`).Scan(&id, &attempt, &claim))
	before := testkit.Snap(t, k.Pool, id)
	for _, sql := range []string{
		`select pgrun.complete_job($1, $2, '{"forged": 1}', 'acme-w', $3::uuid)`,
		`select pgrun.fail_job($1, $2, '{"message": "forged", "class": "invalid_args"}', false, 'acme-w', $3::uuid)`,
		`select pgrun.defer_job($1, $2, '[{"kind": "noop"}]', 1.0, 'acme-w', $3::uuid)`,
		`select pgrun.emit($1, 'forged', worker => 'acme-w', claim_id => $3::uuid) where $2::int is not null`,
	} {
		testkit.Denied(t, k.DB, globexWorker, sql, id, attempt, claim)
	}
	require.False(t, one[bool](t, k.Ctx, globexWorker, `select pgrun.complete_job($1, $2, null, 'globex-w', $3::uuid)`, id, attempt, claim))
	require.Equal(t, before, testkit.Snap(t, k.Pool, id), "acme's job is as it was")
}
