package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

func TestDemoHintsNameTheDatabaseAndWholeCommands(t *testing.T) {
	got := demoHints("postgres://me@db:5432/pgrun?sslmode=disable", 7, "go run ./cmd/runner")
	require.Equal(t, `
Database: postgres://me@db:5432/pgrun?sslmode=disable
Look around, in your own shell (from the repository root):
  go run ./cmd/runner --database-url 'postgres://me@db:5432/pgrun?sslmode=disable' workflow status 7
  go run ./cmd/runner --database-url 'postgres://me@db:5432/pgrun?sslmode=disable' status
  go run ./cmd/runner --database-url 'postgres://me@db:5432/pgrun?sslmode=disable' top
Or once for the shell: export PGRUN_DATABASE_URL='postgres://me@db:5432/pgrun?sslmode=disable'
The run from SQL, in psql or any client:
  psql 'postgres://me@db:5432/pgrun?sslmode=disable' -c 'select * from pgrun.run_status where run_id = 7'
`, got)
	require.NotContains(t, demoHints("postgres://x/db", 1, "/opt/bin/runner"), "repository root")

	require.Equal(t, "plain-word", shellQuote("plain-word"))
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
	require.Equal(t, `''`, shellQuote(""))
	// Under go test the program is a temporary build, as under go run.
	require.Equal(t, "go run ./cmd/runner", runnerCommand())
}

// Every command the demo prints works as printed: a real shell splits each line (so
// the quoting is checked by sh itself), the psql line runs as is, and the runner
// lines run this program with the words sh produced (top with --once: it needs a
// terminal, which tests/top_tmux_test.go gives it).
func TestDemoHintsWorkInAShell(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	c, pool := newCLI(t)
	ctx := context.Background()
	_, err := pgrun.DefineWorkflow(ctx, pool, "hinted", map[string]any{"nodes": []map[string]any{{"name": "a", "kind": "noop"}}})
	require.NoError(t, err)
	run, err := pgrun.StartRun(ctx, pool, "hinted", map[string]any{}, "")
	require.NoError(t, err)

	const runner = "go run ./cmd/runner"
	hints := demoHints(c.url, run.ID, runner)
	require.Contains(t, hints, "\nDatabase: "+c.url+"\n")
	ran := 0
	for _, line := range strings.Split(hints, "\n") {
		cmdline := strings.TrimPrefix(line, "  ")
		switch {
		case strings.HasPrefix(cmdline, "psql "):
			if _, err := exec.LookPath("psql"); err != nil {
				continue
			}
			out, err := exec.Command("sh", "-c", cmdline).CombinedOutput()
			require.NoError(t, err, "%s: %s", cmdline, out)
			require.Contains(t, string(out), fmt.Sprint(run.ID))
			ran++
		case strings.HasPrefix(cmdline, runner+" "):
			words, err := exec.Command("sh", "-c", `printf '%s\n' `+strings.TrimPrefix(cmdline, runner+" ")).Output()
			require.NoError(t, err, cmdline)
			args := strings.Split(strings.TrimSuffix(string(words), "\n"), "\n")
			require.Equal(t, []string{"--database-url", c.url}, args[:2], "sh reads the URL back whole")
			if args[len(args)-1] == "top" {
				args = append(args, "--once")
			}
			root := newRootCmd()
			var out strings.Builder
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(args)
			require.NoError(t, root.ExecuteContext(ctx), "%s: %s", cmdline, out.String())
			require.NotEmpty(t, out.String(), cmdline)
			ran++
		case strings.HasPrefix(line, "Or once for the shell: "):
			export := strings.TrimPrefix(line, "Or once for the shell: ")
			out, err := exec.Command("sh", "-c", export+`; printf '%s' "$PGRUN_DATABASE_URL"`).Output()
			require.NoError(t, err)
			require.Equal(t, c.url, string(out))
			ran++
		}
	}
	require.GreaterOrEqual(t, ran, 4)
}

// The demo names the runner command for the run first; the SQL that reads the same
// view follows it, for clients in other languages, and is not the only way shown.
func TestDemoHintsNameTheRunnerCommandBeforeSQL(t *testing.T) {
	hints := demoHints("postgres://x/db", 3, "runner")
	var commands []string
	for _, line := range strings.Split(hints, "\n") {
		if strings.HasPrefix(line, "  ") {
			commands = append(commands, strings.TrimSpace(line))
		}
	}
	require.NotEmpty(t, commands)
	require.Equal(t, "runner --database-url postgres://x/db workflow status 3", commands[0])
	sql := slices.IndexFunc(commands, func(c string) bool { return strings.Contains(c, "pgrun.run_status") })
	require.Equal(t, len(commands)-1, sql, "the SQL comes last: %q", commands)
	require.Contains(t, hints, "The run from SQL, in psql or any client:\n  psql ")
}
