package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// maxSelected bounds the jobs one "selected" action touches.
	maxSelected = 500
)

// actionFunc carries out an action from its form and returns what to tell the
// operator.
type actionFunc func(ctx context.Context, s *Server, f form) (string, error)

// actionSpec is an action: what the confirmation asks, and what it does.
type actionSpec struct {
	confirm func(f form) (string, error) // the question; an error for a bad form
	do      actionFunc
}

// form reads an action's fields.
type form struct{ r *http.Request }

func (f form) text(key string) string { return strings.TrimSpace(f.r.PostFormValue(key)) }

func (f form) id(key string) (int64, error) {
	v := f.text(key)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q is not an id: use a positive whole number", key, v)
	}
	return n, nil
}

func (f form) ids() ([]int64, error) {
	if err := f.r.ParseForm(); err != nil {
		return nil, err
	}
	var out []int64
	for _, v := range f.r.PostForm["id"] {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("id %q is not a job id", v)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no job selected: tick the jobs first")
	}
	if len(out) > maxSelected {
		return nil, fmt.Errorf("%d jobs selected: at most %d at once", len(out), maxSelected)
	}
	return out, nil
}

func (f form) need(key string) (string, error) {
	v := f.text(key)
	if v == "" {
		return "", fmt.Errorf("%s is missing", key)
	}
	return v, nil
}

var actions = map[string]actionSpec{
	"cancel": {
		confirm: func(f form) (string, error) {
			id, err := f.id("id")
			return fmt.Sprintf("Cancel job %d? A running job is told to stop.", id), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			id, _ := f.id("id")
			_, err := s.client.Cancel(ctx, id, "cancelled from the dashboard")
			return fmt.Sprintf("Job %d cancelled.", id), err
		},
	},
	"retry": {
		confirm: func(f form) (string, error) {
			id, err := f.id("id")
			return fmt.Sprintf("Retry job %d with a full attempt budget?", id), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			id, _ := f.id("id")
			_, err := s.client.Retry(ctx, id)
			return fmt.Sprintf("Job %d queued again.", id), err
		},
	},
	"cancel-selected": {
		confirm: func(f form) (string, error) {
			ids, err := f.ids()
			return fmt.Sprintf("Cancel the %d selected jobs?", len(ids)), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			ids, _ := f.ids()
			return eachJob(ctx, ids, "cancelled", func(id int64) error {
				_, err := s.client.Cancel(ctx, id, "cancelled from the dashboard")
				return err
			})
		},
	},
	"retry-selected": {
		confirm: func(f form) (string, error) {
			ids, err := f.ids()
			return fmt.Sprintf("Retry the %d selected jobs?", len(ids)), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			ids, _ := f.ids()
			return eachJob(ctx, ids, "queued again", func(id int64) error {
				_, err := s.client.Retry(ctx, id)
				return err
			})
		},
	},
	"pause-queue": queueAction("Pause queue %s? Running jobs go on; nothing new starts.", "Queue %s paused.",
		func(ctx context.Context, c *pgrun.Client, q string) error { _, err := c.PauseQueue(ctx, q); return err }),
	"resume-queue": queueAction("Resume queue %s?", "Queue %s resumed.",
		func(ctx context.Context, c *pgrun.Client, q string) error {
			_, err := c.ResumeQueue(ctx, q)
			return err
		}),
	"pause-schedule": scheduleAction("Pause schedule %s? It stops firing until resumed.", "Schedule %s paused.",
		func(ctx context.Context, c *pgrun.Client, n string) error {
			_, err := c.PauseSchedule(ctx, n)
			return err
		}),
	"resume-schedule": scheduleAction("Resume schedule %s? It fires from its next slot; missed slots do not fire.", "Schedule %s resumed.",
		func(ctx context.Context, c *pgrun.Client, n string) error {
			_, err := c.ResumeSchedule(ctx, n)
			return err
		}),
	"worker-control": {
		confirm: func(f form) (string, error) {
			host, queue, mode, err := parseControl(f)
			what := map[string]string{
				"on":    "claim again",
				"drain": "claim nothing more and let running jobs finish",
				"off":   "stop at once: running jobs go back to the queue",
			}[mode]
			return fmt.Sprintf("Set workers on %s for queue %s to %s (%s)?", host, queue, mode, what), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			host, queue, mode, _ := parseControl(f)
			err := s.client.SetWorkerControl(ctx, host, queue, pgrun.WorkerMode(mode))
			return fmt.Sprintf("Workers on %s, queue %s: %s.", host, queue, mode), err
		},
	},
	"cancel-run": {
		confirm: func(f form) (string, error) {
			id, err := f.id("run")
			return fmt.Sprintf("Cancel run %d and its unfinished nodes?", id), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			id, _ := f.id("run")
			_, err := s.client.CancelRun(ctx, id, "cancelled from the dashboard")
			return fmt.Sprintf("Run %d cancelled.", id), err
		},
	},
	"retry-run": {
		confirm: func(f form) (string, error) {
			id, err := f.id("run")
			return fmt.Sprintf("Retry run %d: every failed or cancelled node runs again?", id), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			id, _ := f.id("run")
			_, err := s.client.RetryRun(ctx, id)
			return fmt.Sprintf("Run %d running again.", id), err
		},
	},
}

