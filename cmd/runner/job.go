package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/progress"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

func init() { commands = append(commands, newJobCmd) }

// newJobCmd groups what an operator does to jobs. `runner job ID`, the form
// `job get ID` had before the noun-verb tree, still works (aliases.go).
func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Enqueue, show, list, cancel and retry jobs",
		Args:  cobra.ArbitraryArgs,
		RunE:  jobIDAlias(g),
	}
	cmd.AddCommand(newJobEnqueueCmd(g), newJobGetCmd(g), newJobWhyCmd(g), newJobListCmd(g), newJobCancelCmd(g), newJobRetryCmd(g))
	return cmd
}

func newJobEnqueueCmd(g *globals) *cobra.Command {
	var (
		spec    pgrun.JobSpec
		runAt   string
		delay   time.Duration
		count   int
		timeout time.Duration
		noBar   bool
		quiet   bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND [JSON]",
		Short: "Enqueue a job (or --count of them) with JSON args",
		Example: `  runner job enqueue echo '{"hello": "world"}'
  runner job enqueue sleep '{"ms": 2000}' --queue default --count 10
  runner job enqueue resize '{"w": 64}' --queue images --delay 30s --unique-key img-42
  runner job enqueue embed '{"doc": 7}' --queue gpu --model bge-small --model-required
  runner job enqueue charge '{"cents": 500}' --queue billing --sequence-key account:42
  runner job enqueue reindex '{"doc": 7}' --debounce-key reindex:7 --debounce 5s
  id=$(runner job enqueue sleep '{"ms": 60000}' -q) && runner job get "$id"`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Kind = args[0]
			raw := "{}"
			if len(args) == 2 {
				raw = args[1]
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
				return fmt.Errorf("args %q are not a JSON object", raw)
			}
			spec.Args = obj
			if count < 1 || count > maxEnqueueCount {
				return fmt.Errorf("--count must be 1 to %d, got %d", maxEnqueueCount, count)
			}
			if runAt != "" && delay != 0 {
				return fmt.Errorf("give --run-at or --delay, not both")
			}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339, runAt)
				if err != nil {
					return fmt.Errorf("--run-at %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", runAt)
				}
				spec.RunAt = &t
			}
			if delay < 0 {
				return fmt.Errorf("--delay %s is negative", delay)
			}
			if delay > 0 {
				t := time.Now().Add(delay)
				spec.RunAt = &t
			}
			spec.Timeout = timeout
			if err := checkEnqueueFlags(spec, cmd.Flags().Changed); err != nil {
				return err
			}
			if count > 1 && spec.UniqueKey != "" {
				return fmt.Errorf("--unique-key with --count %d would enqueue one job; drop one of them", count)
			}
			return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
				specs := make([]pgrun.JobSpec, count)
				for i := range specs {
					specs[i] = spec
				}
				jobs, err := enqueueWithBar(cmd.Context(), c, specs, cmd.ErrOrStderr(), noBar)
				if err != nil {
					return err
				}
				if quiet {
					for _, j := range jobs {
						fmt.Fprintln(cmd.OutOrStdout(), j.ID)
					}
					return nil
				}
				printEnqueued(cmd, jobs, spec)
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Queue, "queue", "default", "queue name")
	f.IntVar(&spec.Priority, "priority", 0, fmt.Sprintf("priority: lower runs first, %d (most urgent) to %d", pgrun.MinPriority, pgrun.MaxPriority))
	f.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	f.DurationVar(&delay, "delay", 0, "run after this delay")
	f.IntVar(&spec.MaxAttempts, "max-attempts", 0, "failed attempts before the job fails for good (default 25)")
	f.StringVar(&spec.UniqueKey, "unique-key", "", "deduplicate: while an active job holds the key, return it instead")
	f.DurationVar(&timeout, "timeout", 0, "time limit for one attempt: "+intervalRange+", or 0 for the queue's default_timeout (else 1h)")
	f.StringVar(&spec.Model, "model", "", "model the job needs (warm-model routing)")
	f.BoolVar(&spec.ModelRequired, "model-required", false, "with --model: only a worker with the model warm or declared may claim the job")
	f.DurationVar(&spec.UniqueWindow, "unique-window", 0, "with --unique-key: also return a job that finished with the key within this window: "+intervalRange)
	f.BoolVar(&spec.ReplaceDuplicate, "replace", false, "with --unique-key: a queued holder of the key takes these args, priority and run time")
	f.StringVar(&spec.ConcurrencyKey, "concurrency-key", "", "key the queue's concurrency_limit counts by (a tenant, say)")
	f.StringVar(&spec.SequenceKey, "sequence-key", "", "run the queue's jobs with this key one at a time, in enqueue order (account:42, say)")
	f.StringVar(&spec.DebounceKey, "debounce-key", "", "with --debounce: fold the enqueues of this key within the window into one job")
	f.DurationVar(&spec.Debounce, "debounce", 0, "with --debounce-key: the window, 10ms to 366 days")
	f.StringVar((*string)(&spec.DebounceEdge), "debounce-edge", "", "with --debounce: trailing (default: one job, latest args, run when the window ends) or leading (run the first, drop the rest)")
	f.IntVar(&count, "count", 1, fmt.Sprintf("enqueue this many identical jobs in one transaction (1 to %d)", maxEnqueueCount))
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the id of each job, one a line (for a script: id=$(runner job enqueue ... -q))")
	addNoProgressFlag(cmd, &noBar)
	return cmd
}

