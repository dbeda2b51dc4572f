package runner

import (
	"context"
	"slices"
	"testing"

	"github.com/pgrun/pgrun"
)

// A completion asks for the next jobs of the sequence heads in its batch once (a
// batch sent again after an outage asks for none), and not at all while the runner
// drains its completions or a settle after an outage is due or holds claimGate: the
// settle lists what the runner holds and must not miss jobs handed over meanwhile.
func TestHandoffIsAskedOnceAndNotBesideASettle(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	c := newCompleter(r)
	key := "k"
	batch := func() []completion {
		return []completion{
			{id: 1, job: &pgrun.Job{Queue: "a", SequenceKey: &key}, hand: true},
			{id: 2, job: &pgrun.Job{Queue: "a"}},
			{id: 3, job: &pgrun.Job{Queue: "a", SequenceKey: &key}, hand: true},
		}
	}

	b := batch()
	h := c.handoffFor(b)
	if h == nil || !slices.Equal(h.heads, []int64{1, 3}) {
		t.Fatalf("asked for %v, want the heads 1 and 3", h)
	}
	h.release(r, nil)
	if again := c.handoffFor(b); again != nil {
		t.Fatalf("the batch sent again asked for %v again", again.heads)
	}

	r.down.unsettled.Store(true)
	if h := c.handoffFor(batch()); h != nil {
		t.Fatal("asked for a handoff with a settle due")
	}
	r.down.unsettled.Store(false)

	r.claimGate.Lock() // a settle under way
	if h := c.handoffFor(batch()); h != nil {
		t.Fatal("asked for a handoff while a settle held claimGate")
	}
	r.claimGate.Unlock()

	c.draining.Store(true)
	if h := c.handoffFor(batch()); h != nil {
		t.Fatal("asked for a handoff while draining")
	}
}

// Jobs handed over after the fetcher closed (a completion in flight as the runner
// stops) go back to the queue at once, as its buffered jobs do, rather than wait
// running for their lease.
func TestJobsHandedToAClosedFetcherGoBackToTheQueue(t *testing.T) {
	r, f, jobs := setupClaimed(t, 1)
	f.readyMu.Lock()
	f.closed = true
	f.readyMu.Unlock()
	f.handed(jobs)
	if got := f.bufferedJobs(); len(got) != 0 {
		t.Fatalf("a closed fetcher buffered %d jobs handed over", len(got))
	}
	var status string
	if err := r.pool.QueryRow(context.Background(), `select status::text from pgrun.jobs where id = $1`, jobs[0].ID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "queued" {
		t.Fatalf("the job handed over to a closed fetcher is %s, want queued", status)
	}
}