// queueAction and scheduleAction confirm an action on the named queue or schedule
// and then do it with call.
func queueAction(question, done string, call func(context.Context, *pgrun.Client, string) error) actionSpec {
	return actionSpec{
		confirm: func(f form) (string, error) {
			q, err := f.need("queue")
			return fmt.Sprintf(question, q), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			q, _ := f.need("queue")
			return fmt.Sprintf(done, q), call(ctx, s.client, q)
		},
	}
}

func scheduleAction(question, done string, call func(context.Context, *pgrun.Client, string) error) actionSpec {
	return actionSpec{
		confirm: func(f form) (string, error) {
			n, err := f.need("schedule")
			return fmt.Sprintf(question, n), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			n, _ := f.need("schedule")
			return fmt.Sprintf(done, n), call(ctx, s.client, n)
		},
	}
}

func parseControl(f form) (host, queue, mode string, err error) {
	if host, err = f.need("host"); err != nil {
		return
	}
	if queue = f.text("queue"); queue == "" {
		queue = "*"
	}
	mode = f.text("mode")
	if !slices.Contains([]string{"on", "drain", "off"}, mode) {
		err = fmt.Errorf("mode %q is not valid: use on, drain or off", mode)
	}
	return
}

// eachJob applies fn to every id and sums up: how many succeeded, and the first
// few errors.
func eachJob(ctx context.Context, ids []int64, done string, fn func(int64) error) (string, error) {
	var ok int
	var errs []string
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		if err := fn(id); err != nil {
			if len(errs) < 3 {
				errs = append(errs, describe(err))
			}
			continue
		}
		ok++
	}
	msg := fmt.Sprintf("%d of %d jobs %s.", ok, len(ids), done)
	if len(errs) > 0 {
		return "", fmt.Errorf("%s Not all: %s", msg, strings.Join(errs, "; "))
	}
	return msg, nil
}

// confirmData is the server-side confirmation page, for a browser without script:
// the same form again with confirmed=yes.
type confirmData struct {
	Action   string      `json:"action"`
	Question string      `json:"question"`
	Fields   [][2]string `json:"-"`
	Return   string      `json:"return"`
}

