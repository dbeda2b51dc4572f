package ui

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Bounds of the dashboard's credentials and of guessing them.
const (
	// MinSecretLen is the shortest token or basic-auth password accepted on an address
	// that is not loopback: 16 characters of a random token (openssl rand -hex 16 gives
	// 32) cannot be guessed at any rate a server answers.
	MinSecretLen = 16
	// failedLoginDelay is how long a wrong credential waits for its answer: a guesser
	// gets a second per try per connection, an operator who mistyped barely notices.
	failedLoginDelay = time.Second
	// maxFailedLogins is how many wrong credentials one address may send per
	// failedLoginWindow; past it the address gets 429 without a check until the
	// window ends.
	maxFailedLogins   = 10
	failedLoginWindow = time.Minute
	// maxGuardedAddrs bounds the memory of addresses (a flood of addresses resets it).
	maxGuardedAddrs = 10000
)

// CheckSecret refuses a token or password (what names it: --auth-token, the --auth
// password) shorter than MinSecretLen when addr is not loopback.
func CheckSecret(addr, what, secret string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || secret == "" || loopbackName(host) || len(secret) >= MinSecretLen {
		return nil // CheckListen says what is wrong with addr
	}
	return fmt.Errorf("%s is %d characters: off loopback (%s) use at least %d, such as the output of `openssl rand -hex 16`",
		what, len(secret), addr, MinSecretLen)
}

// loginGuard counts wrong credentials per remote address.
type loginGuard struct {
	mu    sync.Mutex
	fails map[string]*guardCount
}

type guardCount struct {
	n     int
	since time.Time
}

// blocked reports whether addr sent maxFailedLogins wrong credentials within the
// window, and how long until it may try again.
func (g *loginGuard) blocked(addr string, now time.Time) (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.fails[addr]
	if c == nil || now.Sub(c.since) >= failedLoginWindow {
		return false, 0
	}
	return c.n >= maxFailedLogins, failedLoginWindow - now.Sub(c.since)
}

// failed counts a wrong credential from addr and returns the count in its window.
func (g *loginGuard) failed(addr string, now time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fails == nil || len(g.fails) >= maxGuardedAddrs {
		g.fails = map[string]*guardCount{}
	}
	c := g.fails[addr]
	if c == nil || now.Sub(c.since) >= failedLoginWindow {
		c = &guardCount{since: now}
		g.fails[addr] = c
	}
	c.n++
	return c.n
}

// remoteAddr is r's client address without its port.
func remoteAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// refuseGuessing answers 429 for an address that sent too many wrong credentials,
// and reports whether it did.
func (s *Server) refuseGuessing(w http.ResponseWriter, r *http.Request) bool {
	blocked, wait := s.guard.blocked(remoteAddr(r), time.Now())
	if !blocked {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
	http.Error(w, "too many wrong credentials from this address: try again later", http.StatusTooManyRequests)
	return true
}

// loginFailed logs a wrong credential (who tried, from where, how often) and makes
// its answer wait failedLoginDelay.
func (s *Server) loginFailed(r *http.Request, mode, user string) {
	addr := remoteAddr(r)
	n := s.guard.failed(addr, time.Now())
	s.log.Warn("dashboard login failed", "mode", mode, "user", user, "remote", addr, "path", r.URL.Path,
		"failures_this_minute", n)
	timer := time.NewTimer(failedLoginDelay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done():
	}
}

// actor names who sent r, for the action log: the basic-auth user, "token" for the
// bearer-token mode (one secret: no name to give), or "anonymous".
func (s *Server) actor(r *http.Request) string {
	switch {
	case s.opts.BasicUser != "":
		if u, _, ok := r.BasicAuth(); ok {
			return u
		}
	case s.opts.Token != "":
		return "token"
	}
	return "anonymous"
}
