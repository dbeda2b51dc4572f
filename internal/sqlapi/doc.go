// Package sqlapi holds every SQL statement that pgrun's Go code sends, and nothing
// else: the one place where Go meets the SQL API of schema pgrun.
//
// The statements are exported string constants, one file per concern mirroring
// sql/functions/ (enqueue.go holds what calls enqueue.sql, transitions.go what calls
// transitions.sql, and so on; jobs.go holds the plain reads of pgrun.jobs). Each has a
// one-line doc comment naming its parameters in order. A reader who knows the SQL file
// that holds a rule finds the Go that calls it under the same name here.
//
// The package imports nothing from this module, so that the root package, runner,
// the CLI and the UI can all import it without cycles. Callers run the statements
// with pgx and scan the rows with pgx's own helpers (pgx.CollectRows with
// pgx.RowToStructByName or RowToAddrOfStructByName and db:"column" tags), not with
// hand-written scanners, unless a measured hot path needs otherwise (said in a comment
// where it does).
//
// Outside this package (tests aside) no .go file contains SQL that names schema
// pgrun.
package sqlapi
