package pgrun

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Page sizes of [Client.ListJobs].
const (
	// DefaultPageSize is a page of jobs when neither the filter nor the Config sets
	// one: a screenful for an operator, a cheap query for a program.
	DefaultPageSize = 100
	// MaxPageSize bounds a page: ten thousand rows of jobs with their args is already
	// tens of megabytes in memory; page on with JobFilter.After instead.
	MaxPageSize = 10000
)

// Config configures a [Client]. The zero value is ready to use.
type Config struct {
	// Queue is the queue of a job enqueued without one (and of a schedule set
	// without one). Empty: the engine's, "default". The engine checks the name when
	// the first such job is enqueued ([ErrInvalidInput] if it is not valid).
	Queue string
	// PageSize is how many jobs [Client.ListJobs] returns when the filter sets no
	// Limit: 1 to [MaxPageSize]; zero means [DefaultPageSize].
	PageSize int
}

// Client is the Go binding of pgrun's SQL API (docs/sql-api.md) on a connection
// pool: enqueueing (also in a caller's transaction), reading and listing jobs,
// cancelling and redriving them, queues, schedules, worker control, workflows and
// maintenance. Every method is one or two statements of the SQL API, so whatever
// a Client does, psql or another language can do the same way, and every rule
// (validation, deduplication, state changes) is the engine's.
//
// Errors: bad input the engine refuses (SQLSTATE 22023) matches [ErrInvalidInput]
// and keeps the server's message and hint; unknown objects match [ErrNotFound],
// [ErrRunNotFound], [ErrQueueNotFound], [ErrScheduleNotFound] or [ErrWorkflowNotFound]. A Client is safe
// for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	cfg  Config
}

// NewClient returns a Client that runs its statements on pool, which must reach a
// database where [Migrate] installed schema pgrun. It checks cfg and sends nothing.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("pgrun: new client: the pool is nil")
	}
	switch {
	case cfg.PageSize == 0:
		cfg.PageSize = DefaultPageSize
	case cfg.PageSize < 0 || cfg.PageSize > MaxPageSize:
		return nil, invalidInput("new client: page size %d is not valid (1 to %d)", cfg.PageSize, MaxPageSize)
	}
	return &Client{pool: pool, cfg: cfg}, nil
}

// Pool is the pool the client runs its statements on, for the caller's own
// transactions ([Client.EnqueueTx]).
func (c *Client) Pool() *pgxpool.Pool { return c.pool }
