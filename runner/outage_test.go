package runner

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// An outage is logged once when the first call fails and once when a call that began
// after it gets through, with the count of failed calls; the failures in between are
// counted, not logged, and errors that are not about reaching the database are left
// to the caller.
func TestOutageIsLoggedOnceEachWay(t *testing.T) {
	var logs bytes.Buffer
	o := newOutage(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o.now = func() time.Time { return now }
	before := now.Add(-time.Millisecond)

	if o.fail("claim", &pgconn.PgError{Code: "22023"}) {
		t.Fatal("a refused input counted as an outage")
	}
	refused := &pgconn.ConnectError{}
	for i := range 50 {
		if !o.fail("renew_leases", errors.Join(errors.New("dial"), refused)) {
			t.Fatalf("call %d: a connection error was not taken as an outage", i)
		}
	}
	if !o.fail("claim", &pgconn.PgError{Code: "25006"}) {
		t.Fatal("a read-only server (a standby) was not taken as an outage")
	}
	o.ok(before) // in flight since before the outage: says nothing
	if !o.down.Load() {
		t.Fatal("a call that began before the outage ended it")
	}
	now = now.Add(45 * time.Second)
	o.ok(now)
	o.ok(now)
	out := logs.String()
	if n := strings.Count(out, "database unreachable"); n != 1 {
		t.Fatalf("%d lines for the outage's start, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "database reachable again"); n != 1 {
		t.Fatalf("%d lines for its end, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "after=45s failed_calls=51") {
		t.Fatalf("the end line does not say how long and how many calls failed:\n%s", out)
	}
	if !o.unsettled.Load() || o.count.Load() != 1 || o.total.Load() != 51 {
		t.Fatalf("unsettled %v, outages %d, failed calls %d", o.unsettled.Load(), o.count.Load(), o.total.Load())
	}
	select {
	case <-o.settle:
	default:
		t.Fatal("the end of the outage did not ask for a settle")
	}
}