// Bounds on the flags of job enqueue, checked before anything connects.
const (
	// minJobInterval is the shortest --timeout or --unique-window. PostgreSQL keeps an
	// interval in whole microseconds, so a finer one was rounded up without a word,
	// and a limit under a millisecond is shorter than a round trip to the database:
	// such a value is a slip of the unit (1ns for 1s), not a wish.
	minJobInterval = time.Millisecond
	// maxJobInterval is the longest: a year with its leap day. An attempt or a
	// deduplication window longer than that is a slip of the unit too (9000h meant
	// as 9000s), next to the engine's default timeout of an hour.
	maxJobInterval = 366 * 24 * time.Hour
	// maxEnqueueCount bounds --count. The jobs go in one transaction and the command
	// holds every spec and every job returned: a million took about 1 GB and half a
	// minute on this project's machine, so more is a typo or a task for several runs.
	maxEnqueueCount = 1_000_000
)

// intervalRange says in words what checkInterval accepts.
var intervalRange = fmt.Sprintf("%s to %dh (%d days)", minJobInterval, maxJobInterval/time.Hour, maxJobInterval/(24*time.Hour))

// checkEnqueueFlags refuses the flags of job enqueue that would be dropped or
// changed without a word: a string flag given empty (the engine's default would be
// used instead), a flag that only means something with another, and a --timeout or
// --unique-window out of range. changed reports whether a flag was given. Errors are
// one line naming the flag and its value.
func checkEnqueueFlags(spec pgrun.JobSpec, changed func(string) bool) error {
	for _, f := range []struct{ name, value, want string }{
		{"queue", spec.Queue, "a queue name (" + pgrun.QueueNameFormat + ")"},
		{"unique-key", spec.UniqueKey, "a key"},
		{"model", spec.Model, "a model name"},
		{"concurrency-key", spec.ConcurrencyKey, "a key"},
		{"sequence-key", spec.SequenceKey, "a key"},
		{"debounce-key", spec.DebounceKey, "a key"},
		{"debounce-edge", string(spec.DebounceEdge), "trailing or leading"},
	} {
		if changed(f.name) && f.value == "" {
			return fmt.Errorf(`--%s "" is empty: give %s, or leave the flag out`, f.name, f.want)
		}
	}
	if changed("unique-window") && spec.UniqueKey == "" {
		return fmt.Errorf("--unique-window %s needs --unique-key: the window widens that key's deduplication", spec.UniqueWindow)
	}
	if spec.ReplaceDuplicate && spec.UniqueKey == "" {
		return errors.New("--replace needs --unique-key: it replaces the args of the key's queued holder")
	}
	if spec.ModelRequired && spec.Model == "" {
		return errors.New("--model-required needs --model: name the model the job requires")
	}
	if (spec.DebounceKey != "") != changed("debounce") {
		return errors.New("--debounce-key and --debounce go together: the enqueues of the key within the window fold into one job")
	}
	if changed("debounce-edge") && spec.DebounceEdge != pgrun.DebounceTrailing && spec.DebounceEdge != pgrun.DebounceLeading {
		return fmt.Errorf("--debounce-edge %q is not valid: give trailing (fold into one job run when the window ends) or leading (run the first, drop the rest)", spec.DebounceEdge)
	}
	if changed("debounce-edge") && spec.DebounceKey == "" {
		return errors.New("--debounce-edge needs --debounce-key and --debounce")
	}
	if spec.DebounceKey != "" && spec.RunAt != nil {
		return errors.New("--run-at and --delay cannot be combined with --debounce: a debounced job runs when its window ends (trailing) or at once (leading)")
	}
	if changed("debounce") {
		if err := checkInterval("debounce", spec.Debounce, ""); err != nil {
			return err
		}
	}
	if err := checkInterval("timeout", spec.Timeout, "0 for the queue's default_timeout"); err != nil {
		return err
	}
	if changed("unique-window") {
		return checkInterval("unique-window", spec.UniqueWindow, "")
	}
	return nil
}

