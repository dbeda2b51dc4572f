package pgrun

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors the client returns for callers to branch on with errors.Is. Each is wrapped
// in an error whose message names the object ("pgrun: job 5 not found"), said once.
var (
	// ErrNotFound: no job has that id.
	ErrNotFound = errors.New("pgrun: job not found")
	// ErrFinished: the job (or run) had already finished, so it could not be
	// cancelled.
	ErrFinished = errors.New("pgrun: job already finished")
	// ErrNotRetryable: only failed and cancelled jobs can be redriven.
	ErrNotRetryable = errors.New("pgrun: job is not failed or cancelled")
	// ErrRunNotFound: no run has that id.
	ErrRunNotFound = errors.New("pgrun: run not found")
	// ErrQueueNotFound: no queue has that name (pause and resume create none).
	ErrQueueNotFound = errors.New("pgrun: queue not found")
	// ErrScheduleNotFound: no schedule has that name.
	ErrScheduleNotFound = errors.New("pgrun: schedule not found")
	// ErrWorkflowNotFound: no workflow has that name and version.
	ErrWorkflowNotFound = errors.New("pgrun: workflow not found")
	// ErrInvalidInput: the engine refused a value (SQLSTATE 22023,
	// invalid_parameter_value), or the client did before sending it. The error's
	// message is the server's, with its HINT, and errors.As still finds the
	// *pgconn.PgError.
	ErrInvalidInput = errors.New("pgrun: invalid input")
)

// clientError is an error of a client call: a message that names what failed, said
// once with one "pgrun:" prefix, and the errors it stands for (a sentinel, the
// server's *pgconn.PgError), all of them reachable with errors.Is and errors.As.
type clientError struct {
	msg  string
	errs []error
}

func (e *clientError) Error() string   { return e.msg }
func (e *clientError) Unwrap() []error { return e.errs }

// newError returns an error reading "pgrun: " + the formatted message and wrapping
// errs.
func newError(errs []error, format string, args ...any) error {
	return &clientError{msg: "pgrun: " + fmt.Sprintf(format, args...), errs: errs}
}

// invalidInput is a client-side refusal of a value: ErrInvalidInput with a message
// naming it.
func invalidInput(format string, args ...any) error {
	return newError([]error{ErrInvalidInput}, format, args...)
}

// dbError wraps err, the failure of operation op (such as "cancel job 5"). A server
// error keeps its message, SQLSTATE and HINT and is reachable with errors.As; with
// SQLSTATE 22023 the error also matches ErrInvalidInput. An error the client already
// made (a clientError) is returned as it is, so a message is never prefixed twice.
func dbError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *clientError
	if errors.As(err, &ce) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		errs := []error{err}
		if pe.Code == "22023" {
			errs = append(errs, ErrInvalidInput)
		}
		return newError(errs, "%s: %s", op, serverMessage(pe))
	}
	return fmt.Errorf("pgrun: %s: %w", op, err)
}

// serverMessage renders a server error as "message (SQLSTATE code); hint: ...": the
// server's words without pgconn's "ERROR:" prefix, and its advice when it gave some.
func serverMessage(pe *pgconn.PgError) string {
	msg := fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
	if pe.Detail != "" {
		msg += "; detail: " + pe.Detail
	}
	if pe.Hint != "" {
		msg += "; hint: " + pe.Hint
	}
	return msg
}

// sqlState is err's SQLSTATE, or "" if it is not a server error.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// jobNotFound is ErrNotFound for job id; cause (the server's P0002, or nil) stays
// reachable.
func jobNotFound(id int64, cause error) error {
	return newError(withCause(ErrNotFound, cause), "job %d not found", id)
}

// runNotFound is ErrRunNotFound for run id.
func runNotFound(id int64, cause error) error {
	return newError(withCause(ErrRunNotFound, cause), "run %d not found", id)
}

// withCause lists sentinel and, if not nil, cause.
func withCause(sentinel, cause error) []error {
	if cause == nil {
		return []error{sentinel}
	}
	return []error{sentinel, cause}
}
