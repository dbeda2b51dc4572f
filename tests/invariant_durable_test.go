package tests

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// durableClaim claims one job of queue for worker, as the engine's owner, and returns
// its id and claim token.
func durableClaim(t *testing.T, b *testkit.DB, queue, worker string) (int64, string) {
	t.Helper()
	var id int64
	var claim string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, claim_id::text from pgrun.claim_jobs($1, $2, 1)`, queue, worker).Scan(&id, &claim))
	return id, claim
}

// A step is recorded only under the job's current claim: once the lease was lost and
// the job claimed again, the old claim's step_put records nothing and says 'stale',
// and its step_get reads nothing; the new claim records.
func TestInvariantDurableStaleClaimCannotRecordAStep(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('d', queue => 'dur')`)
	id, old := durableClaim(t, b, "dur", "w1")
	require.Equal(t, "done", one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'a', 0, '1', 'w1', $2::uuid)`, id, old))
	// The lease runs out and the reaper puts the job back; another worker claims it.
	testkit.ExecAll(t, b, `update pgrun.jobs set lease_expires_at = now() - interval '1 minute'`,
		`select pgrun.reap_expired_leases()`)
	_, fresh := durableClaim(t, b, "dur", "w2")
	require.NotEqual(t, old, fresh)
	require.Equal(t, "stale", one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'b', 1, '2', 'w1', $2::uuid)`, id, old))
	require.Equal(t, "stale", one[string](t, b.Ctx, b.Pool, `select status from pgrun.step_get($1, 'a', 0, 'w1', $2::uuid)`, id, old))
	require.Equal(t, "stale", one[string](t, b.Ctx, b.Pool, `select pgrun.sleep_job($1, 'nap', 1, now() + interval '1 hour', 'w1', $2::uuid)`, id, old))
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.job_steps`), "the stale claim recorded nothing")
	require.Equal(t, "running", one[string](t, b.Ctx, b.Pool, `select status::text from pgrun.jobs where id = $1`, id))
	// The current claim reads the step its job recorded before, and records on.
	require.Equal(t, `1`, one[string](t, b.Ctx, b.Pool, `select result::text from pgrun.step_get($1, 'a', 0, 'w2', $2::uuid)`, id, fresh))
	require.Equal(t, "done", one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'b', 1, '2', 'w2', $2::uuid)`, id, fresh))
}

// No wake-up is lost between an await and an emit of the same event, whatever their
// order: with many pairs racing, every job either got the payload at once (the emit
// came first) or was parked and then queued again by the emit. None is left waiting
// for an event that was emitted.
func TestInvariantDurableNoLostWakeUpBetweenAwaitAndEmit(t *testing.T) {
	b := testkit.Setup(t)
	const n = 60
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.enqueue_job('d', queue => 'race') from generate_series(1, %d)`, n))
	type claim struct {
		id    int64
		token string
	}
	claims := make([]claim, n)
	for i := range claims {
		claims[i].id, claims[i].token = durableClaim(t, b, "race", "w")
	}
	var wg sync.WaitGroup
	got := make([]string, n)
	errs := make(chan error, 2*n)
	for i, c := range claims {
		event := fmt.Sprintf("race:%d", c.id)
		wg.Add(2)
		await := func() {
			defer wg.Done()
			errs <- b.Pool.QueryRow(b.Ctx, `select status from pgrun.await_event($1, 'e', 0, $2, '1 hour', 'w', $3::uuid)`,
				c.id, event, c.token).Scan(&got[i])
		}
		emit := func() {
			defer wg.Done()
			_, err := b.Pool.Exec(b.Ctx, `select pgrun.emit_event($1, '{"ok": true}')`, event)
			errs <- err
		}
		if rand.IntN(2) == 0 {
			go await()
			go emit()
		} else {
			go emit()
			go await()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, c := range claims {
		status := one[string](t, b.Ctx, b.Pool, `select status::text from pgrun.jobs where id = $1`, c.id)
		switch got[i] {
		case "done":
			require.Equal(t, "running", status, "job %d got the payload at once and runs on", c.id)
		case "parked":
			require.Equal(t, "queued", status, "job %d was parked and must have been woken by the emit", c.id)
		default:
			t.Fatalf("job %d: await said %q", c.id, got[i])
		}
	}
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.job_waits`), "every wait was answered")
}

// Another worker login reaches no job's durable calls: under an id it did not
// register each is refused with 42501 and nothing changes.
func TestInvariantDurableCallsBelongToTheClaimsLogin(t *testing.T) {
	k := newIdentityKit(t)
	for _, sql := range []string{
		`select pgrun.step_get($1, 'a', 0, 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.step_put($1, 'a', 0, '1', 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.sleep_job($1, 'a', 0, now() + interval '1 hour', 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.await_event($1, 'a', 0, 'ev', '1 hour', 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.spawn_job($1, 'a', 0, '{"kind": "noop"}', 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.await_job($1, 'a', 0, $1, '1 hour', 'w-a', $3::uuid) where $2::int is not null`,
		`select pgrun.step_put($1, 'a', 0, '1') where $2::int is not null and $3::uuid is not null`,
	} {
		testkit.Denied(t, k.DB, k.b, sql, k.id, k.attempt, k.claim)
	}
	require.Zero(t, countRows(t, k.DB, `select count(*) from pgrun.job_steps`))
	require.Equal(t, "running", one[string](t, k.Ctx, k.Pool, `select status::text from pgrun.jobs where id = $1`, k.id))
	// The holder itself may.
	require.Equal(t, "done", one[string](t, k.Ctx, k.a, `select pgrun.step_put($1, 'a', 0, '1', 'w-a', $2::uuid)`, k.id, k.claim))
}