// action carries out POST /actions/{action}: refused when read-only, checked for
// origin and CSRF token, confirmed, done, and then back to the page it came from
// with the outcome.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReadOnly {
		s.fail(w, r, http.StatusForbidden, errors.New("this dashboard is read-only (--read-only): actions are disabled"))
		return
	}
	if err := s.checkPost(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err)
		return
	}
	name := r.PathValue("action")
	if b, ok := bulkActions[name]; ok {
		s.bulkAction(w, r, name, b)
		return
	}
	spec, ok := actions[name]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no action %q", name))
		return
	}
	f := form{r}
	question, err := spec.confirm(f)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	back := safeNext(f.text("return"))
	if f.text("confirmed") != "yes" {
		d := confirmData{Action: name, Question: question, Return: back}
		for k, vs := range r.PostForm {
			if k == "confirmed" || k == "csrf" {
				continue
			}
			for _, v := range vs {
				d.Fields = append(d.Fields, [2]string{k, v})
			}
		}
		slices.SortFunc(d.Fields, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
		s.render(w, r, "confirm", "Confirm", d)
		return
	}
	msg, err := spec.do(r.Context(), s, f)
	if err != nil {
		s.log.Warn("ui: action failed", "action", name, "err", err)
		msg = "Failed: " + describe(err)
	} else {
		s.log.Info("ui: action", "action", name, "outcome", msg, "user", s.actor(r), "remote", remoteAddr(r))
	}
	setFlash(w, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// Filter-wide actions: retry, cancel or delete every job the jobs page's filter
// matches, on every page, by pgrun.retry_matching, cancel_matching and
// delete_matching (52_bulk.sql), whose rule (pgrun.job_matches) is the list's own.
// The question is asked with the count: a dry run counts the matching jobs and how
// many the action would change, and sets the ceiling (the last job counted), so
// that the action touches no job that came after the count. The action then goes in
// batches of bulkBatch, each its own short transaction: the page's script runs them
// one request each and shows the progress; without script one request runs them all.

const (
	// bulkBatch is how many jobs one statement of a filter-wide action takes: each is
	// a short transaction whose row locks no claim waits behind for long, and the
	// page's progress moves at every one (docs/benchmarks.md, "Bulk actions").
	bulkBatch = 1000
	// bulkCountBatch is the batch of a count: a dry run locks nothing, so it takes
	// the engine's most (pgrun.max_bulk_batch).
	bulkCountBatch = 10_000
	// bulkCountBudget bounds the count a confirmation waits for. Past it the count
	// stops and says so: the action then covers the jobs counted (ids up to the last
	// one), and a second run takes the rest.
	bulkCountBudget = 10 * time.Second
	// bulkReason is the reason a cancel from the dashboard records.
	bulkReason = "cancelled from the dashboard"
	// bulkRest is how long a filter-wide action rests after each batch, as a share of
	// the batch's time, so that the claims of the runners keep most of the database:
	// as runner job retry does (cmd/runner's bulkRest has the measurements).
	bulkRest = 1.0
)

// bulkSpec is a filter-wide action.
type bulkSpec struct {
	verb  string // "Retry", as a question starts
	doing string // "Retrying", as progress starts
	done  string // "queued again", what became of a changed job
	stmt  string // the sqlapi statement of one batch
	// reason: the statement takes a reason after the batch's size.
	reason bool
}

var bulkActions = map[string]bulkSpec{
	"retry-matching":  {"Retry", "Retrying", "queued again", sqlapi.RetryMatching, false},
	"cancel-matching": {"Cancel", "Cancelling", "cancelled", sqlapi.CancelMatching, true},
	"delete-matching": {"Delete", "Deleting", "deleted", sqlapi.DeleteMatching, false},
}

// bulkTally sums up a filter-wide action, or its count, over the batches so far.
type bulkTally struct {
	Matched int64            `json:"matched"`
	Changed int64            `json:"changed"`
	Skipped map[string]int64 `json:"skipped,omitempty"`
	LastID  int64            `json:"last_id"` // where the next batch starts
	Done    bool             `json:"done"`    // no more batches
}

// batch runs one batch of b after the job t.LastID, at most size, and adds it to t.
// An action (not dry) rests after a batch that is not the last (bulkRest).
func (b bulkSpec) batch(ctx context.Context, s *Server, filter map[string]any, dry bool, t *bulkTally, size int) error {
	began := time.Now()
	raw, err := json.Marshal(filter)
	if err != nil {
		return err
	}
	args := []any{string(raw), dry, t.LastID, size}
	if b.reason {
		args = append(args, bulkReason)
	}
	var matched, changed int64
	var skipped map[string]int64
	var last *int64
	if err := s.pool.QueryRow(ctx, b.stmt, args...).Scan(&matched, &changed, &skipped, &last); err != nil {
		return err
	}
	t.Matched += matched
	t.Changed += changed
	for k, n := range skipped {
		if t.Skipped == nil {
			t.Skipped = map[string]int64{}
		}
		t.Skipped[k] += n
	}
	if last != nil {
		t.LastID = *last
	}
	t.Done = last == nil || matched < int64(size)
	if dry || t.Done {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(float64(time.Since(began)) * bulkRest)):
		return nil
	}
}

// bulkForm is a filter-wide action's form: the page's filter, and once counted the
// ceiling (upto, the last job the count saw; 0: none matched).
type bulkForm struct {
	filter  jobFilter
	upto    int64
	counted bool // upto was posted: the count was taken
}

func parseBulkForm(f form) (bulkForm, error) {
	if err := f.r.ParseForm(); err != nil {
		return bulkForm{}, err
	}
	q := url.Values{}
	for _, k := range []string{"queue", "kind", "state", "from", "to", "id", "parent", "run", "arg", "error", "error_group"} {
		q[k] = f.r.PostForm[k]
	}
	jf, err := parseJobFilter(q)
	if err != nil {
		return bulkForm{}, err
	}
	if !jf.HasFilter() {
		return bulkForm{}, errors.New("no filter: filter the jobs list first; an action on every job of the database is not offered")
	}
	b := bulkForm{filter: jf}
	if v := f.text("upto"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return b, fmt.Errorf("upto %q is not a job id", v)
		}
		b.upto, b.counted = n, true
	}
	return b, nil
}

