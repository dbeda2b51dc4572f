package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// examples/durable-order is run as its README runs it: a worker, an order enqueued
// from the command line, the worker killed with SIGKILL while the order waits for its
// payment, a new worker, the payment emitted from SQL, and `wait` (Client.Wait)
// reporting the end.

// durableOrder is the example built for one test, run against the test's database
// with PGRUN_DATABASE_URL set, as the README's reader has it.
type durableOrder struct {
	t   *testing.T
	b   *testkit.DB
	bin string
}

func newDurableOrder(t *testing.T, b *testkit.DB) *durableOrder {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "durable-order")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/durable-order").CombinedOutput()
	require.NoError(t, err, "go build ./examples/durable-order:\n%s", out)
	return &durableOrder{t: t, b: b, bin: bin}
}

func (d *durableOrder) command(args ...string) *exec.Cmd {
	cmd := exec.CommandContext(d.b.Ctx, d.bin, args...)
	cmd.Env = append(os.Environ(), "PGRUN_DATABASE_URL="+d.b.URL)
	cmd.Dir = repoRoot
	return cmd
}

// start starts a long-running command of the example (work, wait).
func (d *durableOrder) start(name string, args ...string) *testkit.Proc {
	d.t.Helper()
	return testkit.StartProc(d.t, name, d.command(args...))
}