// Each input of durable execution has a bound, refused with 22023 before anything is
// written.
func TestInvariantDurableInputsAreBounded(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('d', queue => 'dur')`)
	id, claim := durableClaim(t, b, "dur", "w")
	long := strings.Repeat("x", 201)
	for _, sql := range []string{
		`select pgrun.step_put($1, '', 0, '1', 'w', $2::uuid)`,
		`select pgrun.step_put($1, '` + long + `', 0, '1', 'w', $2::uuid)`,
		`select pgrun.step_put($1, 'a', -1, '1', 'w', $2::uuid)`,
		`select pgrun.step_put($1, 'a', 10000, '1', 'w', $2::uuid)`,
		`select pgrun.step_put($1, 'a', 0, jsonb_build_object('x', repeat('y', 1100000)), 'w', $2::uuid)`,
		`select pgrun.sleep_job($1, 'a', 0, 'infinity', 'w', $2::uuid)`,
		`select pgrun.sleep_job($1, 'a', 0, now() + interval '400 days', 'w', $2::uuid)`,
		`select pgrun.await_event($1, 'a', 0, '', '1 hour', 'w', $2::uuid)`,
		`select pgrun.await_event($1, 'a', 0, 'ev', '400 days', 'w', $2::uuid)`,
		`select pgrun.await_event($1, 'a', 0, 'ev', '-1 second', 'w', $2::uuid)`,
		`select pgrun.spawn_job($1, 'a', 0, '{"kind": "noop", "parent_id": 1}', 'w', $2::uuid)`,
		`select pgrun.spawn_job($1, 'a', 0, '[1]', 'w', $2::uuid)`,
		`select pgrun.emit_event('` + long + `', null) where $1::bigint is not null and $2::uuid is not null`,
		`select pgrun.emit_event('ev', jsonb_build_object('x', repeat('y', 1100000))) where $1::bigint is not null and $2::uuid is not null`,
	} {
		testkit.Refused(t, b, b.Pool, "22023", sql, id, claim)
	}
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.job_steps`))
	require.Zero(t, countRows(t, b, `select count(*) from pgrun.events`))
}

// A finished job's steps are pruned with it; a parked job's are kept, however old.
func TestInvariantDurableStepsArePrunedWithTheirJob(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('d', queue => 'dur') from generate_series(1, 2)`)
	done, c1 := durableClaim(t, b, "dur", "w")
	parked, c2 := durableClaim(t, b, "dur", "w")
	require.Equal(t, "done", one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'a', 0, '1', 'w', $2::uuid)`, done, c1))
	require.True(t, one[bool](t, b.Ctx, b.Pool, `select pgrun.complete_job($1, 1, null, 'w', $2::uuid)`, done, c1))
	require.Equal(t, "done", one[string](t, b.Ctx, b.Pool, `select pgrun.step_put($1, 'a', 0, '1', 'w', $2::uuid)`, parked, c2))
	require.Equal(t, "parked", one[string](t, b.Ctx, b.Pool, `select status from pgrun.await_event($1, 'e', 1, 'never', null, 'w', $2::uuid)`, parked, c2))
	testkit.ExecAll(t, b, `update pgrun.jobs set finished_at = now() - interval '30 days' where id = `+fmt.Sprint(done),
		`update pgrun.job_steps set recorded_at = now() - interval '30 days'`)
	require.Equal(t, 1, one[int](t, b.Ctx, b.Pool, `select pgrun.prune_history()`))
	require.Zero(t, countRows(t, b, fmt.Sprintf(`select count(*) from pgrun.job_steps where job_id = %d`, done)))
	require.Equal(t, 1, countRows(t, b, fmt.Sprintf(`select count(*) from pgrun.job_steps where job_id = %d`, parked)),
		"the parked job keeps what it needs")
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.job_waits`))
}

// In the tenant mode an event belongs to the emitter's tenant: another tenant's emit
// of the same name wakes nothing, and its await does not see it.
func TestInvariantDurableEventsAreTheTenants(t *testing.T) {
	k := newTenantKit(t)
	_, err := k.acme.Exec(k.Ctx, `select pgrun.enqueue_job('d', queue => 'tdur')`)
	require.NoError(t, err)
	id, claim := durableClaim(t, k.DB, "tdur", "w")
	require.Equal(t, "parked", one[string](t, k.Ctx, k.Pool,
		`select status from pgrun.await_event($1, 'e', 0, 'payment:1', null, 'w', $2::uuid)`, id, claim))
	require.True(t, one[bool](t, k.Ctx, k.globex, `select pgrun.emit_event('payment:1', '{"from": "globex"}')`))
	require.Equal(t, "waiting", one[string](t, k.Ctx, k.Pool, `select status::text from pgrun.jobs where id = $1`, id),
		"another tenant's event wakes nothing")
	require.True(t, one[bool](t, k.Ctx, k.acme, `select pgrun.emit_event('payment:1', '{"from": "acme"}')`))
	require.Equal(t, "queued", one[string](t, k.Ctx, k.Pool, `select status::text from pgrun.jobs where id = $1`, id))
	_, claim = durableClaim(t, k.DB, "tdur", "w")
	require.JSONEq(t, `{"from": "acme"}`, one[string](t, k.Ctx, k.Pool,
		`select payload::text from pgrun.await_event($1, 'e', 0, 'payment:1', null, 'w', $2::uuid)`, id, claim))
}
