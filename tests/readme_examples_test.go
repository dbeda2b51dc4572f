package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The README's examples are run as written: the psql session of "## From psql"
// statement by statement (and through psql itself when it is installed), the
// commands of "## Workflows" through the real binary, and every workflow shipped in
// examples/workflows/ is defined, started and run to the end by the built-ins.

// repoRoot is where README.md and examples/ live, relative to this package.
const repoRoot = ".."

// builtinKinds are the example kinds `runner work --examples` serves; the README's
// examples use only these, so that they run on a fresh install.
var builtinKinds = []string{runner.KindNoop, runner.KindSleep, runner.KindEcho, runner.KindFail}

// readmeBlock returns the first fenced block of language lang in the README section
// titled heading ("## heading").
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n## "+heading+"\n")
	require.True(t, ok, "README.md has no section %q", heading)
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```"+lang+"\n")
	require.True(t, ok, "README section %q has no ```%s block", heading, lang)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok, "README section %q: unterminated ```%s block", heading, lang)
	return block
}

// psqlStatement is one statement of a psql script; gset is true when it ends with
// \gset (psql stores the columns of its one row in variables named after them).
type psqlStatement struct {
	sql  string
	gset bool
}

// splitPsql splits a psql script into statements: on semicolons and on backslash
// meta-commands, outside quotes and comments. Only \gset is understood (it is the one
// the README uses); any other meta-command fails the test.
func splitPsql(t *testing.T, script string) []psqlStatement {
	t.Helper()
	var out []psqlStatement
	var cur strings.Builder
	flush := func(gset bool) {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, psqlStatement{sql: s, gset: gset})
		}
		cur.Reset()
	}
	for i := 0; i < len(script); i++ {
		ch := script[i]
		switch {
		case ch == '\'' || ch == '"': // a literal or quoted identifier, '' and "" included
			j := i + 1
			for ; j < len(script); j++ {
				if script[j] == ch {
					if j+1 < len(script) && script[j+1] == ch {
						j++ // a doubled quote stands for itself
						continue
					}
					break
				}
			}
			cur.WriteString(script[i:min(j+1, len(script))])
			i = j
		case ch == '-' && strings.HasPrefix(script[i:], "--"): // a comment, to the end of the line
			for i < len(script) && script[i] != '\n' {
				i++
			}
			cur.WriteByte('\n')
		case ch == ';':
			flush(false)
		case ch == '\\':
			end := strings.IndexByte(script[i:], '\n')
			if end < 0 {
				end = len(script) - i
			}
			meta := strings.TrimSpace(script[i : i+end])
			require.Equal(t, `\gset`, meta, "the README's psql session uses a meta-command this test does not know")
			flush(true)
			i += end
		default:
			cur.WriteByte(ch)
		}
	}
	flush(false)
	return out
}

// psqlVariable matches a psql variable reference (:name), not a cast (::type).
var psqlVariable = regexp.MustCompile(`(^|[^:]):([A-Za-z_][A-Za-z0-9_]*)`)

// substitute replaces :name by the value of psql variable name, as psql does outside
// quotes (the README's statements have no ":" inside their literals).
func substitute(t *testing.T, sql string, vars map[string]string) string {
	t.Helper()
	return psqlVariable.ReplaceAllStringFunc(sql, func(m string) string {
		sub := psqlVariable.FindStringSubmatch(m)
		v, ok := vars[sub[2]]
		require.True(t, ok, "statement uses psql variable :%s before any \\gset set it:\n%s", sub[2], sql)
		return sub[1] + v
	})
}

// runPsqlScript runs each statement of script on one connection (one session, as
// psql is) and returns the variables \gset set.
func runPsqlScript(t *testing.T, b *testkit.DB, script string) map[string]string {
	t.Helper()
	conn, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	defer conn.Release()
	vars := map[string]string{}
	stmts := splitPsql(t, script)
	require.NotEmpty(t, stmts)
	for _, st := range stmts {
		sql := substitute(t, st.sql, vars)
		// The simple protocol returns every column as text, as psql shows it.
		rows, err := conn.Query(b.Ctx, sql, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err, sql)
		n := 0
		for rows.Next() {
			n++
			if st.gset {
				for i, f := range rows.FieldDescriptions() {
					vars[f.Name] = string(rows.RawValues()[i])
				}
			}
		}
		rows.Close()
		require.NoError(t, rows.Err(), "README statement failed:\n%s", sql)
		if st.gset {
			require.Equal(t, 1, n, "\\gset needs exactly one row:\n%s", sql)
		}
	}
	return vars
}

// checkPsqlSessionOutcome asserts what the README's session leaves behind: its
// first job enqueued, cancelled and redriven, two jobs of built-in kinds in queue
// images, and nothing of a kind no built-in handler serves.
func checkPsqlSessionOutcome(t *testing.T, b *testkit.DB, id int64) {
	t.Helper()
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, id), "cancelled, then redriven")
	require.Equal(t, []string{"job.enqueued@0", "job.cancelled@0", "job.retried@0"}, sketch(timelineOf(t, b.Pool, id)))
	var kinds []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`select coalesce(array_agg(distinct kind), '{}') from pgrun.jobs`).Scan(&kinds))
	for _, k := range kinds {
		require.Contains(t, builtinKinds, k, "the README enqueues kind %q, which no built-in handler serves", k)
	}
	require.Equal(t, 2, countRows(t, b, `select count(*) from pgrun.jobs where queue = 'images'`))
}

// countRows runs sql, which selects one count.
func countRows(t *testing.T, b *testkit.DB, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, sql).Scan(&n))
	return n
}

func TestReadmePsqlSessionRunsAsWritten(t *testing.T) {
	b := testkit.Setup(t)
	vars := runPsqlScript(t, b, readmeBlock(t, "From psql", "sql"))
	var id int64
	_, err := fmt.Sscan(vars["id"], &id)
	require.NoError(t, err, "the session's \\gset should set :id, got %q", vars["id"])
	checkPsqlSessionOutcome(t, b, id)
}

func TestReadmePsqlSessionRunsInPsql(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql is not installed; TestReadmePsqlSessionRunsAsWritten covers the statements")
	}
	b := testkit.Setup(t)
	file := filepath.Join(t.TempDir(), "readme.sql")
	require.NoError(t, os.WriteFile(file, []byte(readmeBlock(t, "From psql", "sql")), 0o600))
	out, err := exec.CommandContext(b.Ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file, b.URL).CombinedOutput()
	require.NoError(t, err, "psql -f README session:\n%s", out)
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(id) from pgrun.jobs where queue = 'images'`).Scan(&id))
	checkPsqlSessionOutcome(t, b, id)
}

