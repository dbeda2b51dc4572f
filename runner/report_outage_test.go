package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// A finished attempt's outcome outlives an outage longer than one report try: the
// success and the failure of two jobs whose handlers return while the server is down
// are kept, tried again and recorded once it is back, so neither job is left to its
// lease to run again. (Before: after one try, a minute in production, the completer
// and the failure report gave up; with the server back, both jobs sat running until
// their leases brought them back for a second run.)
func TestFinishedOutcomesOutliveALongOutage(t *testing.T) {
	srv := newPrivateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := srv.migratedPool(ctx)

	r := newRunner(pool, Config{
		WorkerID:            "w-keep",
		Queues:              map[string]QueueConfig{"default": {Workers: 2}},
		MaintenanceInterval: -1, // nothing judges a lease: only the reports can end the jobs
		TelemetryInterval:   -1,
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	r.reportTry = 200 * time.Millisecond // a try runs out several times during the outage
	started := make(chan string, 4)
	finish := make(chan struct{})
	for kind, outcome := range map[string]error{"ok": nil, "bad": errors.New("the handler failed")} {
		if err := Handle(r, kind, func(context.Context, *Job[struct{}]) (any, error) {
			started <- kind
			<-finish
			return nil, outcome
		}); err != nil {
			t.Fatal(err)
		}
	}
	var okID, badID int64
	if err := pool.QueryRow(ctx, `select id from pgrun.enqueue_job('ok')`).Scan(&okID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `select id from pgrun.enqueue_job('bad', max_attempts => 1)`).Scan(&badID); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { stop(); <-done }()
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the two jobs did not start")
		}
	}

	srv.stop()
	close(finish) // both handlers return while the server is down
	poll(t, 30*time.Second, "both outcomes to have outlived several tries", func() bool {
		return r.Stats().ReportsKept >= 6
	})
	srv.start()

	// The runner counts a success when its call returns, which may be after the
	// commit a look at the rows sees (or, where a try ran out as the server committed,
	// when the kept report is sent again): wait for both.
	poll(t, 30*time.Second, "both outcomes to be recorded", func() bool {
		var ok, bad string
		err := pool.QueryRow(ctx, `select (select status from pgrun.jobs where id = $1), (select status from pgrun.jobs where id = $2)`,
			okID, badID).Scan(&ok, &bad)
		return err == nil && ok == "succeeded" && bad == "failed" && r.Stats().Completed >= 1
	})
	for _, id := range []int64{okID, badID} {
		var attempt int
		if err := pool.QueryRow(ctx, `select attempt from pgrun.jobs where id = $1`, id).Scan(&attempt); err != nil {
			t.Fatal(err)
		}
		if attempt != 1 {
			t.Fatalf("job %d ended at attempt %d; want its one run", id, attempt)
		}
	}
	if st := r.Stats(); st.Completed != 1 {
		t.Fatalf("completed %d; want the one success recorded once", st.Completed)
	}
}