// match is the filter the statements get: the page's, under the ceiling.
func (b bulkForm) match() map[string]any {
	m := b.filter.match()
	if b.counted {
		if hi, ok := m["id_max"].(int64); !ok || b.upto < hi {
			m["id_max"] = b.upto
		}
	}
	return m
}

// count is the dry run of spec on b's filter, within bulkCountBudget; complete says
// whether it got to the end.
func (spec bulkSpec) count(ctx context.Context, s *Server, b bulkForm) (t bulkTally, complete bool, err error) {
	start := time.Now()
	for !t.Done {
		if time.Since(start) > bulkCountBudget {
			return t, false, nil
		}
		if err := spec.batch(ctx, s, b.match(), true, &t, bulkCountBatch); err != nil {
			return t, false, err
		}
	}
	return t, true, nil
}

// question asks for spec on the jobs b's filter matches, naming how many the count
// t found and how many of them the action would change.
func (spec bulkSpec) question(b bulkForm, t bulkTally, complete bool) string {
	what := b.filter.Describe()
	verb := strings.ToLower(spec.verb)
	if t.Matched == 0 {
		return fmt.Sprintf("No job matches this filter (%s): there is nothing to %s.", what, verb)
	}
	var q string
	switch {
	case t.Changed == t.Matched:
		q = fmt.Sprintf("%s the %s jobs this filter matches (%s)?", spec.verb, num(t.Matched), what)
	case t.Changed == 0:
		q = fmt.Sprintf("This filter (%s) matches %s jobs, and none would be %s: %s.", what, num(t.Matched), spec.done,
			skippedText(t.Skipped))
	default:
		q = fmt.Sprintf("This filter (%s) matches %s jobs: %s would be %s, %s not (%s). %s those %s?", what,
			num(t.Matched), num(t.Changed), spec.done, num(t.Matched-t.Changed), skippedText(t.Skipped),
			spec.verb, num(t.Changed))
	}
	if !complete {
		q += fmt.Sprintf(" (The count stopped after %s, at job %d: this covers the jobs up to it; run it again for the rest.)",
			bulkCountBudget, t.LastID)
	}
	return q
}

// summary says what the action did: "1,520 jobs matched (queue emails, ...): 1,520
// queued again." and why any were left.
func (spec bulkSpec) summary(b bulkForm, t bulkTally) string {
	msg := fmt.Sprintf("%s jobs matched (%s): %s %s.", num(t.Matched), b.filter.Describe(), num(t.Changed), spec.done)
	if t.Matched > t.Changed {
		msg += fmt.Sprintf(" %s left as they were: %s.", num(t.Matched-t.Changed), skippedText(t.Skipped))
	}
	return msg
}

