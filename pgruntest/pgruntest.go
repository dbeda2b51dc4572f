// Package pgruntest helps test code that enqueues and handles pgrun jobs, against a
// real database (as River's rivertest does for River): [RequireEnqueued] and
// [RequireNotEnqueued] check what a piece of code enqueued, and [WorkOne] runs one
// job through a handler with the same calls a worker makes (claim_job, then
// complete_job or fail_job), so the engine decides its fate as it would in
// production.
//
//	func TestSignupSendsWelcome(t *testing.T) {
//		tx := ... // the test's transaction
//		require.NoError(t, signup(ctx, tx, "ada@example.com"))
//		job := pgruntest.RequireEnqueued(t, tx, "welcome_email", &pgruntest.EnqueuedOpts{
//			Args: map[string]any{"to": "ada@example.com"},
//		})
//		...
//	}
//
// Every function takes a [pgrun.DB]: a pool, a connection, or the test's own
// transaction (which sees the jobs it enqueued before they commit).
package pgruntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// EnqueuedOpts narrows what [RequireEnqueued] and [RequireNotEnqueued] look for.
// Zero fields match anything.
type EnqueuedOpts struct {
	Queue    string
	Priority *int
	// Status is the states the job may be in; empty: any.
	Status []pgrun.JobStatus
	// Args the job's args must contain (JSON containment, as args @> Args in SQL:
	// every key given, with its value; other keys may be there too).
	Args        any
	UniqueKey   string
	MaxAttempts int
}

// RequireEnqueued fails the test unless a job of kind matching opts (nil: any such
// job) exists in db, and returns it: the newest if several match. The failure
// message lists the jobs that are there.
func RequireEnqueued(t testing.TB, db pgrun.DB, kind string, opts *EnqueuedOpts) *pgrun.Job {
	t.Helper()
	jobs := find(t, db, kind, opts)
	if len(jobs) == 0 {
		t.Fatalf("pgruntest: no job of kind %q%s was enqueued; %s", kind, describeOpts(opts), listing(t, db))
	}
	return jobs[0]
}

// RequireNotEnqueued fails the test if a job of kind matching opts (nil: any such
// job) exists in db, naming the jobs that match.
func RequireNotEnqueued(t testing.TB, db pgrun.DB, kind string, opts *EnqueuedOpts) {
	t.Helper()
	jobs := find(t, db, kind, opts)
	if len(jobs) > 0 {
		lines := make([]string, len(jobs))
		for i, j := range jobs {
			lines[i] = describe(j)
		}
		t.Fatalf("pgruntest: %d job(s) of kind %q%s were enqueued, expected none:\n%s",
			len(jobs), kind, describeOpts(opts), strings.Join(lines, "\n"))
	}
}

// Worker is the worker id [WorkOne] claims with (claimed_by of the jobs it works).
const Worker = "pgruntest"

// WorkOne claims the next due job of kind (in claim order: priority, run_at, id, in
// the queue of the first such job), runs handler on it, and reports the outcome as a
// worker does: the result with complete_job, or the error with fail_job as
// {"class": ..., "message": err.Error()}, where the class is the error's ErrorClass()
// if it has that method (as runner's errors do), else "error". The engine then
// decides the job's fate (retry with backoff, or failed for good). A handler that
// panics (or stops the test with t.FailNow) fails the job with class "panic", and
// the panic goes on. Returns the job as
// it is after the report; fails the test if no job of kind is due or the report
// matched nothing.
func WorkOne(ctx context.Context, t testing.TB, db pgrun.DB, kind string, handler func(context.Context, *pgrun.Job) (any, error)) *pgrun.Job {
	t.Helper()
	var queue string
	err := db.QueryRow(ctx, sqlapi.DueQueue, kind).Scan(&queue)
	if errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("pgruntest: no job of kind %q is due to work; %s", kind, listing(t, db))
	}
	if err != nil {
		t.Fatalf("pgruntest: find a due job of kind %q: %v", kind, err)
	}
	rows, err := db.Query(ctx, sqlapi.ClaimJob, queue, Worker, []string{kind})
	if err != nil {
		t.Fatalf("pgruntest: claim a job of kind %q: %v", kind, err)
	}
	job, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[pgrun.Job])
	if err != nil {
		t.Fatalf("pgruntest: claim a job of kind %q in queue %s: %v", kind, queue, err)
	}
	done := false
	defer func() {
		if done {
			return
		}
		// The handler panicked: record it as the runner would, then let it go on. No
		// panic value means it stopped the goroutine (t.FailNow): record that.
		p := recover()
		msg := "the handler did not return"
		if p != nil {
			msg = fmt.Sprint(p)
		}
		report(ctx, t, db, job, nil, errorJSON("panic", msg))
		if p != nil {
			panic(p)
		}
	}()
	result, herr := handler(ctx, job)
	done = true
	if herr != nil {
		class := "error"
		var ec interface{ ErrorClass() string }
		if errors.As(herr, &ec) {
			class = ec.ErrorClass()
		}
		report(ctx, t, db, job, nil, errorJSON(class, herr.Error()))
	} else {
		raw, err := json.Marshal(result)
		if err != nil {
			t.Fatalf("pgruntest: encode the result of job %d: %v", job.ID, err)
		}
		report(ctx, t, db, job, raw, nil)
	}
	rows, err = db.Query(ctx, sqlapi.GetJob, job.ID)
	if err != nil {
		t.Fatalf("pgruntest: read job %d: %v", job.ID, err)
	}
	after, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[pgrun.Job])
	if err != nil {
		t.Fatalf("pgruntest: read job %d: %v", job.ID, err)
	}
	return after
}

