// Command durable-order is pgrun's durable execution example (docs/durable.md): an
// order handler that reserves stock, charges a card, waits for the payment to be
// confirmed and sends a receipt. Each step is recorded in the database as it
// completes, so a worker killed in the middle resumes where the order was: stock is
// reserved once, the card charged once, the receipt sent once.
//
//	go run ./examples/durable-order work         # the worker: serves queue "orders"
//	go run ./examples/durable-order enqueue 1    # place order 1; prints its job's id
//	go run ./examples/durable-order wait 1       # block until order 1's job ends (Client.Wait)
//
// The payment's confirmation is an event any client can send, in any language:
//
//	psql "$PGRUN_DATABASE_URL" -c "SELECT pgrun.emit_event('payment:1', '{\"ok\": true}')"
//
// The database comes from --database-url, else $PGRUN_DATABASE_URL, else
// $DATABASE_URL. Every command installs pgrun (pgrun.Migrate) and the example's own
// tables (schema durable_order) if they are missing. README.md beside this file walks
// through killing the worker mid-order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// Queue is the queue orders are enqueued on and the worker serves.
const Queue = "orders"

// DefaultPayWithin is how long an order waits for its payment's confirmation: long
// enough to walk through the README by hand, killing and restarting the worker.
const DefaultPayWithin = time.Hour

const usage = `usage: durable-order [--database-url URL] <command>

  work [--workers N]                       serve queue orders until SIGINT or SIGTERM
  enqueue [flags] <order>                  place an order; prints its job's id
  wait <order>                             wait until the order's job ends; print its result

enqueue flags: --sku widget --qty 1 --amount-cents 4200 --email customer@example.com --pay-within 1h
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "durable-order:", err)
		os.Exit(1)
	}
}

// run runs the command args name, writing what it reports to stdout and its logs to
// stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	global := flag.NewFlagSet("durable-order", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	dbURL := global.String("database-url", "", "PostgreSQL URL (default $PGRUN_DATABASE_URL, then $DATABASE_URL)")
	if err := global.Parse(args); err != nil {
		return err
	}
	if global.NArg() == 0 {
		global.Usage()
		return errors.New("no command given")
	}
	cmd, rest := global.Arg(0), global.Args()[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = global.Usage
	fs.StringVar(dbURL, "database-url", *dbURL, "PostgreSQL URL")
	// The runner's logs (slog's default handler) and the example's own lines go the
	// same way: the log package's default logger, to stderr.
	log.SetOutput(stderr)
	logger := log.Default()

	switch cmd {
	case "work":
		workers := fs.Int("workers", 4, "orders handled at once")
		if err := parse(fs, rest, 0); err != nil {
			return err
		}
		pool, err := connect(ctx, *dbURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		return work(ctx, pool, *workers, logger)
	case "enqueue":
		a := OrderArgs{}
		fs.StringVar(&a.SKU, "sku", "widget", "the item ordered")
		fs.IntVar(&a.Qty, "qty", 1, "how many")
		fs.Int64Var(&a.AmountCents, "amount-cents", 4200, "what the card is charged, in cents")
		fs.StringVar(&a.Email, "email", "customer@example.com", "where the receipt goes")
		payWithin := fs.Duration("pay-within", DefaultPayWithin, "how long to wait for the payment's confirmation")
		if err := parse(fs, rest, 1); err != nil {
			return err
		}
		order, err := orderID(fs.Arg(0))
		if err != nil {
			return err
		}
		a.Order, a.PayWithin = order, payWithin.String()
		if err := a.Validate(); err != nil {
			return err
		}
		pool, err := connect(ctx, *dbURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		id, err := enqueue(ctx, pool, a)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
		fmt.Fprintf(stderr, "order %d is job %d: it reserves stock, charges the card, then waits up to %s for event %s\n",
			order, id, payWithin, a.PaymentEvent())
		return nil
	case "wait":
		if err := parse(fs, rest, 1); err != nil {
			return err
		}
		order, err := orderID(fs.Arg(0))
		if err != nil {
			return err
		}
		pool, err := connect(ctx, *dbURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		return wait(ctx, pool, order, stdout)
	default:
		global.Usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// parse parses a command's flags and requires n arguments after them.
func parse(fs *flag.FlagSet, args []string, n int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != n {
		fs.Usage()
		return fmt.Errorf("%s takes %d argument(s), got %d", fs.Name(), n, fs.NArg())
	}
	return nil
}

// orderID reads an order number: a positive integer.
func orderID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("order %q is not a positive integer", s)
	}
	return n, nil
}

// connect opens a pool on the database and installs what the example needs there.
func connect(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	for _, u := range []string{dbURL, os.Getenv("PGRUN_DATABASE_URL"), os.Getenv("DATABASE_URL")} {
		if u != "" {
			dbURL = u
			break
		}
	}
	if dbURL == "" {
		return nil, errors.New("no database: pass --database-url or set PGRUN_DATABASE_URL (scripts/ensure-postgres.sh prints one)")
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	if err := pgrun.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("install pgrun: %w", err)
	}
	if err := createTables(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// work serves queue orders with the order handler until ctx is done (SIGINT,
// SIGTERM), then shuts down gracefully. A SIGKILL skips that, which is the point of
// the example: nothing an order recorded is done again by the next worker.
func work(ctx context.Context, pool *pgxpool.Pool, workers int, logger *log.Logger) error {
	r, err := runner.New(pool, runner.Config{
		Queues: map[string]runner.QueueConfig{Queue: {Workers: workers}},
		Hooks:  []runner.Hooks{runner.LogOutcomes(slog.Default(), slog.LevelInfo)},
	})
	if err != nil {
		return err
	}
	shop := &Shop{Pool: pool, Payments: &PaymentAPI{Pool: pool, Log: logger}, Mail: &Mailer{Log: logger}}
	if err := runner.HandleArgs(r, shop.PlaceOrder); err != nil {
		return err
	}
	logger.Printf("serving queue %s; place an order with: go run ./examples/durable-order enqueue 1", Queue)
	return r.Run(ctx)
}

// enqueue records order a and enqueues its job in one transaction: both or neither.
func enqueue(ctx context.Context, pool *pgxpool.Pool, a OrderArgs) (int64, error) {
	client, err := pgrun.NewClient(pool, pgrun.Config{})
	if err != nil {
		return 0, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	job, err := client.EnqueueArgsTx(ctx, tx, a, pgrun.Queue(Queue))
	if err != nil {
		return 0, fmt.Errorf("enqueue order %d: %w", a.Order, err)
	}
	placed, err := recordOrder(ctx, tx, a, job.ID)
	if err != nil {
		return 0, err
	}
	if placed != job.ID {
		return 0, fmt.Errorf("order %d was placed already, as job %d", a.Order, placed)
	}
	return job.ID, tx.Commit(ctx)
}

// wait blocks until order's job has ended (Client.Wait: LISTEN, no polling) and
// prints how. An order that did not succeed is an error.
func wait(ctx context.Context, pool *pgxpool.Pool, order int64, stdout io.Writer) error {
	id, err := orderJob(ctx, pool, order)
	if err != nil {
		return err
	}
	client, err := pgrun.NewClient(pool, pgrun.Config{})
	if err != nil {
		return err
	}
	j, err := client.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("wait for order %d (job %d): %w", order, id, err)
	}
	if j.Status != pgrun.StatusSucceeded {
		return fmt.Errorf("order %d (job %d) %s: %s", order, id, j.Status, j.Error)
	}
	fmt.Fprintf(stdout, "order %d (job %d) %s: %s\n", order, id, j.Status, j.Result)
	return nil
}