// shellWords splits a command line as sh does for the README's commands: words
// separated by blanks, '…' and "…" quoting, # starting a comment.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\'' || ch == '"':
			j := strings.IndexByte(line[i+1:], ch)
			require.GreaterOrEqual(t, j, 0, "unterminated quote in %q", line)
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			i = len(line)
		default:
			require.NotContains(t, `\$*?|&;<>()`+"`", string(ch), "shell syntax this test does not run in %q", line)
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// readmeCommand is one line of a README sh block: the words after `go run
// ./cmd/runner` (runner nil for any other command), and the shell variable its output
// is kept in (`name=$(go run ./cmd/runner ...)`), if any.
type readmeCommand struct {
	line   string
	runner []string
	assign string
}

var (
	shellAssign = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=\$\((.*)\)(\s+#.*)?$`)
	shellVar    = regexp.MustCompile(`"?\$([A-Za-z_][A-Za-z0-9_]*)"?`)
)

// readmeCommands reads the non-empty lines of a README sh block. Lines that run the
// runner are split into words; a `name=$(...)` line keeps its command's output in
// variable name; "$name" is expanded from vars when the command is run (expand).
func readmeCommands(t *testing.T, block string) []readmeCommand {
	t.Helper()
	var cmds []readmeCommand
	for _, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		c := readmeCommand{line: line}
		cmdText := line
		if m := shellAssign.FindStringSubmatch(line); m != nil {
			c.assign, cmdText = m[1], m[2]
		}
		if w := strings.Fields(cmdText); len(w) > 3 && slices.Equal(w[:3], []string{"go", "run", "./cmd/runner"}) {
			// Variables stand as placeholders until the command runs.
			c.runner = shellWords(t, shellVar.ReplaceAllString(cmdText, "@$1@"))[3:]
		}
		cmds = append(cmds, c)
	}
	require.NotEmpty(t, cmds)
	return cmds
}

