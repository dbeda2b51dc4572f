package ui

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The database-backed tests (pages, actions, auth, the browser) are in tests/; these
// cover what needs no database.

func TestTemplatesParse(t *testing.T) {
	pages, err := parsePages()
	require.NoError(t, err)
	for _, p := range []string{"overview", "jobs", "job", "runs", "run", "workers", "schedules", "dead", "confirm", "login", "error"} {
		require.Contains(t, pages, p)
	}
}

func TestCheckListenRefusesAnOpenAddressWithoutAuth(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.2:9"} {
		require.NoError(t, CheckListen(addr, false, false), addr)
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.0.0.5:8080", "example.com:80"} {
		err := CheckListen(addr, false, false)
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "--auth")
		require.NoError(t, CheckListen(addr, true, false), addr)
		require.NoError(t, CheckListen(addr, false, true), addr)
	}
	require.Error(t, CheckListen("8080", false, false))
}

func TestParseAuth(t *testing.T) {
	u, p, err := ParseAuth("basic:ops:s3cr:et")
	require.NoError(t, err)
	require.Equal(t, "ops", u)
	require.Equal(t, "s3cr:et", p)
	for _, bad := range []string{"ops:pw", "basic:ops", "basic::pw", "basic:ops:", "bearer:x:y"} {
		_, _, err := ParseAuth(bad)
		require.Error(t, err, bad)
	}
}

func TestSafeNextStaysOnSite(t *testing.T) {
	for in, want := range map[string]string{
		"/jobs?state=failed": "/jobs?state=failed", "": "/", "//evil.example/x": "/",
		"https://evil.example": "/", `/\evil.example`: "/", "jobs": "/",
	} {
		require.Equal(t, want, safeNext(in), in)
	}
}

func TestDAGLayoutLayersByLongestPath(t *testing.T) {
	nodes := []dagNode{
		{Name: "report", Deps: []string{"load"}},
		{Name: "extract"},
		{Name: "clean", Deps: []string{"extract"}},
		{Name: "load", Deps: []string{"clean", "extract", "missing"}},
		{Name: "loop-a", Deps: []string{"loop-b"}}, // a cycle (refused by define_workflow) must not hang
		{Name: "loop-b", Deps: []string{"loop-a"}},
	}
	l := layoutDAG(nodes)
	layer := map[string]int{}
	for i, n := range nodes {
		layer[n.Name] = l.layer[i]
	}
	require.Equal(t, 0, layer["extract"])
	require.Equal(t, 1, layer["clean"])
	require.Equal(t, 2, layer["load"])
	require.Equal(t, 3, layer["report"])

	svg := string(dagSVG([]dagNode{{Name: "a<b", Status: "running", JobID: 7, Progress: 40}, {Name: "c", Deps: []string{"a<b"}, Status: "pending", Progress: -1}}))
	require.Contains(t, svg, `data-node="a&lt;b"`)
	require.Contains(t, svg, `href="/jobs/7"`)
	require.Equal(t, 1, strings.Count(svg, `class="edge`))
	require.NotContains(t, svg, "a<b")
}

func TestSubjectOfNotifications(t *testing.T) {
	require.Equal(t, "images", subject("pgrun_jobs", "images 5"))
	require.Equal(t, "42", subject("pgrun_cancel", "42:3"))
	require.Equal(t, "gpu-1", subject("pgrun_hw", `{"host": "gpu-1", "cpu_pct": 3}`))
	require.Equal(t, "host-a", subject("pgrun_control", "host-a"))
}
