package ui

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/pgrun/pgrun/internal/queueview"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// What a queue's page lists, at most, of each part (issue 35: every control visible).
// Each part says how many it left out; the SQL reads about as many rows as it
// returns (75_queue_view.sql), so these also bound the page's cost.
const (
	queueKeysShown      = 20
	queueSequencesShown = 20
	queueDueShown       = 20
)

// queueSettings and the other rows of the page are queueview's (shared with `runner
// queue show`).
type (
	queueSettings = queueview.Settings
	queueCounts   = queueview.Counts
	queueKey      = queueview.Key
	heldSequence  = queueview.Sequence
	dueJob        = queueview.Due
)

// heldText is a held count as the page shows it: past queueview.StatsExactLimit the
// count stopped, so it says "10,000+".
func heldText(c queueCounts) string {
	if c.HeldPast() {
		return num(queueview.StatsExactLimit) + "+"
	}
	return num(c.Held)
}

type queueData struct {
	Settings queueSettings `json:"settings"`
	// Counts is nil when queue_stats could not be read (a problem line says why).
	Counts *queueCounts `json:"counts"`
	// Keys are the keys using the per-key limits, those at their limit first;
	// KeysInUse is how many use them in all (each source counted to 10,000), KeysMore
	// how many of those are not listed.
	Keys      []queueKey `json:"keys"`
	KeysInUse int64      `json:"keys_in_use"`
	KeysMore  int64      `json:"keys_more"`
	// Sequences are the sequences holding jobs, those a failure stopped first;
	// SequencesMore says more hold jobs than are listed.
	Sequences     []heldSequence `json:"sequences"`
	SequencesMore bool           `json:"sequences_more"`
	// Due are the first due jobs by priority, due time and id, each with what holds
	// it; DueMore is how many more are due (estimated when Counts is).
	Due     []dueJob `json:"due"`
	DueMore int64    `json:"due_more"`
}

// queuePage is one queue's page (/queues/NAME): its settings with their use now (the
// queue's rate window, its running jobs beside max_running), its counts, the keys
// using its per-key limits, its held sequences and its first due jobs with why each
// is not claimed. An unknown queue is a 404. The counts (queue_stats, the page's
// costliest read) go on one connection while the rest go one after another on
// another (readLanes).
func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx := r.Context()
	settings, err := collect[queueSettings](ctx, s.pool, sqlapi.DashboardQueue, name)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if len(settings) == 0 {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("queue %q does not exist: a queue appears with its first job, "+
			"or with `runner queue set %s`", name, name))
		return
	}
	d := queueData{Settings: settings[0]}
	var keys []queueKey
	problems := s.readLanes(ctx, [][]overviewSection{{
		{"counts", func(ctx context.Context, db queryer) error {
			c, err := collect[queueCounts](ctx, db, sqlapi.DashboardQueueStats, name)
			if len(c) == 1 {
				d.Counts = &c[0]
			}
			return err
		}},
	}, {
		{"keys in use", func(ctx context.Context, db queryer) (err error) {
			if d.Settings.PerKey() {
				keys, err = collect[queueKey](ctx, db, sqlapi.DashboardQueueKeys, name, queueKeysShown)
			}
			return err
		}},
		{"held sequences", func(ctx context.Context, db queryer) (err error) {
			d.Sequences, err = collect[heldSequence](ctx, db, sqlapi.DashboardQueueSequences, name, queueSequencesShown+1)
			return err
		}},
		{"due jobs", func(ctx context.Context, db queryer) (err error) {
			d.Due, err = collect[dueJob](ctx, db, sqlapi.DashboardQueueDue, name, queueDueShown)
			return err
		}},
	}})
	d.Keys = keys
	if len(keys) > 0 {
		d.KeysInUse = keys[0].KeysInUse
		d.KeysMore = max(d.KeysInUse-int64(len(keys)), 0)
	}
	if len(d.Sequences) > queueSequencesShown {
		d.Sequences, d.SequencesMore = d.Sequences[:queueSequencesShown], true
	}
	if d.Counts != nil {
		d.DueMore = max(d.Counts.Queued-int64(len(d.Due)), 0)
	}
	if d.Keys == nil {
		d.Keys = []queueKey{}
	}
	if d.Sequences == nil {
		d.Sequences = []heldSequence{}
	}
	if d.Due == nil {
		d.Due = []dueJob{}
	}
	s.render(w, r, "queue", "Queue "+name, d, problems...)
}

// readLanes runs each lane's reads one after another on one connection of the
// pool, the lanes at once, and returns a problem line per read that failed, sorted.
// A read's error leaves the connection to the next read of its lane (each statement
// is its own transaction); a connection that could not be had fails its lane's reads.
func (s *Server) readLanes(ctx context.Context, lanes [][]overviewSection) []string {
	var problems []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			conn, err := s.pool.Acquire(ctx)
			if err == nil {
				defer conn.Release()
			}
			for _, sec := range lane {
				failed := err
				if failed == nil {
					failed = sec.read(ctx, conn)
				}
				if failed != nil {
					mu.Lock()
					problems = append(problems, problem(sec.name, failed))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sort.Strings(problems)
	return problems
}
