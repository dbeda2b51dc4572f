package runner

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// isTransient reports database errors that are worth trying again: serialization
// failures and deadlocks, a server going away, a connection that broke.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001", pe.Code == "40P01": // serialization failure, deadlock
			return true
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutdown, crash, cannot connect now
			return true
		case pe.Code == "53300": // too many connections
			return true
		case pe.Code == "25006":
			// A read-only transaction: the server was a primary and has been demoted
			// in place (Patroni without etcd and failsafe mode, a switchover that a
			// proxy's health check has not seen yet). Its writes go to the new
			// primary once the connection is made again; given up, a finished job's
			// success was lost and the job ran again.
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// retryBackoff is the first wait after a transient error; it doubles up to
// retryBackoffMax. A second at most: through an outage or a failover every call in
// retry finds the database back within a second of its return (as a lost
// notification is found by the next poll), and a call costs a refused connection
// while it is away.
const (
	retryBackoff    = 50 * time.Millisecond
	retryBackoffMax = time.Second
)

// withRetry runs fn until it succeeds, fails with a non-transient error, or ctx is
// done, waiting with exponential backoff between transient failures.
func withRetry(ctx context.Context, fn func(context.Context) error) error {
	wait := retryBackoff
	for {
		err := fn(ctx)
		if err == nil || !isTransient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, retryBackoffMax)
	}
}
