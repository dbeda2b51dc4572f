package runner

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pgrun/pgrun"
)

// Each lane has one runner while there are fewer runners than lanes, and each runner
// one lane once there are as many or more; a place past the runners counted (a look
// that raced a peer's leaving) still gets lanes.
func TestRunnersShareTheLanes(t *testing.T) {
	for _, c := range []struct {
		v    laneView
		want []int
	}{
		{laneView{lanes: 0, rank: 0, runners: 1}, nil},
		{laneView{lanes: 4, rank: 0, runners: 1}, []int{0, 1, 2, 3}},
		{laneView{lanes: 4, rank: 1, runners: 2}, []int{1, 3}},
		{laneView{lanes: 4, rank: 2, runners: 4}, []int{2}},
		{laneView{lanes: 4, rank: 5, runners: 6}, []int{1}},
		{laneView{lanes: 3, rank: 0, runners: 2}, []int{0, 2}},
		{laneView{lanes: 4, rank: 7, runners: 2}, []int{1, 3}},
	} {
		if got := c.v.owned(); !slices.Equal(got, c.want) {
			t.Errorf("%+v: lanes %v, want %v", c.v, got, c.want)
		}
	}
	// Every lane has a runner, whatever the count.
	for lanes := 2; lanes <= 8; lanes++ {
		for runners := 1; runners <= 10; runners++ {
			seen := map[int]bool{}
			for rank := range runners {
				for _, l := range (laneView{lanes: lanes, rank: rank, runners: runners}).owned() {
					seen[l] = true
				}
			}
			if len(seen) != lanes {
				t.Errorf("%d lanes, %d runners: only lanes %v have a runner", lanes, runners, seen)
			}
		}
	}
}

// A fetcher with a backlog takes its own lanes in turn, each claim resuming after its
// lane's key; a lane that runs short sends the next claim to the whole queue, after
// the least key of the runner's lanes, and does not drain the fetcher.
func TestFetcherClaimsItsLanesWhileBacklogged(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 10}}})
	f := newFetcher(r, "a", 10)
	f.busy = f.slots // no job starts: there is no database here
	r.fetchers["a"] = f
	r.looked("a", queueLook{shared: true, lanes: laneView{lanes: 4, rank: 1, runners: 2}})
	if _, ok := f.pickLane(); ok {
		t.Fatal("a lane without a backlog: a quiet queue's jobs would wait in the other lanes")
	}
	job := func(id int64) *pgrun.Job { return &pgrun.Job{ID: id, RunAt: time.Unix(100, 0)} }

	f.backlog = true
	var lanes []int
	for range 4 {
		l, ok := f.pickLane()
		if !ok {
			t.Fatal("no lane with a backlog")
		}
		lanes = append(lanes, l)
	}
	if !slices.Equal(lanes, []int{3, 1, 3, 1}) {
		t.Fatalf("lanes %v, want the runner's two lanes in turn", lanes)
	}

	// Lane 1 and lane 3 each claimed in full: keys per lane, and the whole queue's key
	// rises to the lesser.
	three, one := 3, 1
	if err := f.took(claimed{asked: 2, jobs: []*pgrun.Job{job(7), job(11)}, lane: &three}); err != nil {
		t.Fatal(err)
	}
	if f.resume.key != nil {
		t.Fatal("the whole queue's key moved before each of the runner's lanes had one")
	}
	if err := f.took(claimed{asked: 2, jobs: []*pgrun.Job{job(5), job(9)}, lane: &one}); err != nil {
		t.Fatal(err)
	}
	if k := f.resume.nextIn(3); k == nil || k.id != 11 {
		t.Fatalf("lane 3 resumes after %+v, want job 11", k)
	}
	if k := f.resume.nextIn(1); k == nil || k.id != 9 {
		t.Fatalf("lane 1 resumes after %+v, want job 9", k)
	}
	if k := f.resume.next(); k == nil || k.id != 9 {
		t.Fatalf("the whole queue resumes after %+v, want job 9 (the least of the lanes' keys)", k)
	}
	// A look that gives this runner other lanes drops the keys of those it gave up.
	r.looked("a", queueLook{shared: true, lanes: laneView{lanes: 4, rank: 0, runners: 4}})
	if l, ok := f.pickLane(); !ok || l != 0 {
		t.Fatalf("lane %d (%t), want lane 0 alone", l, ok)
	}
	if f.resume.nextIn(3) != nil || f.resume.nextIn(1) != nil {
		t.Fatal("the keys of lanes given up were kept")
	}
	r.looked("a", queueLook{shared: true, lanes: laneView{lanes: 4, rank: 1, runners: 2}})
	f.resume.claimedIn(3, []*pgrun.Job{job(11)}, nil)

	// Lane 3 runs short: the fetcher is not drained, and the next claim is of the whole queue.
	if err := f.took(claimed{wakes: f.wakes, asked: 2, jobs: []*pgrun.Job{job(15)}, lane: &three}); err != nil {
		t.Fatal(err)
	}
	if f.drained {
		t.Fatal("a lane that ran short drained the fetcher")
	}
	if _, ok := f.pickLane(); ok {
		t.Fatal("after a short lane claim, the next claim took a lane, not the whole queue")
	}
	if err := f.took(claimed{wakes: f.wakes, asked: 2, jobs: []*pgrun.Job{job(12)}}); err != nil {
		t.Fatal(err)
	}
	if !f.drained {
		t.Fatal("a short claim of the whole queue did not drain the fetcher")
	}
}

// A notified key below a lane's key, of a job not claimed here, drops that lane's key
// and no other; a notification without a key, a failed claim and a sweep that found a
// job below the key drop every key.
func TestLaneKeysAreDroppedLikeTheKey(t *testing.T) {
	at := time.Unix(100, 0)
	job := func(id int64) *pgrun.Job { return &pgrun.Job{ID: id, RunAt: at} }
	var r resumer
	fill := func() {
		r.claimedIn(0, []*pgrun.Job{job(10)}, nil)
		r.claimedIn(1, []*pgrun.Job{job(21)}, nil)
		r.claimed([]*pgrun.Job{job(8)}, nil)
	}
	fill()
	r.notified(&claimKey{runAt: at, id: 15}) // below lane 1's key only
	if r.nextIn(1) != nil {
		t.Fatal("a job notified below lane 1's key left the key")
	}
	if k := r.nextIn(0); k == nil || k.id != 10 {
		t.Fatalf("lane 0's key is %+v after a job notified above it, want job 10", k)
	}
	if k := r.next(); k == nil || k.id != 8 {
		t.Fatalf("the queue's key is %+v after a job notified above it, want job 8", k)
	}
	r.notified(&claimKey{runAt: at, id: 10}) // a job claimed here: says nothing
	if r.nextIn(0) == nil {
		t.Fatal("the notification of a job claimed here dropped lane 0's key")
	}

	r.notified(nil)
	if r.next() != nil || r.nextIn(0) != nil {
		t.Fatal("a notification without a key left keys")
	}
	fill()
	r.claimed(nil, errors.New("claim failed"))
	if r.nextIn(0) != nil || r.nextIn(1) != nil {
		t.Fatal("a failed claim left the lanes' keys")
	}
	fill()
	r.swept([]*pgrun.Job{job(3)}, nil)
	if r.next() != nil || r.nextIn(0) != nil {
		t.Fatal("a sweep that found a job below the key left keys")
	}
}
