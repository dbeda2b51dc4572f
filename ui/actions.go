package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgrun/pgrun"
)

const (
	// maxSelected bounds the jobs one "selected" action touches.
	maxSelected = 500
	// maxBulkRetry is the default and the ceiling of one "retry every failed job
	// matching" action (retry_jobs' max_jobs).
	maxBulkRetry = 10_000
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
	"retry-failed": {
		confirm: func(f form) (string, error) {
			b, err := parseBulk(f)
			return b.question(), err
		},
		do: func(ctx context.Context, s *Server, f form) (string, error) {
			b, _ := parseBulk(f)
			n, err := s.client.RetryJobs(ctx, pgrun.RetryFilter{Queue: b.queue, Kind: b.kind, Since: b.since, Max: b.limit})
			return fmt.Sprintf("%d failed jobs queued again.", n), err
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

// bulkRetry is a "retry every failed job matching" request: what retry_jobs takes.
type bulkRetry struct {
	queue, kind string
	since       time.Time
	limit       int
}

func parseBulk(f form) (bulkRetry, error) {
	b := bulkRetry{queue: f.text("queue"), kind: f.text("kind"), limit: maxBulkRetry}
	if v := f.text("since"); v != "" {
		var err error
		for _, layout := range timeLayouts {
			if b.since, err = time.ParseInLocation(layout, v, time.UTC); err == nil {
				break
			}
		}
		if err != nil {
			return b, fmt.Errorf("since %q is not a time: use 2026-11-24T10:00 (UTC) or RFC 3339", v)
		}
	}
	if v := f.text("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBulkRetry {
			return b, fmt.Errorf("limit %q is not valid: use 1 to %d", v, maxBulkRetry)
		}
		b.limit = n
	}
	return b, nil
}

// question says exactly what retry_jobs will redrive: it filters on queue, kind and
// failure time only.
func (b bulkRetry) question() string {
	var what []string
	if b.queue != "" {
		what = append(what, "in queue "+b.queue)
	}
	if b.kind != "" {
		what = append(what, "of kind "+b.kind)
	}
	if !b.since.IsZero() {
		what = append(what, "that failed since "+b.since.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if len(what) == 0 {
		what = append(what, "in every queue")
	}
	return fmt.Sprintf("Retry every failed job %s (oldest first, at most %s)?", strings.Join(what, " "), num(int64(b.limit)))
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
		s.log.Info("ui: action", "action", name, "outcome", msg, "remote", r.RemoteAddr)
	}
	setFlash(w, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}