// checkInterval refuses d, the value of duration flag name that becomes an interval
// in the database, outside minJobInterval to maxJobInterval. zero, when not empty,
// says what 0 means for the flag, which then accepts it.
func checkInterval(name string, d time.Duration, zero string) error {
	if (d == 0 && zero != "") || (d >= minJobInterval && d <= maxJobInterval) {
		return nil
	}
	what := "too short"
	switch {
	case d < 0:
		what = "negative"
	case d == 0:
		what = "not positive"
	case d > maxJobInterval:
		what = "too long"
	}
	give := "give " + intervalRange
	if zero != "" {
		give += ", or " + zero
	}
	return fmt.Errorf("--%s %s is %s: %s", name, d, what, give)
}

// printEnqueued says what an enqueue did: the one job (or the holder of its unique
// key, when nothing was inserted), or the range of ids of many.
func printEnqueued(cmd *cobra.Command, jobs []*pgrun.Job, spec pgrun.JobSpec) {
	out := cmd.OutOrStdout()
	if len(jobs) == 1 {
		j := jobs[0]
		if j.Deduplicated {
			fmt.Fprintf(out, "job %d %s (%s, queue %s): duplicate, unique key %q is held by this job; nothing enqueued",
				j.ID, j.Status, j.Kind, j.Queue, spec.UniqueKey)
			if spec.ReplaceDuplicate && j.Status == pgrun.StatusQueued {
				fmt.Fprint(out, " (it took these args, priority and run time)")
			}
			fmt.Fprintln(out)
			return
		}
		if j.Folded {
			fmt.Fprintf(out, "job %d %s (%s, queue %s): folded into this job of debounce key %q",
				j.ID, j.Status, j.Kind, j.Queue, spec.DebounceKey)
			if spec.DebounceEdge != pgrun.DebounceLeading {
				fmt.Fprintf(out, " (it took these args and runs at %s)", j.RunAt.Format(time.RFC3339))
			} else {
				fmt.Fprint(out, "; nothing enqueued")
			}
			fmt.Fprintln(out)
			return
		}
		fmt.Fprintf(out, "job %d %s (%s, queue %s)", j.ID, j.Status, j.Kind, j.Queue)
		if j.Status == pgrun.StatusPending && j.SequenceKey != nil {
			fmt.Fprintf(out, ", held behind the jobs before it in sequence %q", *j.SequenceKey)
		}
		fmt.Fprintln(out)
		return
	}
	var fresh []*pgrun.Job
	folded := 0
	for _, j := range jobs {
		switch {
		case j.Folded:
			folded++
		case !j.Deduplicated:
			fresh = append(fresh, j)
		}
	}
	if len(fresh) == 0 {
		fmt.Fprintf(out, "0 jobs enqueued, %d duplicates", len(jobs)-folded)
		if folded > 0 {
			fmt.Fprintf(out, ", %d folded", folded)
		}
		fmt.Fprintln(out)
		return
	}
	lo, hi := fresh[0].ID, fresh[0].ID
	for _, j := range fresh {
		lo, hi = min(lo, j.ID), max(hi, j.ID)
	}
	fmt.Fprintf(out, "%d jobs enqueued (ids %d..%d, queue %s)", len(fresh), lo, hi, fresh[0].Queue)
	if d := len(jobs) - len(fresh) - folded; d > 0 {
		fmt.Fprintf(out, ", %d duplicates", d)
	}
	if folded > 0 {
		fmt.Fprintf(out, ", %d folded into job %d", folded, jobs[len(jobs)-1].ID)
	}
	fmt.Fprintln(out)
}

func newJobGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one job: its row, progress, durable steps, what it waits for and its timeline",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
				return showJob(cmd, c, id)
			})(cmd, args)
		},
	}
}

