package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
)

// This file is the one place the command line words an error for a person: every
// command's error reaches the terminal through errorLine, as one line.

// noServerHint follows a connection that nothing answered, the usual first error
// of a new checkout.
const noServerHint = "(is PostgreSQL running? scripts/ensure-postgres.sh starts one)"

// migrateUpAdvice ends the line for a database without schema pgrun.
const migrateUpAdvice = "run `runner migrate up`"

// errorLine is what the command line prints for err, returned by cmd (the command
// cobra ran; nil if none): oneLine, except that a statement failing on a missing
// pgrun relation, function or schema says to run `runner migrate up`. The migrate
// commands are left to say what failed, since they are that advice.
func errorLine(cmd *cobra.Command, err error) string {
	if line, ok := missingSchema(err); ok && !isMigrate(cmd) {
		return line
	}
	return oneLine(err)
}

// oneLine renders err for a person on one line. A failed connection keeps what
// wraps it ("connect to 127.0.0.1:5432: ") and then only the causes, each once, so
// that "connection refused" is not lost below pgx's heading; a PostgreSQL error is
// its message and hint; any other error keeps all of its lines, joined with "; ".
// Runs of whitespace become one space.
func oneLine(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return flatten(connectLine(err, ce))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return flatten(pgLine(pe))
	}
	return flatten(err.Error())
}

// connectLine is err, which holds the connect error ce: the text that wraps ce (or,
// with none, "connect to ADDRESS: "), the causes, and noServerHint when nothing
// listened where the URL points.
func connectLine(err error, ce *pgconn.ConnectError) string {
	prefix, ok := strings.CutSuffix(err.Error(), ce.Error())
	if !ok || prefix == "" {
		prefix = "connect to " + addresses(ce.Config) + ": "
	}
	line := prefix + strings.Join(causes(ce.Unwrap()), "; ")
	// ENOENT: a Unix socket path with no server behind it.
	if errors.Is(ce, syscall.ECONNREFUSED) || errors.Is(ce, syscall.ENOENT) {
		line += " " + noServerHint
	}
	return line
}

// causes lists the innermost errors of err, each once in the order met: pgx joins
// one error per address and TLS mode tried, each wrapped in what it was doing
// ("127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: ..."), and
// the innermost ("connection refused") is what a person acts on. A PostgreSQL
// error is taken whole, as pgLine.
func causes(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
			return
		case *pgconn.PgError:
			out = appendNew(out, pgLine(e))
			return
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
			return
		}
		if inner := errors.Unwrap(err); inner != nil {
			walk(inner)
			return
		}
		out = appendNew(out, err.Error())
	}
	walk(err)
	return out
}

// appendNew appends s to list unless it is there already.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// pgLine is a PostgreSQL error's message and, when it has one, its hint in the
// command line's words (cliHint).
func pgLine(pe *pgconn.PgError) string {
	if pe.Hint == "" {
		return pe.Message
	}
	return pe.Message + " (hint: " + cliHint(pe.Hint) + ")"
}

// sqlHints pairs the hints of the SQL API that show a query, written for a psql
// user, with the runner command that does the same, for a person at the command
// line. A hint is matched by the query it shows, so its wording may change in SQL
// without breaking the match; a hint with no command here is shown as SQL wrote it.
var sqlHints = []struct {
	query *regexp.Regexp
	cli   string
}{
	{regexp.MustCompile(`(?i)FROM pgrun\.queues`), "list queues with `runner queue list`; create one with `runner queue set NAME`"},
	{regexp.MustCompile(`(?i)SELECT id, kind, status FROM pgrun\.jobs`), "list jobs with `runner job list`"},
	{regexp.MustCompile(`(?i)FROM pgrun\.jobs WHERE unique_key`), "find it with `runner job list`, then wait for it or `runner job cancel ID`"},
	{regexp.MustCompile(`(?i)FROM pgrun\.runs WHERE unique_key`), "wait for that run or cancel it with `runner workflow cancel ID`"},
	{regexp.MustCompile(`(?i)FROM pgrun\.runs`), "see a run with `runner workflow status ID`"},
	{regexp.MustCompile(`(?i)FROM pgrun\.schedules`), "list schedules with `runner schedule list`"},
	{regexp.MustCompile(`(?i)FROM pgrun\.workers`), "list hosts and workers with `runner worker list`"},
	{regexp.MustCompile(`(?i)pgrun\.define_workflow`), "define it first with `runner workflow define FILE.json`"},
	{regexp.MustCompile(`(?i)pgrun\.start_run`), "start a new run with `runner workflow start NAME`"},
}

// cliHint is hint in the command line's words: the runner command of sqlHints
// whose query it shows, else hint as it is.
func cliHint(hint string) string {
	for _, h := range sqlHints {
		if h.query.MatchString(hint) {
			return h.cli
		}
	}
	return hint
}

// flatten puts s on one line: its lines, trimmed, joined with "; " (or a space after
// a line ending in a colon, as pgx's "failed to connect to ...:" does), and every
// run of spaces and tabs made one space.
func flatten(s string) string {
	var b strings.Builder
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

// namesPgrun matches a PostgreSQL message about an object of schema pgrun:
// relation "pgrun.jobs", function pgrun.enqueue_job(unknown), schema "pgrun".
var namesPgrun = regexp.MustCompile(`(^|[\s"])pgrun(\.\w|")`)

// missingSchema words err when it is PostgreSQL saying that a pgrun object does not
// exist: undefined table (42P01) or function (42883), which an outdated schema gives
// as well as a missing one, or undefined schema (3F000).
func missingSchema(err error) (string, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !namesPgrun.MatchString(pe.Message) {
		return "", false
	}
	switch pe.Code {
	case "3F000":
		return flatten(fmt.Sprintf("schema pgrun is not installed in this database (%s): %s", pe.Message, migrateUpAdvice)), true
	case "42P01", "42883":
		return flatten(fmt.Sprintf("schema pgrun is not installed in this database, or is older than this runner (%s): %s", pe.Message, migrateUpAdvice)), true
	}
	return "", false
}

// isMigrate reports whether cmd is `runner migrate` or one of its subcommands.
func isMigrate(cmd *cobra.Command) bool {
	for c := cmd; c != nil && c.HasParent(); c = c.Parent() {
		if !c.Parent().HasParent() {
			return c.Name() == "migrate"
		}
	}
	return false
}
