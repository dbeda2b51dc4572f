package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// nowhere is a database URL nothing answers on: a command given it can only fail
// by its own checks, or by connecting, which a check must come before.
const nowhere = "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=1"

// flagCase is one bad command line and what its one-line error must say.
type flagCase struct {
	args []string
	want []string
}

// requireRefusedBeforeConnecting runs each case as main does against nowhere: exit
// 1, one line naming the flag and the value, and no attempt to connect.
func requireRefusedBeforeConnecting(t *testing.T, cases []flagCase) {
	t.Helper()
	for _, c := range cases {
		code, stderr := stderrOf(append(c.args, "--database-url", nowhere)...)
		requireOneLineError(t, code, stderr, c.want...)
		require.NotContains(t, stderr, "connect", "%v: validation comes before connecting", c.args)
	}
}

// Each flag of job enqueue that used to be dropped or changed without a word is
// refused with one line naming it and its value, and nothing is enqueued.
func TestEnqueueRefusesFlagsItWouldIgnoreOrChange(t *testing.T) {
	const window = "give 1ms to 8784h (366 days)"
	cases := []flagCase{
		{[]string{"--timeout", "1ns"}, []string{"--timeout 1ns is too short: " + window + ", or 0 for the queue's default_timeout"}},
		{[]string{"--timeout", "999us"}, []string{"--timeout 999µs is too short"}},
		{[]string{"--timeout", "-1s"}, []string{"--timeout -1s is negative: " + window}},
		{[]string{"--timeout", "8784h0m0.000001s"}, []string{"--timeout 8784h0m0.000001s is too long: " + window}},
		{[]string{"--timeout", "100000h"}, []string{"--timeout 100000h0m0s is too long"}},
		{[]string{"--unique-key", "k", "--unique-window", "1ns"}, []string{"--unique-window 1ns is too short: " + window}},
		{[]string{"--unique-key", "k", "--unique-window", "0"}, []string{"--unique-window 0s is not positive: " + window}},
		{[]string{"--unique-key", "k", "--unique-window", "-1h"}, []string{"--unique-window -1h0m0s is negative"}},
		{[]string{"--unique-key", "k", "--unique-window", "8785h"}, []string{"--unique-window 8785h0m0s is too long"}},
		{[]string{"--unique-window", "1h"}, []string{"--unique-window 1h0m0s needs --unique-key"}},
		{[]string{"--unique-window", "0"}, []string{"--unique-window 0s needs --unique-key"}},
		{[]string{"--replace"}, []string{"--replace needs --unique-key"}},
		{[]string{"--model-required"}, []string{"--model-required needs --model"}},
		{[]string{"--model", "", "--model-required"}, []string{`--model "" is empty: give a model name, or leave the flag out`}},
		{[]string{"--unique-key", "", "--replace"}, []string{`--unique-key "" is empty: give a key, or leave the flag out`}},
		{[]string{"--concurrency-key", ""}, []string{`--concurrency-key "" is empty`}},
		{[]string{"--queue", ""}, []string{`--queue "" is empty: give a queue name (` + pgrun.QueueNameFormat + ")"}},
		{[]string{"--count", "1000001"}, []string{"--count must be 1 to 1000000, got 1000001"}},
		{[]string{"--count", "0"}, []string{"--count must be 1 to 1000000, got 0"}},
	}
	for i := range cases {
		cases[i].args = append([]string{"job", "enqueue", "echo", `{"a": 1}`}, cases[i].args...)
	}
	c, pool := newCLI(t)
	requireRefusedBeforeConnecting(t, cases)

	// Against a database that answers, each is refused just the same and writes nothing.
	for _, tc := range cases {
		before := count(t, pool, `select count(*) from pgrun.jobs`)
		out, err := c.run(tc.args...)
		require.Error(t, err, "%v", tc.args)
		for _, w := range tc.want {
			require.Contains(t, oneLine(err), w)
		}
		require.Empty(t, out, "%v", tc.args)
		require.Equal(t, before, count(t, pool, `select count(*) from pgrun.jobs`), "%v enqueued a job", tc.args)
	}
	require.Zero(t, count(t, pool, `select count(*) from pgrun.jobs`))
}

// The same flags at their bounds are accepted, and the job gets what was asked:
// --timeout 0 keeps meaning the queue's default_timeout (else the engine's hour).
func TestEnqueueAcceptsFlagsAtTheirBounds(t *testing.T) {
	c, pool := newCLI(t)
	timeoutOf := func(id int) float64 {
		t.Helper()
		var s float64
		require.NoError(t, pool.QueryRow(context.Background(),
			`select extract(epoch from timeout)::float8 from pgrun.jobs where id = $1`, id).Scan(&s))
		return s
	}
	for i, tc := range []struct {
		args    []string
		timeout time.Duration
	}{
		{[]string{"--timeout", "1ms"}, time.Millisecond},
		{[]string{"--timeout", "8784h"}, 366 * 24 * time.Hour},
		{[]string{"--timeout", "0"}, time.Hour},
		{[]string{"--unique-key", "a", "--unique-window", "1ms"}, time.Hour},
		{[]string{"--unique-key", "b", "--unique-window", "8784h", "--replace"}, time.Hour},
		{[]string{"--model", "bge-small", "--model-required"}, time.Hour},
	} {
		out, err := c.run(append([]string{"job", "enqueue", "echo"}, tc.args...)...)
		require.NoError(t, err, "%v", tc.args)
		require.Contains(t, out, "queued", "%v", tc.args)
		require.Equal(t, tc.timeout.Seconds(), timeoutOf(i+1), "%v", tc.args)
	}
	require.Equal(t, 1, count(t, pool, `select count(*) from pgrun.jobs where model = 'bge-small' and model_required`))
}