// showJob prints job id's row, what it waits for while parked, the calls its
// durable handler recorded and its whole timeline. Steps and the parked line come
// from the timeline's own entries (pgrun.job_timeline), so that they need no
// privilege beyond it.
func showJob(cmd *cobra.Command, c *pgrun.Client, id int64) error {
	ctx := cmd.Context()
	j, err := c.GetJob(ctx, id)
	if errors.Is(err, pgrun.ErrNotFound) {
		return fmt.Errorf("job %d does not exist", id)
	}
	if err != nil {
		return err
	}
	timeline, err := c.Timeline(ctx, id)
	if err != nil {
		return err
	}
	steps, parked := durableSteps(timeline)
	out := cmd.OutOrStdout()
	tw := table(out)
	fmt.Fprintf(tw, "job\t%d\n", j.ID)
	fmt.Fprintf(tw, "kind\t%s\n", j.Kind)
	fmt.Fprintf(tw, "queue\t%s\n", j.Queue)
	fmt.Fprintf(tw, "status\t%s\n", j.Status)
	if parked != nil {
		fmt.Fprintf(tw, "parked\t%s\n", parked)
	}
	if why := jobBlocker(ctx, c, j); why != "" {
		fmt.Fprintf(tw, "not claimed\t%s\n", why)
	}
	fmt.Fprintf(tw, "attempt\t%d (failures %d of %d allowed, lease expiries %d)\n", j.Attempt, j.Failures, j.MaxAttempts, j.LeaseExpiries)
	fmt.Fprintf(tw, "priority\t%d\n", j.Priority)
	fmt.Fprintf(tw, "run at\t%s\n", orDash(&j.RunAt))
	fmt.Fprintf(tw, "created\t%s\n", orDash(&j.CreatedAt))
	fmt.Fprintf(tw, "started\t%s\n", orDash(j.StartedAt))
	fmt.Fprintf(tw, "finished\t%s\n", orDash(j.FinishedAt))
	fmt.Fprintf(tw, "worker\t%s\n", orDash(j.ClaimedBy))
	fmt.Fprintf(tw, "lease until\t%s\n", orDash(j.LeaseExpiresAt))
	fmt.Fprintf(tw, "timeout\t%s\n", orDash(j.Timeout))
	if j.UniqueKey != nil {
		fmt.Fprintf(tw, "unique key\t%s\n", *j.UniqueKey)
	}
	if j.ParentID != nil {
		fmt.Fprintf(tw, "parent\t%d\n", *j.ParentID)
	}
	fmt.Fprintf(tw, "args\t%s\n", compactJSON(j.Args))
	fmt.Fprintf(tw, "result\t%s\n", compactJSON(j.Result))
	fmt.Fprintf(tw, "error\t%s\n", compactJSON(j.Error))
	if j.ProgressTotal != nil {
		fmt.Fprintf(tw, "progress\t%s\n", progressBar(j.ProgressCurrent, *j.ProgressTotal))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(steps) > 0 {
		fmt.Fprintf(out, "\nsteps (%d)\n", len(steps))
		tw = table(out)
		fmt.Fprintf(tw, "position\tname\tkind\tat\tattempt\tresult\tdetail\n")
		for _, st := range steps {
			size := "-"
			if st.ResultBytes != nil {
				size = fmt.Sprintf("%d B", *st.ResultBytes)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", *st.Position, st.Step, st.Kind,
				st.At.Local().Format("2006-01-02 15:04:05.000"), orDash(st.Attempt), size, st.detail())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\ntimeline (%d)\n", len(timeline))
	tw = table(out)
	fmt.Fprintf(tw, "at\tattempt\tlevel\tevent\tmessage\tfields\n")
	for _, e := range timeline {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format("2006-01-02 15:04:05.000"), orDash(e.Attempt),
			e.Level, e.Event, orDash(e.Message), compactJSON(e.Fields))
	}
	return tw.Flush()
}

// jobStep is one call a durable handler recorded, read from its timeline entry
// (sqlapi.TimelineStepEvents; its fields are 71_timeline.sql's).
type jobStep struct {
	At          time.Time  `json:"-"` // the entry's
	Attempt     *int       `json:"-"` // the entry's
	Step        string     `json:"step"`
	Kind        string     `json:"kind"`
	Position    *int       `json:"position"`
	ResultBytes *int64     `json:"result_bytes"`
	Until       *time.Time `json:"until"`
	Event       string     `json:"event"`
	Job         *int64     `json:"job"`
	Status      string     `json:"status"`
	TimedOut    bool       `json:"timed_out"`
}

// detail says what a sleep, an await or a spawn was about ("-" for a step).
func (s jobStep) detail() string {
	var parts []string
	if s.Until != nil {
		parts = append(parts, "until "+orDash(s.Until))
	}
	if s.Event != "" {
		parts = append(parts, "event "+s.Event)
	}
	if s.Job != nil {
		parts = append(parts, fmt.Sprintf("job %d", *s.Job))
	}
	if s.Status != "" {
		parts = append(parts, s.Status)
	}
	if s.TimedOut {
		parts = append(parts, "timed out")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// jobParked is what a parked job waits for, read from its timeline's
// sqlapi.TimelineParkedEvent entry (pgrun.job_parked).
type jobParked struct {
	WaitingFor string    `json:"waiting_for"` // event, job or sleep
	Event      string    `json:"event"`
	Job        *int64    `json:"job"`
	Until      time.Time `json:"until"`
	Step       string    `json:"step"`
	TimedOut   bool      `json:"timed_out"`
}

// String is the parked line: "waiting for event payment:42 until ... (step pay)".
func (p jobParked) String() string {
	var what string
	switch p.WaitingFor {
	case "sleep":
		what = "sleeping"
	case "event":
		what = "waiting for event " + p.Event
	default:
		what = "waiting for job " + orDash(p.Job)
	}
	s := fmt.Sprintf("%s until %s (step %s)", what, orDash(&p.Until), p.Step)
	if p.TimedOut {
		s += ": timed out, queued to resume"
	}
	return s
}

// durableSteps picks a job's recorded calls, oldest first, and its parked line (nil
// when it is not parked) out of its timeline. An entry whose fields do not read as
// a step (a handler may emit an event of any name) is left out.
func durableSteps(timeline []pgrun.TimelineEntry) (steps []jobStep, parked *jobParked) {
	for _, e := range timeline {
		switch {
		case e.Event == sqlapi.TimelineParkedEvent:
			var p jobParked
			if json.Unmarshal(e.Fields, &p) == nil && p.WaitingFor != "" {
				parked = &p
			}
		case slices.Contains(sqlapi.TimelineStepEvents, e.Event):
			st := jobStep{At: e.At, Attempt: e.Attempt}
			if json.Unmarshal(e.Fields, &st) == nil && st.Step != "" && st.Position != nil {
				steps = append(steps, st)
			}
		}
	}
	return steps, parked
}

var statuses = []pgrun.JobStatus{pgrun.StatusPending, pgrun.StatusQueued, pgrun.StatusRunning,
	pgrun.StatusWaiting, pgrun.StatusSucceeded, pgrun.StatusFailed, pgrun.StatusCancelled, pgrun.StatusSkipped}

func newJobListCmd(g *globals) *cobra.Command {
	var (
		state, queue, kind string
		limit              int
		after              int64
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List jobs, newest first (dead letters: --state failed)",
		Example: "  runner job list --state failed --queue images --limit 20\n  runner job list --after 1200   # the next page: older than job 1200",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state != "" && !slices.Contains(statuses, pgrun.JobStatus(state)) {
				return fmt.Errorf("--state %q is not one of %v", state, statuses)
			}
			if limit < 1 || limit > pgrun.MaxPageSize {
				return fmt.Errorf("--limit must be 1 to %d, got %d", pgrun.MaxPageSize, limit)
			}
			if after < 0 {
				return fmt.Errorf("--after %d is negative: give the last id of the previous page", after)
			}
			f := pgrun.JobFilter{Queue: queue, Kind: kind, Limit: limit, After: after, Newest: true}
			if state != "" {
				f.Status = []pgrun.JobStatus{pgrun.JobStatus(state)}
			}
			return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
				jobs, err := c.ListJobs(cmd.Context(), f)
				if err != nil {
					return err
				}
				tw := table(cmd.OutOrStdout())
				fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATUS\tATTEMPT\tFAILURES\tAGE\tERROR")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.Status,
						j.Attempt, j.Failures, ago(j.CreatedAt), errorMessage(j.Error))
				}
				if len(jobs) == 0 {
					fmt.Fprintln(tw, "(no jobs match)")
				}
				return tw.Flush()
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this status")
	cmd.Flags().StringVar(&queue, "queue", "", "only jobs of this queue")
	cmd.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("at most this many (1 to %d)", pgrun.MaxPageSize))
	cmd.Flags().Int64Var(&after, "after", 0, "page on: only jobs older than this id (the last one listed)")
	return cmd
}

func newJobCancelCmd(g *globals) *cobra.Command {
	var reason string
	var bf bulkFlags
	cmd := &cobra.Command{
		Use:   "cancel [ID]",
		Short: "Cancel a job, or every unfinished job a filter matches; a running one has its handler's context cancelled within a second",
		Example: `  runner job cancel 42 --reason "bad input"
  runner job cancel --queue emails --error "mailbox full" --dry-run   # how many, changing nothing
  runner job cancel --queue emails --kind echo --state queued --reason "sender blocked"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if bf.given(cmd.Flags().Changed) {
					return fmt.Errorf("give a job ID or filters (%s), not both", bf.names())
				}
				return transition(cmd, g, args[0], "cancelled", func(c *pgrun.Client, id int64) (*pgrun.Job, error) {
					before, err := c.GetJob(cmd.Context(), id)
					if err != nil {
						return nil, err
					}
					j, err := c.Cancel(cmd.Context(), id, reason)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "job %d cancelled (was %s)\n", id, before.Status)
					}
					return j, err
				})
			}
			if !bf.given(cmd.Flags().Changed) {
				return fmt.Errorf("give a job ID, or filters (%s) to cancel the unfinished jobs they match", bf.names())
			}
			op := bulkOp{stmt: sqlapi.CancelMatching, done: "cancelled", label: "cancel", reason: &reason}
			return bf.do(cmd, g, op, activeStates)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the job's events")
	bf.add(cmd, "cancel", false)
	return cmd
}

func newJobRetryCmd(g *globals) *cobra.Command {
	var bf bulkFlags
	cmd := &cobra.Command{
		Use:   "retry [ID]",
		Short: "Redrive a failed or cancelled job, or every failed job a filter matches (--queue, --kind, --error, ...)",
		Example: `  runner job retry 42
  runner job retry --kind resize --queue images --limit 500
  runner job retry --queue images --since 1h          # what failed in the last hour
  runner job retry --queue emails --kind echo --error 421 --dry-run   # how many, changing nothing
  runner job retry --since 2030-01-02T15:04:05Z`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if bf.given(cmd.Flags().Changed) {
					return fmt.Errorf("give a job ID or --queue/--kind/--since, not both: the filters (%s) select jobs in bulk", bf.names())
				}
				return transition(cmd, g, args[0], "queued again", func(c *pgrun.Client, id int64) (*pgrun.Job, error) {
					j, err := c.Retry(cmd.Context(), id)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "job %d queued again\n", id)
					}
					return j, err
				})
			}
			if !bf.given(cmd.Flags().Changed) {
				return fmt.Errorf("give a job ID, or --kind and/or --queue and/or --since (or another filter: %s) to redrive failed jobs in bulk", bf.names())
			}
			return bf.do(cmd, g, bulkOp{stmt: sqlapi.RetryMatching, done: "queued again", label: "retry"}, []string{string(pgrun.StatusFailed)})
		},
	}
	bf.add(cmd, "retry", true)
	return cmd
}

// activeStates are the states job cancel acts on when --state is not given.
var activeStates = []string{string(pgrun.StatusPending), string(pgrun.StatusQueued), string(pgrun.StatusRunning),
	string(pgrun.StatusWaiting)}

const (
	// bulkBatch is how many jobs one statement of a bulk retry or cancel takes: each
	// is its own short transaction, so that claims never wait long behind its row
	// locks, and the bar moves at every one (docs/benchmarks.md, "Bulk actions").
	bulkBatch = 1000
	// bulkCountBatch is the batch of a dry run, which locks nothing: the engine's
	// most (pgrun.max_bulk_batch).
	bulkCountBatch = 10_000
	// bulkRest is how long a bulk operation rests after each batch, as a share of
	// the batch's own time. A batch keeps a core of the database busy and writes a
	// burst of WAL that the claims' commits queue behind; resting as long again keeps
	// the runners' claims at 0.84-0.88 of their rate during a retry of 100,000 jobs
	// on a 2-core machine (0.73-0.78 without), which then takes 12 s instead of 6 of
	// the 30 allowed (BenchmarkBulkRetry; docs/benchmarks.md, "Bulk actions").
	bulkRest = 1.0
)

// bulkFlags are the filters of job retry and job cancel in bulk: those of the
// dashboard's jobs page, which become the filter of pgrun.retry_matching and
// cancel_matching (52_bulk.sql's keys), so that the command touches exactly the jobs
// the page lists for the same filter.
type bulkFlags struct {
	queue, kind, errText, arg, args string
	from, to, since                 string
	states                          []string
	parent, run                     int64
	dryRun, noBar                   bool
	limit                           int
	hasSince                        bool // the command takes --since
}

// filterFlags are the flags that filter, for messages.
var filterFlags = []string{"queue", "kind", "state", "error", "arg", "args", "from", "to", "since", "parent", "run"}

// add registers the flags on cmd; since: it takes --since (failed at or after).
func (b *bulkFlags) add(cmd *cobra.Command, verb string, since bool) {
	f := cmd.Flags()
	f.StringVar(&b.queue, "queue", "", "bulk: jobs of this queue")
	f.StringVar(&b.kind, "kind", "", "bulk: jobs of this kind")
	def := "failed"
	if verb == "cancel" {
		def = strings.Join(activeStates, ",")
	}
	f.StringSliceVar(&b.states, "state", nil, "bulk: jobs in these states, comma-separated or repeated (default "+def+")")
	f.StringVar(&b.errText, "error", "", "bulk: jobs whose error message contains this text, in any case (a job that failed and then succeeded has none)")
	f.StringVar(&b.arg, "arg", "", "bulk: jobs whose args have this key, or key=value")
	f.StringVar(&b.args, "args", "", `bulk: jobs whose args contain this JSON object, such as '{"tenant": 7}'`)
	f.StringVar(&b.from, "from", "", "bulk: jobs enqueued at or after this RFC 3339 time, or this long ago (2h)")
	f.StringVar(&b.to, "to", "", "bulk: jobs enqueued before this RFC 3339 time, or this long ago")
	if b.hasSince = since; since {
		f.StringVar(&b.since, "since", "", "bulk: jobs that failed within this long (1h) or at or after this RFC 3339 time")
	}
	f.Int64Var(&b.parent, "parent", 0, "bulk: children of this job")
	f.Int64Var(&b.run, "run", 0, "bulk: jobs of this workflow run")
	f.BoolVar(&b.dryRun, "dry-run", false, "bulk: print how many jobs match and what would be done, and change nothing")
	f.IntVar(&b.limit, "limit", 0, "bulk: at most this many matching jobs, oldest first (0: every one)")
	addNoProgressFlag(cmd, &b.noBar)
}

// given reports whether any filter flag was given.
func (b *bulkFlags) given(changed func(string) bool) bool {
	return slices.ContainsFunc(filterFlags, changed)
}

// names lists the command's filter flags: "--queue, --kind, ...".
func (b *bulkFlags) names() string {
	names := slices.DeleteFunc(slices.Clone(filterFlags), func(f string) bool { return f == "since" && !b.hasSince })
	return "--" + strings.Join(names, ", --")
}

// filter is the flags as a filter of 52_bulk.sql, with states when --state is not
// given; now is where the durations count back from.
func (b *bulkFlags) filter(now time.Time, states []string) (map[string]any, error) {
	m := map[string]any{}
	for k, v := range map[string]string{"queue": b.queue, "kind": b.kind, "error": b.errText} {
		if v != "" {
			m[k] = v
		}
	}
	if len(b.states) > 0 {
		states = nil
		for _, st := range b.states {
			st = strings.TrimSpace(st)
			if !slices.Contains(statuses, pgrun.JobStatus(st)) {
				return nil, fmt.Errorf("--state %q is not one of %v", st, statuses)
			}
			states = append(states, st)
		}
	}
	m["states"] = states
	if b.arg != "" {
		k, v, hasValue := strings.Cut(b.arg, "=")
		m["arg"] = k
		if hasValue {
			m["arg_value"] = v
		}
	}
	if b.args != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(b.args), &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("--args %q is not a JSON object", b.args)
		}
		m["args"] = obj
	}
	for _, t := range []struct{ flag, value, key string }{
		{"from", b.from, "created_from"}, {"to", b.to, "created_to"}, {"since", b.since, "finished_from"},
	} {
		if t.value == "" {
			continue
		}
		at, err := parseWhen(t.flag, t.value, now)
		if err != nil {
			return nil, err
		}
		m[t.key] = at.UTC().Format(time.RFC3339Nano)
	}
	for _, p := range []struct {
		flag string
		v    int64
	}{{"parent", b.parent}, {"run", b.run}} {
		if p.v < 0 {
			return nil, fmt.Errorf("--%s %d is not a job id", p.flag, p.v)
		}
		if p.v > 0 {
			m[p.flag] = p.v
		}
	}
	if b.limit < 0 {
		return nil, fmt.Errorf("--limit must be 0 (every matching job) or more, got %d", b.limit)
	}
	return m, nil
}

// bulkOp is a bulk operation of the CLI: its statement (sqlapi.RetryMatching or
// CancelMatching), what became of a job it changed, its bar's label and, for a
// cancel, the reason.
type bulkOp struct {
	stmt, done, label string
	reason            *string
}

// bulkTally sums the batches of a bulk operation.
type bulkTally struct {
	matched, changed int64
	skipped          map[string]int64
	lastID           int64
	done             bool
}

// batch runs one batch of op on filter after t.lastID, at most size jobs, and adds it
// to t.
func (op bulkOp) batch(ctx context.Context, pool *pgxpool.Pool, filter map[string]any, dry bool, size int, t *bulkTally) error {
	raw, err := json.Marshal(filter)
	if err != nil {
		return err
	}
	args := []any{string(raw), dry, t.lastID, size}
	if op.reason != nil {
		args = append(args, nilIfEmpty(*op.reason))
	}
	var matched, changed int64
	var skipped map[string]int64
	var last *int64
	if err := pool.QueryRow(ctx, op.stmt, args...).Scan(&matched, &changed, &skipped, &last); err != nil {
		return err
	}
	t.matched += matched
	t.changed += changed
	for k, n := range skipped {
		if t.skipped == nil {
			t.skipped = map[string]int64{}
		}
		t.skipped[k] += n
	}
	if last != nil {
		t.lastID = *last
	}
	t.done = last == nil || matched < int64(size)
	return nil
}

// all runs op on filter batch by batch until the end or limit jobs (0: no limit),
// batches of at most size, calling each after every batch.
func (op bulkOp) all(ctx context.Context, pool *pgxpool.Pool, filter map[string]any, dry bool, size, limit int,
	each func(bulkTally)) (bulkTally, error) {
	var t bulkTally
	for !t.done {
		n := size
		if limit > 0 {
			if left := int64(limit) - t.matched; left < int64(n) {
				n = int(left)
			}
			if n <= 0 {
				break
			}
		}
		began := time.Now()
		if err := op.batch(ctx, pool, filter, dry, n, &t); err != nil {
			return t, err
		}
		each(t)
		if !dry && !t.done {
			if err := rest(ctx, time.Since(began)); err != nil {
				return t, err
			}
		}
	}
	return t, nil
}

// rest waits after a batch that took d as long again (bulkRest), or until ctx ends.
func rest(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(float64(d) * bulkRest)):
		return nil
	}
}

// do is job retry or job cancel in bulk: the filter of the flags (states when --state
// is not given), counted only with --dry-run, else done in batches of bulkBatch, each
// its own transaction, with a bar on a terminal. A bar needs the total first: it
// counts, and then acts on the jobs up to the last one counted.
func (b *bulkFlags) do(cmd *cobra.Command, g *globals, op bulkOp, states []string) error {
	filter, err := b.filter(time.Now(), states)
	if err != nil {
		return err
	}
	return g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
		ctx, out := cmd.Context(), cmd.OutOrStdout()
		if b.dryRun {
			t, err := op.all(ctx, pool, filter, true, bulkCountBatch, b.limit, func(bulkTally) {})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "dry run: %d jobs match (%s)", t.matched, describeFilter(filter))
			if t.matched > 0 {
				fmt.Fprintf(out, ": %d would be %s", t.changed, op.done)
				if t.matched > t.changed {
					fmt.Fprintf(out, ", %d would not (%s)", t.matched-t.changed, skippedText(t.skipped))
				}
			}
			fmt.Fprintln(out, "; nothing changed")
			return nil
		}
		bar := newBar(cmd.ErrOrStderr(), op.label, 0, b.noBar)
		act := true
		if progress.Enabled(cmd.ErrOrStderr(), b.noBar) {
			counted, err := op.all(ctx, pool, filter, true, bulkCountBatch, b.limit, func(bulkTally) {})
			if err != nil {
				return err
			}
			filter["id_max"], act = counted.lastID, counted.matched > 0
			bar = newBar(cmd.ErrOrStderr(), op.label, int(counted.matched), b.noBar)
		}
		var t bulkTally
		if act {
			t, err = op.all(ctx, pool, filter, false, bulkBatch, b.limit, func(t bulkTally) { bar.Set(t.matched) })
		}
		bar.Done()
		if err != nil {
			return fmt.Errorf("%s stopped after %d of the matching jobs (%d %s): %w", op.label, t.matched, t.changed, op.done, err)
		}
		what := "jobs"
		if st, _ := filter["states"].([]string); len(st) == 1 && st[0] == string(pgrun.StatusFailed) {
			what = "failed jobs"
		}
		fmt.Fprintf(out, "%d %s %s\n", t.changed, what, op.done)
		if t.matched > t.changed {
			fmt.Fprintf(out, "%d matching jobs left as they were: %s\n", t.matched-t.changed, skippedText(t.skipped))
		}
		return nil
	})(cmd, nil)
}

// describeFilter says what filter selects, key by key in a fixed order.
func describeFilter(filter map[string]any) string {
	var parts []string
	for _, k := range []string{"queue", "kind", "states", "error", "arg", "arg_value", "args", "created_from",
		"created_to", "finished_from", "parent", "run"} {
		v, ok := filter[k]
		if !ok {
			continue
		}
		switch x := v.(type) {
		case []string:
			parts = append(parts, k+" "+strings.Join(x, ","))
		case string:
			if k == "error" || k == "arg_value" {
				x = strconv.Quote(x)
			}
			parts = append(parts, k+" "+x)
		default:
			raw, _ := json.Marshal(x)
			parts = append(parts, k+" "+string(raw))
		}
	}
	return strings.Join(parts, ", ")
}

// skippedText words the reasons of the jobs a bulk operation left: "170 not failed
// or cancelled, 7 busy in another transaction (...)", largest first.
func skippedText(skipped map[string]int64) string {
	keys := slices.Collect(maps.Keys(skipped))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(skipped[b], skipped[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		why := sqlapi.BulkSkipReasons[k]
		if why == "" {
			why = k
		}
		parts = append(parts, fmt.Sprintf("%d %s", skipped[k], why))
	}
	return strings.Join(parts, ", ")
}

// nilIfEmpty is s, or NULL for "".
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// parseSince reads --since: a duration back from now ("90m", "24h") or an RFC 3339
// time.
func parseSince(s string, now time.Time) (time.Time, error) { return parseWhen("since", s, now) }

// parseWhen reads time flag --name: a duration back from now ("90m", "24h") or an
// RFC 3339 time.
func parseWhen(name, s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--%s %s is not positive: give how long back, such as 1h", name, s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q is neither a duration such as 1h nor an RFC 3339 time such as 2030-01-02T15:04:05Z", name, s)
	}
	return t, nil
}

// transition runs an operator transition on job idArg and turns the client's
// sentinel errors into one readable line.
func transition(cmd *cobra.Command, g *globals, idArg, what string, do func(*pgrun.Client, int64) (*pgrun.Job, error)) error {
	id, err := parseID(idArg)
	if err != nil {
		return err
	}
	return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
		j, err := do(c, id)
		switch {
		case errors.Is(err, pgrun.ErrNotFound):
			return fmt.Errorf("job %d does not exist", id)
		case errors.Is(err, pgrun.ErrFinished), errors.Is(err, pgrun.ErrNotRetryable):
			return fmt.Errorf("job %d is %s, so it cannot be %s", id, j.Status, what)
		}
		return err
	})(cmd, nil)
}

// progressBar renders "[#########-----------]  45% 450/1000".
func progressBar(cur, total int64) string {
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(min(cur, total)) / float64(total)
	}
	return fmt.Sprintf("%s %3.0f%% %d/%d", progress.Cells(cur, total, 20), pct, cur, total)
}