// report sends complete_job (failure nil) or fail_job for job's claim.
func report(ctx context.Context, t testing.TB, db pgrun.DB, job *pgrun.Job, result, failure []byte) {
	t.Helper()
	var ok bool
	var err error
	if failure == nil {
		err = db.QueryRow(ctx, sqlapi.CompleteJob, job.ID, job.Attempt, result, Worker, job.ClaimID).Scan(&ok)
	} else {
		// The error's class decides whether the engine retries (retryable NULL); the
		// status it leaves is NULL when the claim matched nothing.
		var status *string
		err = db.QueryRow(ctx, sqlapi.FailJob, job.ID, job.Attempt, failure, nil, Worker, job.ClaimID).Scan(&status)
		ok = status != nil
	}
	if err != nil {
		t.Fatalf("pgruntest: report job %d: %v", job.ID, err)
	}
	if !ok {
		t.Fatalf("pgruntest: the report of job %d (attempt %d) matched nothing: it was cancelled, reaped or finished meanwhile", job.ID, job.Attempt)
	}
}

// errorJSON is a fail_job error object.
func errorJSON(class, message string) []byte {
	raw, _ := json.Marshal(map[string]string{"class": class, "message": message})
	return raw
}

// find reads the jobs of kind matching opts, newest first.
func find(t testing.TB, db pgrun.DB, kind string, opts *EnqueuedOpts) []*pgrun.Job {
	t.Helper()
	if opts == nil {
		opts = &EnqueuedOpts{}
	}
	var statuses []string
	if len(opts.Status) > 0 {
		statuses = make([]string, len(opts.Status))
		for i, s := range opts.Status {
			statuses[i] = string(s)
		}
	}
	var args []byte
	if opts.Args != nil {
		var err error
		if args, err = json.Marshal(opts.Args); err != nil {
			t.Fatalf("pgruntest: encode the expected args: %v", err)
		}
	}
	rows, err := db.Query(t.Context(), sqlapi.FindEnqueued, kind, nullText(opts.Queue), opts.Priority,
		statuses, args, nullText(opts.UniqueKey), nullInt(opts.MaxAttempts))
	if err != nil {
		t.Fatalf("pgruntest: read jobs of kind %q: %v", kind, err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[pgrun.Job])
	if err != nil {
		t.Fatalf("pgruntest: read jobs of kind %q: %v", kind, err)
	}
	return jobs
}

// listingSize is how many of the newest jobs a failure message lists.
const listingSize = 20

// listing describes the newest jobs in db, for a failure message.
func listing(t testing.TB, db pgrun.DB) string {
	t.Helper()
	rows, err := db.Query(t.Context(), sqlapi.RecentJobs, listingSize+1)
	if err != nil {
		return fmt.Sprintf("listing the jobs failed: %v", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[pgrun.Job])
	if err != nil {
		return fmt.Sprintf("listing the jobs failed: %v", err)
	}
	if len(jobs) == 0 {
		return "there are no jobs at all"
	}
	var b strings.Builder
	if len(jobs) > listingSize {
		fmt.Fprintf(&b, "the newest %d jobs are:", listingSize)
		jobs = jobs[:listingSize]
	} else {
		fmt.Fprintf(&b, "the jobs are:")
	}
	for _, j := range jobs {
		b.WriteString("\n")
		b.WriteString(describe(j))
	}
	return b.String()
}

// describe is one line about j.
func describe(j *pgrun.Job) string {
	s := fmt.Sprintf("  job %d: kind %q, queue %s, %s, priority %d, attempt %d, args %s",
		j.ID, j.Kind, j.Queue, j.Status, j.Priority, j.Attempt, j.Args)
	if j.UniqueKey != nil {
		s += fmt.Sprintf(", unique key %q", *j.UniqueKey)
	}
	return s
}

// describeOpts renders opts for a failure message ("" when nothing narrows).
func describeOpts(opts *EnqueuedOpts) string {
	if opts == nil {
		return ""
	}
	var parts []string
	if opts.Queue != "" {
		parts = append(parts, "queue "+opts.Queue)
	}
	if opts.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority %d", *opts.Priority))
	}
	if len(opts.Status) > 0 {
		parts = append(parts, fmt.Sprintf("status in %v", opts.Status))
	}
	if opts.Args != nil {
		raw, _ := json.Marshal(opts.Args)
		parts = append(parts, "args containing "+string(raw))
	}
	if opts.UniqueKey != "" {
		parts = append(parts, fmt.Sprintf("unique key %q", opts.UniqueKey))
	}
	if opts.MaxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", opts.MaxAttempts))
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
