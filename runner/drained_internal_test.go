package runner

import (
	"testing"

	"github.com/pgrun/pgrun"
)

// A fair queue's claim that comes back short beside another claim does not mark the
// queue drained: the other claim's walk may have held jobs it did not take, which are
// queued again once it commits. Alone, or in a queue that is not fair, a short claim
// does. Without this the last jobs of a fair backlog waited for the poll.
func TestAShortFairClaimBesideAnotherIsNotDrained(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	short := func(fair bool, claims, seq uint64, beside bool) bool {
		f := newFetcher(r, "a", 1)
		f.fair.Store(fair)
		f.busy = 1 // no slot free: the jobs wait in the buffer
		f.claims = claims
		f.reserved = 10
		_ = f.took(claimed{wakes: f.wakes, seq: seq, beside: beside, asked: 10, jobs: []*pgrun.Job{{ID: 1}, {ID: 2}}})
		return f.drained
	}
	for _, c := range []struct {
		name         string
		fair, beside bool
		claims, seq  uint64
		drained      bool
	}{
		{"fair, alone", true, false, 1, 1, true},
		{"fair, another sent before it came back", true, false, 2, 1, false},
		{"fair, another in flight when it was sent", true, true, 2, 2, false},
		{"not fair, another sent before it came back", false, false, 2, 1, true},
		{"not fair, another in flight when it was sent", false, true, 2, 2, true},
	} {
		if got := short(c.fair, c.claims, c.seq, c.beside); got != c.drained {
			t.Errorf("%s: drained %v, want %v", c.name, got, c.drained)
		}
	}
}