// top refuses a --width that is negative or absurd, a --width or --interval the
// mode it runs in would ignore, and an --interval out of range, before connecting.
func TestTopRefusesFlagsItWouldIgnore(t *testing.T) {
	t.Parallel()
	requireRefusedBeforeConnecting(t, []flagCase{
		{[]string{"top", "--once", "--width", "-5"}, []string{"--width -5 is not valid: give 1 to 10000 columns, or 0 for the terminal's width (else 160)"}},
		{[]string{"top", "--once", "--width", "10001"}, []string{"--width 10001 is not valid"}},
		{[]string{"top", "--width", "120"}, []string{"--width 120 needs --once"}},
		{[]string{"top", "--width", "0"}, []string{"--width 0 needs --once"}},
		{[]string{"top", "--interval", "199ms"}, []string{"--interval 199ms is too short: use 200ms or more"}},
		{[]string{"top", "--interval", "-1s"}, []string{"--interval -1s is too short"}},
		{[]string{"top", "--interval", "1h0m0.001s"}, []string{"--interval 1h0m0.001s is too long: use 1h0m0s or less"}},
		{[]string{"top", "--once", "--interval", "5s"}, []string{"--interval 5s has no effect with --once"}},
	})
}

// The bounds themselves, and the flags' defaults, pass top's checks.
func TestTopFlagsAtTheirBounds(t *testing.T) {
	t.Parallel()
	given := func(names ...string) func(string) bool {
		return func(n string) bool { return strings.Contains(" "+strings.Join(names, " ")+" ", " "+n+" ") }
	}
	for _, c := range []struct {
		once     bool
		interval time.Duration
		width    int
		changed  func(string) bool
	}{
		{false, 2 * time.Second, 0, given()},
		{true, 2 * time.Second, 0, given("once")},
		{true, 2 * time.Second, 0, given("once", "width")},
		{true, 2 * time.Second, 1, given("once", "width")},
		{true, 2 * time.Second, 10000, given("once", "width")},
		{false, 200 * time.Millisecond, 0, given("interval")},
		{false, time.Hour, 0, given("interval")},
	} {
		require.NoError(t, checkTopFlags(c.once, c.interval, c.width, c.changed), "%+v", c)
	}
}

// migrate up, grants and sql all refuse a --role-prefix whose role names PostgreSQL
// would cut (or an empty one, which the library reads as pgrun_), before connecting.
func TestMigrateRefusesRolePrefixesBeforeConnecting(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	var cases []flagCase
	for _, sub := range []string{"up", "grants", "sql"} {
		cases = append(cases,
			flagCase{[]string{"migrate", sub, "--role-prefix", long}, []string{
				`--role-prefix "` + long + `" is 63 bytes, too long: role PREFIXenqueuer would be 71 bytes, over PostgreSQL's limit of 63; give a prefix of at most 55 bytes`}},
			flagCase{[]string{"migrate", sub, "--role-prefix", strings.Repeat("b", 56)}, []string{"is 56 bytes, too long: role PREFIXenqueuer would be 64 bytes"}},
			flagCase{[]string{"migrate", sub, "--role-prefix", ""}, []string{`--role-prefix "" is empty: give a prefix such as acme_, or leave the flag out for pgrun_`}},
		)
	}
	requireRefusedBeforeConnecting(t, cases)

	// At the bound the names are exactly 63 bytes, and migrate sql prints them.
	fit := strings.Repeat("c", 55)
	out, err := (&cli{t: t, url: nowhere}).run("migrate", "sql", "--role-prefix", fit)
	require.NoError(t, err)
	require.Contains(t, out, `create role "`+fit+`enqueuer" nologin`)
}

// The CLI's prefix check is the library's, moved before connecting: where
// pgrun.MigrateWith accepts a prefix, so do migrate up and grants, and where it
// refuses one, they do too. A database that answers shows that a refused grants
// prints nothing and a refused up creates no role.
func TestMigrateRolePrefixCheckMatchesMigrateWith(t *testing.T) {
	c, pool := newCLI(t)
	ctx := context.Background()
	for _, n := range []int{54, 55, 56, 63} {
		prefix := strings.Repeat("p", n)
		libErr := pgrun.MigrateWith(ctx, pool, pgrun.MigrateOptions{RolePrefix: prefix, NoCreateRoles: true})
		cliErr := checkRolePrefix(prefix)
		require.Equal(t, libErr != nil, cliErr != nil, "prefix of %d bytes: library %v, CLI %v", n, libErr, cliErr)
		if libErr != nil {
			require.ErrorContains(t, libErr, "longer than 63 bytes")
		}

		out, err := c.run("migrate", "grants", "--role-prefix", prefix)
		if cliErr != nil {
			require.EqualError(t, err, cliErr.Error())
			require.Empty(t, out)
		} else {
			require.NoError(t, err)
			require.Contains(t, out, `create role "`+prefix+`enqueuer" nologin`)
		}
		out, err = c.run("migrate", "up", "--role-prefix", prefix, "--no-create-roles")
		if cliErr != nil {
			require.EqualError(t, err, cliErr.Error())
			require.Empty(t, out)
		} else {
			require.NoError(t, err)
		}
	}
	require.Zero(t, count(t, pool, `select count(*) from pg_roles where rolname like 'ppppp%'`))
}
