package tests

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Off loopback, a token or password shorter than ui.MinSecretLen is refused at start,
// with one line that says what to use; on loopback it is the operator's business.
func TestUIRefusesAWeakSecretOffLoopback(t *testing.T) {
	require.NoError(t, ui.CheckSecret("127.0.0.1:8080", "--auth-token", "x"))
	require.NoError(t, ui.CheckSecret("0.0.0.0:8080", "--auth-token", strings.Repeat("k", ui.MinSecretLen)))
	require.Error(t, ui.CheckSecret("0.0.0.0:8080", "--auth-token", "x"))
	require.Error(t, ui.CheckSecret(":8080", "the --auth password", "short-pass"))

	b := testkit.Setup(t)
	cmd := exec.Command(runnerBin, "ui", "--addr", "0.0.0.0:0", "--auth-token", "abc")
	cmd.Env = append(os.Environ(), "PGRUN_DATABASE_URL="+b.URL)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 1, "%s", out)
	require.Contains(t, lines[0], "--auth-token is 3 characters")
	require.Contains(t, lines[0], "at least 16")
}

// A wrong credential is logged (mode, address) and answered after a delay; past ten
// from one address in a minute, the address gets 429 without a check, even with the
// right token.
func TestUILogsAndLimitsWrongCredentials(t *testing.T) {
	b := testkit.Setup(t)
	var logs testkit.Buffer
	const token = "a-token-long-enough-to-keep"
	base := serveUI(t, b.Pool, ui.Options{Token: token, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	try := func(bearer string) int {
		req, err := http.NewRequest(http.MethodGet, base+"/?format=json", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, try(token))
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes { // at once: each waits out its delay
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = try("guess") }()
	}
	wg.Wait()
	for _, c := range codes {
		require.Equal(t, http.StatusUnauthorized, c)
	}
	require.Equal(t, 10, strings.Count(logs.String(), "dashboard login failed"))
	require.Contains(t, logs.String(), "remote=127.0.0.1")
	require.Equal(t, http.StatusTooManyRequests, try(token), "the address is held off for the rest of the minute")
}

// The action log names who acted (the basic-auth user) and from where; an unknown
// page gets the dashboard's own 404 page.
func TestUIActionLogNamesTheUserAndUnknownPagesAre404(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('default')`)
	var logs testkit.Buffer
	const password = "a-password-long-enough"
	base := serveUI(t, b.Pool, ui.Options{BasicUser: "ops", BasicPassword: password,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+password))
	_, page := get(t, base+"/", "Authorization", auth)
	resp, _ := post(t, base+"/actions/pause-queue", url.Values{"queue": {"default"}, "csrf": {csrfFrom(t, page)},
		"confirmed": {"yes"}}, "Authorization", auth)
	require.Less(t, resp.StatusCode, 400)
	require.True(t, one[bool](t, b.Ctx, b.Pool, `select paused from pgrun.queues where name = 'default'`))
	require.Contains(t, logs.String(), "user=ops")
	require.Contains(t, logs.String(), "remote=127.0.0.1")

	resp, html := get(t, base+"/no-such-page", "Authorization", auth)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, html, "<html")
	require.Contains(t, html, "there is no page /no-such-page here")
}
