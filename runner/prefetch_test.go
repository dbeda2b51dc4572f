package runner

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
)

// The prefetch allowance follows Little's law: what the slots finish during one claim
// round trip, capped at a claim, and nothing before both have been measured.
func TestPrefetchCoversOneRoundTrip(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"q": {Workers: 100}}, MaxClaim: 500})
	f := newFetcher(r, "q", 100)
	if got := f.prefetch(); got != 0 {
		t.Fatalf("prefetch before any measurement = %d, want 0", got)
	}
	f.rtt.add(0.002) // a 2 ms claim round trip
	if got := f.prefetch(); got != 0 {
		t.Fatalf("prefetch with no run time measured = %d, want 0", got)
	}
	f.runTime.add(0.010) // jobs of 10 ms: 100 slots finish 20 of them per round trip
	if got := f.prefetch(); got != 20 {
		t.Fatalf("prefetch for 10 ms jobs = %d, want 20", got)
	}
	if got, want := f.free(), 120; got != want {
		t.Fatalf("free capacity = %d, want %d (slots plus prefetch)", got, want)
	}
	long := newFetcher(r, "q", 100)
	long.rtt.add(0.002)
	long.runTime.add(1) // one-second jobs: none worth buffering
	if got := long.prefetch(); got != 0 {
		t.Fatalf("prefetch for 1 s jobs = %d, want 0", got)
	}
	short := newFetcher(r, "q", 100)
	short.rtt.add(0.002)
	short.runTime.add(0.000_01) // no-op jobs: capped at one claim
	if got := short.prefetch(); got != 500 {
		t.Fatalf("prefetch for no-op jobs = %d, want the claim cap 500", got)
	}
}

// setupClaimed claims n jobs of queue q as the runner's worker and returns them.
func setupClaimed(t *testing.T, n int) (*Runner, *fetcher, []*pgrun.Job) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t)
	r, err := New(pool, Config{Queues: map[string]QueueConfig{"q": {Workers: 1}}, WorkerID: "prefetch-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RegisterExamples(r); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(r, "q", 1)
	r.fetchers["q"] = f
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "noop", Queue: "q"}
	}
	if _, err := pgrun.EnqueueMany(ctx, pool, specs); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := f.claim(ctx, n, nil)
	if err != nil || len(jobs) != n {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	return r, f, jobs
}

// Jobs claimed beyond the free slots are held: lease renewal renews them with the
// running ones, so a buffered job never loses its lease while it waits.
func TestRenewalCoversBufferedJobs(t *testing.T) {
	r, f, jobs := setupClaimed(t, 2)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, `update pgrun.jobs set lease_expires_at = now() + interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	f.ready = jobs
	r.renew(ctx)
	rows, _ := r.pool.Query(ctx, `select lease_expires_at > now() + interval '10 seconds' from pgrun.jobs order by id`)
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range renewed {
		if !ok {
			t.Fatalf("buffered job %d's lease was not renewed", jobs[i].ID)
		}
	}
}

// At shutdown, claimed jobs still waiting for a slot go back to their queue in one
// call, without spending an attempt, and are claimable at once.
func TestShutdownRequeuesBufferedJobs(t *testing.T) {
	r, f, jobs := setupClaimed(t, 3)
	ctx := context.Background()
	f.ready = jobs
	f.requeueBuffered()
	if n := len(f.bufferedJobs()); n != 0 {
		t.Fatalf("%d jobs still buffered", n)
	}
	var queued, failures int
	var due bool
	err := r.pool.QueryRow(ctx, `select count(*) filter (where status = 'queued'), coalesce(sum(failures), 0),
		bool_and(run_at <= now()) from pgrun.jobs`).Scan(&queued, &failures, &due)
	if err != nil {
		t.Fatal(err)
	}
	if queued != 3 || failures != 0 || !due {
		t.Fatalf("after requeue: %d queued, %d failures, due now %v; want 3 queued, none failed, due", queued, failures, due)
	}
	again, _, err := f.claim(ctx, 3, nil)
	if err != nil || len(again) != 3 {
		t.Fatalf("re-claim: %d jobs, %v", len(again), err)
	}
}

// A claim that comes back empty, with no wake-up since it was sent, leaves the fetcher
// quiet until it is woken (a notification, the poll) or a slot frees up: an idle
// runner does not ask the database again at once, in a loop. A wake-up that arrives
// while a claim is in flight is not lost.
func TestEmptyClaimWaitsForAWakeUp(t *testing.T) {
	_, f, _ := setupClaimed(t, 1) // the queue is now empty
	ctx := context.Background()
	results := make(chan claimed, maxInflight)
	f.took(claimed{wakes: f.wakes, asked: 1})
	f.launch(ctx, results)
	if f.inflight != 0 {
		t.Fatal("an empty claim was followed by another claim with no wake-up")
	}
	f.woken()
	f.launch(ctx, results)
	if f.inflight != 1 {
		t.Fatalf("a woken fetcher has %d claims in flight, want 1", f.inflight)
	}
	res := <-results
	f.inflight--
	f.woken() // a notification arrived while the claim was in flight
	if err := f.took(res); err != nil {
		t.Fatal(err)
	}
	f.launch(ctx, results)
	if f.inflight != 1 {
		t.Fatal("a wake-up that arrived during a claim was lost")
	}
	<-results
}

// addN gives the average that as many calls of add give.
func TestEWMAAddNIsRepeatedAdd(t *testing.T) {
	var one, many ewma
	one.add(0.004)
	many.add(0.004)
	for range 7 {
		one.add(0.001)
	}
	many.addN(0.001, 7)
	if d := one.value() - many.value(); d > 1e-12 || d < -1e-12 {
		t.Fatalf("addN gave %g, seven adds %g", many.value(), one.value())
	}
	var fresh, freshMany ewma
	for range 3 {
		fresh.add(0.002)
	}
	freshMany.addN(0.002, 3)
	if fresh.value() != freshMany.value() {
		t.Fatalf("from zero: addN gave %g, three adds %g", freshMany.value(), fresh.value())
	}
}
