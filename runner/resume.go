package runner

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgrun/pgrun"
)

// claimKey orders jobs as claim_jobs hands them out: priority, run_at, id.
type claimKey struct {
	priority int16
	runAt    time.Time
	id       int64
}

func (a claimKey) less(b claimKey) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if !a.runAt.Equal(b.runAt) {
		return a.runAt.Before(b.runAt)
	}
	return a.id < b.id
}

// lastKey is the greatest key of jobs, or nil if there are none.
func lastKey(jobs []*pgrun.Job) *claimKey {
	if len(jobs) == 0 {
		return nil
	}
	var last claimKey
	for i, j := range jobs {
		if k := (claimKey{priority: j.Priority, runAt: j.RunAt, id: j.ID}); i == 0 || last.less(k) {
			last = k
		}
	}
	return &last
}

// parseWake splits a pgrun_jobs payload, "queue" or "queue priority run_at_us id",
// into the queue and the key no notified job sorts before (nil if the payload has
// none, or one that does not parse: a notification is only a hint).
func parseWake(payload string) (string, *claimKey) {
	queue, rest, ok := strings.Cut(payload, " ")
	if !ok {
		return queue, nil
	}
	f := strings.Fields(rest)
	if len(f) != 3 {
		return queue, nil
	}
	p, err1 := strconv.ParseInt(f[0], 10, 16)
	us, err2 := strconv.ParseInt(f[1], 10, 64)
	id, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return queue, nil
	}
	return queue, &claimKey{priority: int16(p), runAt: time.UnixMicro(us), id: id}
}

// resumeEvery is how many polls a fetcher claims after its last key before it sweeps
// its queue from the start: a job put back, or one that became due, below the key is
// noticed by a notification without a key (which drops the key at once) or by this
// sweep at the latest.
const resumeEvery = 10

// resumer keeps the key a fetcher's next claim resumes after (claim_jobs'
// after_*). With a large backlog, a claim from the queue's start would step over the
// index entries of every job claimed since the last vacuum, a growing cost (and an
// unbounded one while a long transaction holds vacuum back); resuming after the last
// key claimed steps over none. A notification naming a key below it, of a job this
// runner has not claimed, drops the key; so does one naming no key.
type resumer struct {
	key   *claimKey // owned by the fetcher's goroutine
	polls int
	// sweepDue is set by every resumeEvery-th poll while there is a key (see sweep).
	sweepDue bool

	mu      sync.Mutex
	rewind  bool               // drop the key before the next claim
	pending []claimKey         // keys notified since the last claim
	recent  map[int64]struct{} // ids claimed lately: their notifications often arrive after the claim
}

// Bounds of resumer's memory: past maxPending notified keys it drops the key; it
// remembers up to maxRecent claimed ids, then starts over.
const (
	maxPending = 256
	maxRecent  = 8192
)

// notified records a notification's key (nil: none, so drop the key).
func (r *resumer) notified(k *claimKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case k == nil || len(r.pending) >= maxPending:
		r.rewind = true
	default:
		r.pending = append(r.pending, *k)
	}
}

// polled counts a poll; every resumeEvery-th makes a sweep due.
func (r *resumer) polled() {
	r.polls++
	if r.polls%resumeEvery == 0 && r.key != nil {
		r.sweepDue = true
	}
}

// sweep reports whether a sweep is due, and takes it. A sweep is a claim of one job
// from the queue's start, sent beside the claims that go on resuming after the key
// (swept reads its answer): the queue's first job is below the key only if something
// was missed. It used to be the next claim itself, sent without the key for a full
// batch, and a scan from the start steps over the index entries of every job claimed
// since the last sweep: in a steady state of 27,000 jobs a second that claim took
// 140-250 ms, and held one of the fetcher's two claims in flight while it did, which
// put a p99 of 50-240 ms on the jobs enqueued meanwhile (docs/benchmarks.md, ninth
// pass). A sweep holds one job back for as long.
func (r *resumer) sweep() bool {
	due := r.sweepDue && r.key != nil
	r.sweepDue = false
	return due
}

// swept reads a sweep's answer: a job below the key was missed by the claims after
// it, so the key is dropped and the next claim scans from the start for any others.
// A failed sweep drops it too, as a failed claim does. The key never moves forward
// for a sweep's job: the claims in flight may not have taken the jobs before it yet.
func (r *resumer) swept(jobs []*pgrun.Job, err error) {
	if err != nil {
		r.forget()
		return
	}
	if k := lastKey(jobs); k != nil && r.key != nil && k.less(*r.key) {
		r.forget()
	}
	r.remember(jobs)
}

// next returns the key to claim after (nil: from the start), applying what was
// notified since the last claim. A notified key of a job claimed here names that job
// (a single job's notification carries its own key), so it moves nothing; a key of a
// statement of several jobs is the least of each part, an id no claim may have
// returned, and drops the key if it sorts below.
func (r *resumer) next() *claimKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	rewind := r.rewind
	for _, k := range r.pending {
		if _, mine := r.recent[k.id]; !mine && r.key != nil && k.less(*r.key) {
			rewind = true
		}
	}
	r.rewind, r.pending = false, r.pending[:0]
	if rewind {
		r.key = nil
	}
	return r.key
}

// forget drops the key: the next claim scans from the queue's start.
func (r *resumer) forget() { r.key = nil }

// claimed moves the key past jobs and remembers their ids; a failed claim (err) drops
// the key.
func (r *resumer) claimed(jobs []*pgrun.Job, err error) {
	if err != nil {
		r.key = nil
		return
	}
	if k := lastKey(jobs); k != nil && (r.key == nil || r.key.less(*k)) {
		r.key = k
	}
	r.remember(jobs)
}

// remember records the ids of jobs claimed here: a notification naming one of them
// (often arriving after the claim) says nothing about jobs below the key.
func (r *resumer) remember(jobs []*pgrun.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recent == nil || len(r.recent)+len(jobs) > maxRecent {
		r.recent = make(map[int64]struct{}, maxRecent)
	}
	for _, j := range jobs {
		r.recent[j.ID] = struct{}{}
	}
}