// skippedText words the reasons of skipped jobs: "170 not failed or cancelled, 7
// busy in another transaction (...)", largest first.
func skippedText(skipped map[string]int64) string {
	keys := make([]string, 0, len(skipped))
	for k := range skipped {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if skipped[a] != skipped[b] {
			return int(skipped[b] - skipped[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		why := sqlapi.BulkSkipReasons[k]
		if why == "" {
			why = k
		}
		parts = append(parts, num(skipped[k])+" "+why)
	}
	return strings.Join(parts, ", ")
}

// bulkAction carries out POST /actions/{retry,cancel,delete}-matching, after the
// checks of action. Unconfirmed, it counts and asks: as JSON for the page's script
// (mode=ask), else on the confirmation page, whose form carries the ceiling on.
// Confirmed, it acts: one batch after the job "after", as JSON, for the script
// (mode=batch: so_far carries the tally of the batches before, and the last batch
// leaves the outcome for the page it returns to), or every batch, and back to the
// page with the outcome.
func (s *Server) bulkAction(w http.ResponseWriter, r *http.Request, name string, spec bulkSpec) {
	f := form{r}
	mode := f.text("mode")
	asJSON := mode == "ask" || mode == "batch"
	failed := func(code int, err error) {
		if !asJSON {
			s.fail(w, r, code, err)
			return
		}
		s.log.Warn("ui: action failed", "action", name, "err", err)
		writeJSON(w, code, map[string]string{"error": describe(err)})
	}
	b, err := parseBulkForm(f)
	if err != nil {
		failed(http.StatusBadRequest, err)
		return
	}
	back := safeNext(f.text("return"))
	if f.text("confirmed") != "yes" {
		t, complete, err := spec.count(r.Context(), s, b)
		if err != nil {
			failed(http.StatusBadRequest, err)
			return
		}
		question := spec.question(b, t, complete)
		if mode == "ask" {
			writeJSON(w, http.StatusOK, map[string]any{"question": question, "matched": t.Matched,
				"changed": t.Changed, "upto": t.LastID, "complete": complete})
			return
		}
		d := confirmData{Action: name, Question: question, Return: back}
		for _, kv := range b.filter.Fields() {
			d.Fields = append(d.Fields, kv)
		}
		d.Fields = append(d.Fields, [2]string{"return", back}, [2]string{"upto", strconv.FormatInt(t.LastID, 10)})
		s.render(w, r, "confirm", "Confirm", d)
		return
	}
	if !b.counted {
		failed(http.StatusBadRequest, errors.New("upto is missing: confirm the count first"))
		return
	}
	if mode == "batch" {
		var t bulkTally
		if v := f.text("so_far"); v != "" {
			if err := json.Unmarshal([]byte(v), &t); err != nil {
				failed(http.StatusBadRequest, fmt.Errorf("so_far %q is not a tally", v))
				return
			}
		}
		if v := f.text("after"); v != "" {
			if t.LastID, err = strconv.ParseInt(v, 10, 64); err != nil || t.LastID < 0 {
				failed(http.StatusBadRequest, fmt.Errorf("after %q is not a job id", v))
				return
			}
		}
		if b.upto > 0 {
			if err := spec.batch(r.Context(), s, b.match(), false, &t, bulkBatch); err != nil {
				failed(http.StatusInternalServerError, err)
				return
			}
		}
		t.Done = t.Done || b.upto == 0 || t.LastID >= b.upto
		msg := spec.summary(b, t)
		if t.Done {
			s.log.Info("ui: action", "action", name, "outcome", msg, "user", s.actor(r), "remote", remoteAddr(r))
			setFlash(w, msg)
		}
		writeJSON(w, http.StatusOK, map[string]any{"tally": t,
			"progress": fmt.Sprintf("%s… %s jobs looked at, %s %s.", spec.doing, num(t.Matched), num(t.Changed), spec.done),
			"message":  msg})
		return
	}
	var t bulkTally
	for b.upto > 0 && !t.Done && t.LastID < b.upto {
		if err = spec.batch(r.Context(), s, b.match(), false, &t, bulkBatch); err != nil {
			break
		}
	}
	msg := spec.summary(b, t)
	if err != nil {
		s.log.Warn("ui: action failed", "action", name, "done", msg, "err", err)
		msg = "Failed: " + describe(err) + " Before that: " + msg
	} else {
		s.log.Info("ui: action", "action", name, "outcome", msg, "user", s.actor(r), "remote", remoteAddr(r))
	}
	setFlash(w, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// writeJSON writes v as a JSON answer with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