// expand replaces the @name@ placeholders of args with vars' values.
func expand(t *testing.T, args []string, vars map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)@`).ReplaceAllStringFunc(a, func(m string) string {
			v, ok := vars[strings.Trim(m, "@")]
			require.True(t, ok, "README uses $%s before a command sets it", strings.Trim(m, "@"))
			return v
		})
	}
	return out
}

// readmeRunnerCommands returns the runner commands of a README sh block whose every
// line runs the runner.
func readmeRunnerCommands(t *testing.T, block string) []readmeCommand {
	t.Helper()
	cmds := readmeCommands(t, block)
	for _, c := range cmds {
		require.NotNil(t, c.runner, "README command %q is not a `go run ./cmd/runner` command", c.line)
	}
	return cmds
}

// runReadmeCommand runs c (a runner command) with vars, keeps its output in vars if
// c assigns it, and returns the output.
func runReadmeCommand(t *testing.T, b *testkit.DB, c readmeCommand, vars map[string]string) string {
	t.Helper()
	out := runRunner(t, b, expand(t, c.runner, vars))
	if c.assign != "" {
		vars[c.assign] = strings.TrimSpace(out)
		require.Regexp(t, `^\d+$`, vars[c.assign], "%s: the README keeps an id", c.line)
	}
	return out
}

// runRunner runs the runner binary with args from the repository root, as the
// README's reader does (with PGRUN_DATABASE_URL exported), and returns its output.
func runRunner(t *testing.T, b *testkit.DB, args []string) string {
	t.Helper()
	cmd := exec.CommandContext(b.Ctx, runnerBin, args...)
	cmd.Env = append(os.Environ(), "PGRUN_DATABASE_URL="+b.URL)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "runner %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

var startedRun = regexp.MustCompile(`(?m)^run (\d+) of (\S+) v\d+ `)

// waitForRun serves the queues of the run's nodes with the built-ins until the run
// ends, and requires it to have succeeded.
func waitForRun(t *testing.T, b *testkit.DB, runID int64, queues []string) {
	t.Helper()
	cfg := runner.Config{Queues: map[string]runner.QueueConfig{}}
	for _, q := range queues {
		cfg.Queues[q] = runner.QueueConfig{Workers: 4}
	}
	stop := testkit.StartRunner(t, testkit.NewRunner(b.Pool, cfg))
	defer stop()
	var r *pgrun.Run
	testkit.Eventually(t, time.Minute, fmt.Sprintf("run %d to end", runID), func() bool {
		var err error
		r, err = pgrun.GetRun(b.Ctx, b.Pool, runID)
		require.NoError(t, err)
		return r.Status != "running"
	})
	require.Equal(t, "succeeded", r.Status, "run %d: error %s", runID, r.Error)
}

// The README's workflow commands run as written from the repository root: the
// definition file exists, the run starts, its status draws every node, and with a
// runner serving the built-ins the run succeeds.
func TestReadmeWorkflowCommandsRunAsWritten(t *testing.T) {
	b := testkit.Setup(t)
	vars := map[string]string{}
	runID := int64(0)
	for _, c := range readmeRunnerCommands(t, readmeBlock(t, "Workflows", "sh")) {
		runReadmeCommand(t, b, c, vars)
		if len(c.runner) >= 2 && c.runner[0] == "workflow" && c.runner[1] == "start" {
			require.NotEmpty(t, c.assign, "the README keeps the run's id: %s", c.line)
			_, err := fmt.Sscan(vars[c.assign], &runID)
			require.NoError(t, err)
		}
	}
	require.Positive(t, runID, "the README's commands start no run")
	nodes, err := pgrun.RunNodes(b.Ctx, b.Pool, runID)
	require.NoError(t, err)
	require.NotEmpty(t, nodes)
	waitForRun(t, b, runID, []string{"default"})
	out := runRunner(t, b, []string{"workflow", "status", fmt.Sprint(runID)})
	require.Contains(t, out, "succeeded")
	for _, n := range nodes {
		require.Contains(t, out, "[x] "+n.Node)
	}
}

// notRunHere are the lines of the README's "From the command line" block that
// TestReadmeCommandLineRunsAsWritten does not run, by their first words, and why:
// each is run elsewhere. A new line of another kind fails the test until it is run or
// listed here.
var notRunHere = map[string]string{
	"export PGRUN_DATABASE_URL=": "the suite's own database is made by scripts/ensure-postgres.sh",
	"go run ./cmd/runner work":   "runs until stopped: the suite runs runners in process and as processes",
	"go run ./cmd/runner top":    "a full-screen view: tests/top_tmux_test.go drives it in tmux",
	"go run ./cmd/runner bench":  "a benchmark (docs/benchmarks.md)",
	"(cd bench &&":               "the River side by side, a benchmark in its own module",
	"scripts/bench-processes.sh": "a benchmark",
	"ENGINE=river scripts/":      "a benchmark",
}

// The README's "From the command line" block runs as written, in order, on a fresh
// database: every command but those notRunHere lists, with the ids it keeps in shell
// variables. Then the job it cancelled is cancelled, the ten jobs are queued and the
// queue has its limit.
func TestReadmeCommandLineRunsAsWritten(t *testing.T) {
	b := testkit.Setup(t)
	vars := map[string]string{}
	ran := 0
	for _, c := range readmeCommands(t, readmeBlock(t, "From the command line", "sh")) {
		skip := ""
		for prefix, why := range notRunHere {
			if strings.HasPrefix(strings.TrimSpace(c.line), prefix) {
				skip = why
			}
		}
		if skip != "" {
			t.Logf("not run here (%s): %s", skip, c.line)
			continue
		}
		require.NotNil(t, c.runner, "README line %q is neither run here nor listed in notRunHere", c.line)
		runReadmeCommand(t, b, c, vars)
		ran++
	}
	require.GreaterOrEqual(t, ran, 6)
	id, ok := vars["id"]
	require.True(t, ok, "the README keeps a job's id in $id")
	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status::text from pgrun.jobs where id = $1`, id).Scan(&status))
	require.Equal(t, "cancelled", status, "job cancel \"$id\" reached the job the README enqueued")
	require.Equal(t, 10, countRows(t, b, `select count(*) from pgrun.jobs where kind = 'sleep' and status = 'queued'`))
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.queues where name = 'images' and max_running = 4`))
}

// Every workflow in examples/workflows/ defines, starts with its nodes and runs to
// success on the built-in kinds (with the input the README starts it with, if any).
func TestReadmeExampleWorkflowsDefineStartAndRun(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "workflows", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "examples/workflows/ holds no workflow")
	inputs := map[string]string{} // workflow name -> the README's start input
	for _, c := range readmeRunnerCommands(t, readmeBlock(t, "Workflows", "sh")) {
		if args := c.runner; len(args) >= 4 && args[0] == "workflow" && args[1] == "start" {
			inputs[args[2]] = args[3]
		}
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b := testkit.Setup(t)
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			var spec map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &spec))
			// Named as `runner workflow define` names it: "name", else the file's base name.
			name := strings.TrimSuffix(filepath.Base(file), ".json")
			if spec["name"] != nil {
				require.NoError(t, json.Unmarshal(spec["name"], &name))
			}
			delete(spec, "name")
			var nodes []struct {
				Name  string `json:"name"`
				Kind  string `json:"kind"`
				Queue string `json:"queue"`
				Input bool   `json:"input"`
			}
			require.NoError(t, json.Unmarshal(spec["nodes"], &nodes))
			var names, queues []string
			for _, n := range nodes {
				names = append(names, n.Name)
				require.False(t, n.Input, "node %s waits for an input: examples should run unattended", n.Name)
				require.Contains(t, builtinKinds, n.Kind, "node %s: examples use only the built-in kinds", n.Name)
				q := n.Queue
				if q == "" {
					q = "default"
				}
				if !slices.Contains(queues, q) {
					queues = append(queues, q)
				}
			}

			specJSON, err := json.Marshal(spec)
			require.NoError(t, err)
			var version int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.define_workflow($1, $2::jsonb)`, name, specJSON).Scan(&version))
			require.Equal(t, 1, version)
			input := inputs[name]
			if input == "" {
				input = "{}"
			}
			var runID int64
			var status string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, status from pgrun.start_run($1, $2::jsonb)`, name, input).Scan(&runID, &status))
			require.Equal(t, "running", status)
			var got []string
			require.NoError(t, b.Pool.QueryRow(b.Ctx,
				`select array_agg(node order by node) from pgrun.jobs where run_id = $1 and parent_id is null`, runID).Scan(&got))
			slices.Sort(names)
			require.Equal(t, names, got, "one job per node")

			waitForRun(t, b, runID, queues)
			var output string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select output::text from pgrun.runs where id = $1`, runID).Scan(&output))
			require.NotEqual(t, "{}", output, "a run's output is its leaf nodes' outputs")
		})
	}
}
