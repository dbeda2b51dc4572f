package runner

import "strconv"

// Claim lanes (pgrun.set_queue(claim_lanes), docs/operations.md): a laned queue's jobs
// are split by id % lanes, and each runner serving it claims from lanes of its own
// while it has a backlog. Runners sharing one queue otherwise claim from the same
// place: each claim resumes after its own runner's last key, where its peers' claims
// in flight hold the next rows locked and their committed claims left entries not
// yet dead to every snapshot, and it steps over all of them (SKIP LOCKED tries each):
// four processes on two cores read 4.0M claim-index entries for a million jobs, one
// 1.8M, and burned down at 0.90-0.95 of one process's rate (docs/benchmarks.md,
// ninth pass). A runner's lanes follow from its place among the queue's live workers
// (pgrun.peer_rank) as each look at its peers finds it, so a fleet spreads over the
// lanes without talking to each other; a lane whose runner went away is taken over at
// the next look after its peers see it gone, and meanwhile by their claims of the
// whole queue, which they send whenever a lane of theirs runs short.

// laneView is what the fetcher's last look found of its queue's lanes.
type laneView struct {
	lanes   int // the queue's claim lanes; 0: none
	rank    int // this worker's place among the live workers serving the queue
	runners int // how many serve it, this one included
}

// owned lists the lanes a runner at v.rank claims from: lane rank % lanes when there
// are as many runners as lanes or more (some lanes then have several), else every
// lane l with l % runners == rank, so that each lane has one runner. Nil without lanes.
func (v laneView) owned() []int {
	if v.lanes < 2 || v.runners < 1 {
		return nil
	}
	rank := min(max(v.rank, 0), v.runners-1)
	if v.runners >= v.lanes {
		return []int{rank % v.lanes}
	}
	var own []int
	for l := rank; l < v.lanes; l += v.runners {
		own = append(own, l)
	}
	return own
}

// ownLanes lists the runner's own lanes of the queue as the last look found them.
func (f *fetcher) ownLanes() []int {
	if v := f.lanes.Load(); v != nil {
		return v.owned()
	}
	return nil
}

// pickLane returns the lane the next claim takes from, and false for a claim of the
// whole queue: lanes are for a backlog, and a runner with models warm claims the whole
// queue (the warm pass takes jobs out of key order; claim_jobs ignores the lane then). While a lane claim comes
// back full the fetcher has a backlog; a short one ends it, so the next claim is of
// the whole queue, which takes what other lanes hold for runners that are gone or
// behind, and the jobs of a quiet queue as they come. The runner's lanes take turns.
func (f *fetcher) pickLane() (int, bool) {
	if !f.backlog || len(f.r.models()) > 0 {
		return 0, false
	}
	own := f.ownLanes()
	if len(own) == 0 {
		return 0, false
	}
	f.resume.keepLanes(own)
	f.laneTurn++
	return own[f.laneTurn%len(own)], true
}

// raiseKey moves the key of claims of the whole queue up to the least key of the
// runner's own lanes, once each has one: every job of those lanes below it was
// claimed, and the other lanes are their runners'. Without this a claim of the whole
// queue after a spell of lane claims would resume where the spell began and step over
// every job claimed in it. A job of another lane left below the key is found by the
// sweep (resumer.sweep), as any job below the key is.
func (f *fetcher) raiseKey() {
	own := f.ownLanes()
	if len(own) == 0 {
		return
	}
	var least *claimKey
	for _, l := range own {
		k := f.resume.lanes[l]
		if k == nil {
			return
		}
		if least == nil || k.less(*least) {
			least = k
		}
	}
	if f.resume.key == nil || f.resume.key.less(*least) {
		k := *least
		f.resume.key = &k
	}
}

// laneName is lane for a log line: its number, or "all" for the whole queue.
func laneName(lane *int) string {
	if lane == nil {
		return "all"
	}
	return strconv.Itoa(*lane)
}