// enqueue places order n with the given flags and returns its job's id, which the
// command prints alone on stdout.
func (d *durableOrder) enqueue(n int, flags ...string) int64 {
	d.t.Helper()
	cmd := d.command(append(append([]string{"enqueue"}, flags...), strconv.Itoa(n))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(d.t, cmd.Run(), "enqueue %d:\n%s", n, stderr.String())
	id, err := strconv.ParseInt(strings.TrimSpace(stdout.String()), 10, 64)
	require.NoError(d.t, err, "enqueue prints the job's id alone, got %q", stdout.String())
	require.Contains(d.t, stderr.String(), "payment:"+strconv.Itoa(n), "enqueue names the event the order waits for")
	return id
}

// steps lists job id's recorded calls as name@position/kind#attempt, in position order.
func (d *durableOrder) steps(id int64) []string {
	d.t.Helper()
	var steps []string
	require.NoError(d.t, d.b.Pool.QueryRow(d.b.Ctx, `
		select coalesce(array_agg(name || '@' || position || '/' || kind || '#' || attempt order by position), '{}')
		from pgrun.job_steps where job_id = $1`, id).Scan(&steps))
	return steps
}

// available is the example's stock of widgets.
func (d *durableOrder) available() int {
	return countRows(d.t, d.b, `select available from durable_order.stock where sku = 'widget'`)
}

// The order survives a SIGKILL of its worker while it waits for the payment: a new
// worker resumes it when the payment is emitted, the card is charged once (by the
// first worker, never again), the receipt is sent once (by the second), and every
// call is recorded once, in the handler's order, under the attempt that made it.
func TestDurableOrderExampleResumesAfterSIGKILL(t *testing.T) {
	b := testkit.Setup(t)
	d := newDurableOrder(t, b)

	first := d.start("first worker", "work")
	id := d.enqueue(1)
	testkit.Eventually(t, 30*time.Second, "order 1 to wait for its payment", func() bool {
		return testkit.JobStatus(t, b, id) == pgrun.StatusWaiting
	})
	require.Equal(t, []string{"reserve@0/step#1", "charge@1/step#1"}, d.steps(id), "reserved and charged, then parked")
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.job_waits where job_id = `+strconv.FormatInt(id, 10)+` and event = 'payment:1'`))

	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, 128+int(syscall.SIGKILL), first.Wait(t, 10*time.Second))
	require.Equal(t, pgrun.StatusWaiting, testkit.JobStatus(t, b, id), "a parked order holds no claim the kill could lose")

	second := d.start("second worker", "work")
	testkit.Eventually(t, 30*time.Second, "the second worker to start", func() bool {
		return strings.Contains(second.Output(), "runner started")
	})
	// `wait 1` watches the job (Client.Wait) before the payment comes.
	waiter := d.start("wait", "wait", "1")
	testkit.Eventually(t, 30*time.Second, "wait to watch the order's job", func() bool {
		return countRows(t, b, `select count(*) from pgrun.job_waits where job_id is null and awaited_job = `+strconv.FormatInt(id, 10)) == 1
	})
	var first1 bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT pgrun.emit_event('payment:1', '{"ok": true}')`).Scan(&first1))
	require.True(t, first1)

	require.Equal(t, 0, waiter.Wait(t, 30*time.Second), "wait 1 exits 0 for a successful order:\n%s", waiter.Output())
	require.Contains(t, waiter.Output(), "order 1 (job "+strconv.FormatInt(id, 10)+") succeeded")
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.Equal(t, 2, j.Attempt, "claimed by the first worker, then resumed by the second")
	require.Zero(t, j.Failures, "parking and resuming spend no attempt")

	require.Equal(t, []string{"reserve@0/step#1", "charge@1/step#1", "payment:1@2/event#2", "receipt@3/step#2"}, d.steps(id))

	// The charge: one call of the payment API, by the first worker, and its charge is
	// the one the order's result names.
	var chargeID string
	var requests int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, requests from durable_order.charges where order_id = 1`).Scan(&chargeID, &requests))
	require.Equal(t, 1, requests, "the payment API was called once")
	require.Equal(t, 1, countRows(t, b, `select count(*) from durable_order.charges`))
	var result struct {
		Order           int64
		Charge, Receipt string
	}
	require.NoError(t, json.Unmarshal(j.Result, &result))
	require.Equal(t, int64(1), result.Order)
	require.Equal(t, chargeID, result.Charge, "the resumed handler read the recorded charge")
	require.NotEmpty(t, result.Receipt)
	require.Equal(t, 1, strings.Count(first.Output(), "charging order 1"), "the first worker charged once")
	testkit.Eventually(t, 10*time.Second, "the second worker's receipt line", func() bool {
		return strings.Contains(second.Output(), "sending receipt for order 1")
	})
	require.NotContains(t, second.Output(), "charging", "the second worker charged nothing")
	require.Equal(t, 1, strings.Count(second.Output(), "sending receipt for order 1"))
	require.Contains(t, second.Output(), result.Receipt)
	require.NotContains(t, first.Output(), "sending receipt")

	// The stock: reserved once.
	require.Equal(t, 99, d.available())
	require.Equal(t, 1, countRows(t, b, `select count(*) from durable_order.reservations where order_id = 1`))

	// The timeline: the park, then the resume; and every recorded call, by name, in
	// the order the handler made them.
	tl := timelineOf(t, b.Pool, id)
	var story, stepNames []string
	for _, e := range tl {
		if slices.Contains([]string{"job.enqueued", "job.awaiting", "job.started", "job.succeeded"}, e.Event) {
			story = append(story, sketch([]tlEntry{e})[0])
		}
		var f struct{ Step string }
		_ = json.Unmarshal(e.Fields, &f)
		if f.Step != "" && !slices.Contains(stepNames, f.Step) {
			stepNames = append(stepNames, f.Step)
		}
	}
	require.Equal(t, []string{"job.enqueued@0", "job.awaiting@1", "job.started@2", "job.succeeded@2"}, story)
	require.Equal(t, []string{"reserve", "charge", "payment:1", "receipt"}, stepNames, "the timeline shows the steps in order")
}

// An order whose payment is not confirmed in time is undone once: the await times
// out (maintain() queues the job again), the charge is voided and the stock put back,
// and the job fails for good with the reason, which `wait` reports with exit 1.
func TestDurableOrderExampleCancelsAnUnconfirmedPayment(t *testing.T) {
	b := testkit.Setup(t)
	d := newDurableOrder(t, b)
	worker := d.start("worker", "work")
	id := d.enqueue(2, "--pay-within", "1s")

	waiter := d.start("wait", "wait", "2")
	require.Equal(t, 1, waiter.Wait(t, 30*time.Second), "wait 2 exits 1 for a cancelled order:\n%s", waiter.Output())
	require.Contains(t, waiter.Output(), "the payment was not confirmed within 1s")

	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Contains(t, string(j.Error), "order 2 cancelled")
	require.Equal(t, []string{"reserve@0/step#1", "charge@1/step#1", "payment:2@2/event#2", "void@3/step#2", "release@4/step#2"}, d.steps(id))
	var timedOut bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select result ? 'timeout' from pgrun.job_steps where job_id = $1 and name = 'payment:2'`, id).Scan(&timedOut))
	require.True(t, timedOut, "the await recorded its timeout")

	require.Equal(t, 100, d.available(), "the stock is back")
	require.Zero(t, countRows(t, b, `select count(*) from durable_order.reservations`))
	require.Equal(t, 1, countRows(t, b, `select count(*) from durable_order.charges where order_id = 2 and voided_at is not null and requests = 1`))
	testkit.Eventually(t, 10*time.Second, "the worker's void line", func() bool {
		return strings.Contains(worker.Output(), "voiding charge")
	})
	require.Equal(t, 1, strings.Count(worker.Output(), "charging order 2"))
	require.Equal(t, 1, strings.Count(worker.Output(), "voiding charge"))
	require.NotContains(t, worker.Output(), "sending receipt")
}
