package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/pgrun/pgrun"
)

func TestParseWake(t *testing.T) {
	q, k := parseWake("images")
	if q != "images" || k != nil {
		t.Fatalf("bare queue: %q %v", q, k)
	}
	q, k = parseWake("images 3 1700000000123456 42")
	if q != "images" || k == nil || k.priority != 3 || k.id != 42 || !k.runAt.Equal(time.UnixMicro(1700000000123456)) {
		t.Fatalf("keyed: %q %+v", q, k)
	}
	if q, k = parseWake("images 3 x 42"); q != "images" || k != nil {
		t.Fatalf("a key that does not parse is no key: %q %v", q, k)
	}
}

func TestResumerDropsItsKey(t *testing.T) {
	at := time.Unix(1000, 0)
	job := func(p int16, sec int64, id int64) *pgrun.Job {
		return &pgrun.Job{Priority: p, RunAt: time.Unix(sec, 0), ID: id}
	}
	var r resumer
	if r.next() != nil {
		t.Fatal("a new resumer scans from the start")
	}
	r.claimed([]*pgrun.Job{job(1, 1000, 7), job(1, 1000, 9), job(0, 2000, 3)}, nil)
	if k := r.next(); k == nil || k.priority != 1 || k.id != 9 || !k.runAt.Equal(at) {
		t.Fatalf("the greatest key claimed: %+v", k)
	}
	r.notified(&claimKey{priority: 1, runAt: at.Add(time.Second), id: 10})
	if r.next() == nil {
		t.Fatal("a notification above the key keeps it")
	}
	r.notified(&claimKey{priority: 1, runAt: at, id: 7})
	if r.next() == nil {
		t.Fatal("a notification of a job claimed here keeps the key, even below it")
	}
	r.notified(&claimKey{priority: 1, runAt: at, id: 8})
	if r.next() != nil {
		t.Fatal("a notification below the key drops it")
	}
	r.claimed([]*pgrun.Job{job(1, 1000, 9)}, nil)
	r.notified(nil)
	if r.next() != nil {
		t.Fatal("a notification without a key drops it")
	}
}

// Every resumeEvery-th poll makes a sweep due, a claim of one job from the queue's
// start beside the claims that keep resuming: only a job below the key drops it.
func TestResumerSweepsEveryFewPolls(t *testing.T) {
	at := time.Unix(1000, 0)
	var r resumer
	for range 3 * resumeEvery {
		r.polled()
	}
	if r.sweep() {
		t.Fatal("a sweep without a key: the claims scan from the start anyway")
	}
	r.claimed([]*pgrun.Job{{Priority: 1, RunAt: at, ID: 9}}, nil)
	for range resumeEvery - 1 {
		r.polled()
	}
	if r.sweep() {
		t.Fatal("a sweep before the resumeEvery-th poll")
	}
	r.polled()
	if !r.sweep() {
		t.Fatal("no sweep at the resumeEvery-th poll")
	}
	if r.sweep() {
		t.Fatal("one sweep per resumeEvery polls, taken once")
	}
	if k := r.next(); k == nil || k.id != 9 {
		t.Fatalf("a sweep due dropped the key of the claims beside it: %+v", k)
	}

	// The queue's first job is after the key: nothing was missed, and the key does
	// not move for it (claims in flight may not have taken the jobs before it yet).
	r.swept([]*pgrun.Job{{Priority: 1, RunAt: at.Add(time.Second), ID: 20}}, nil)
	if k := r.next(); k == nil || k.id != 9 {
		t.Fatalf("a sweep's job after the key moved or dropped it: %+v", k)
	}
	r.swept(nil, nil)
	if r.next() == nil {
		t.Fatal("an empty sweep dropped the key")
	}
	// A job below the key was missed: the next claim scans from the start.
	r.swept([]*pgrun.Job{{Priority: 1, RunAt: at.Add(-time.Hour), ID: 30}}, nil)
	if r.next() != nil {
		t.Fatal("a sweep's job below the key kept it")
	}
	r.claimed([]*pgrun.Job{{Priority: 1, RunAt: at, ID: 9}}, nil)
	r.swept(nil, errors.New("connection reset"))
	if r.next() != nil {
		t.Fatal("a failed sweep kept the key")
	}
}

// A claim sent with models warm here may take jobs out of key order, so it drops the
// key instead of moving it; the next claim scans from the queue's start.
func TestWarmClaimDropsTheKey(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 4}}})
	f := newFetcher(r, "a", 4)
	f.resume.claimed([]*pgrun.Job{{Priority: 1, RunAt: time.Unix(1000, 0), ID: 9}}, nil)
	if f.resume.next() == nil {
		t.Fatal("a cold claim sets the key")
	}
	f.reserved = 1
	if err := f.took(claimed{asked: 1, warm: true}); err != nil {
		t.Fatal(err)
	}
	if k := f.resume.next(); k != nil {
		t.Fatalf("a warm claim kept the key %+v", k)
	}
}
