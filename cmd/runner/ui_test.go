package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// noRedirect shows a redirect (to the login page) instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// `runner ui` serves Prometheus metrics at /metrics beside the pages, behind the
// same authentication.
func TestUIServesMetricsBehindItsAuth(t *testing.T) {
	c, _ := newCLI(t)
	_, err := c.run("job", "enqueue", "noop", "--queue", "images")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	out := &lockedBuffer{}
	root.SetOut(out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"ui", "--addr", "127.0.0.1:0", "--auth-token", "s3cret", "--database-url", c.url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	listening := regexp.MustCompile(`dashboard on (http://\S+) .*metrics on /metrics`)
	var base string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "runner ui starts")

	scrape := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := scrape("")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = scrape("wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := scrape("s3cret")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pgrun_database_up 1")
	require.Contains(t, body, `pgrun_queue_jobs{queue="images",state="queued"} 1`)
}
