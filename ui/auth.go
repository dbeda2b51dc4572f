package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// tokenCookie holds the login cookie of the bearer-token mode: a MAC of the token,
// never the token itself.
const tokenCookie = "pgrun_ui"

// ParseAuth reads a --auth value, "basic:USER:PASSWORD" (the password may contain
// colons), into a user and a password.
func ParseAuth(spec string) (user, password string, err error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok || kind != "basic" {
		return "", "", fmt.Errorf("--auth %q: use basic:USER:PASSWORD", spec)
	}
	user, password, ok = strings.Cut(rest, ":")
	if !ok || user == "" || password == "" {
		return "", "", fmt.Errorf("--auth basic needs a user and a password: basic:USER:PASSWORD")
	}
	return user, password, nil
}

// CheckListen refuses an address that is not loopback unless the dashboard has
// authentication or the operator insisted (insecureNoAuth). An empty host (":8080")
// listens on every interface, so it counts as not loopback.
func CheckListen(addr string, authenticated, insecureNoAuth bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w (use host:port, such as 127.0.0.1:8080)", addr, err)
	}
	if authenticated || insecureNoAuth || loopbackName(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without authentication: anyone who reaches it could cancel "+
		"and retry jobs; pass --auth basic:USER:PASSWORD or --auth-token TOKEN (or --insecure-no-auth "+
		"if something in front of it authenticates)", addr)
}

// loopbackName reports whether host (no port) is localhost or a loopback address.
func loopbackName(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost is loopbackName for a Host header, which may carry a port.
func loopbackHost(hostport string) bool {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return loopbackName(h)
	}
	return loopbackName(hostport)
}

// mac is HMAC-SHA256 of msg under the server's secret.
func (s *Server) mac(msg string) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// authorize checks the request's credentials and answers 401 (or sends a browser
// to /login in the token mode) when they are missing or wrong. /login itself and
// the static assets it uses are open.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if (s.opts.BasicUser != "" || s.opts.Token != "") && s.refuseGuessing(w, r) {
		return false
	}
	switch {
	case s.opts.BasicUser != "":
		u, p, ok := r.BasicAuth()
		if ok && equal(u, s.opts.BasicUser) && equal(p, s.opts.BasicPassword) {
			return true
		}
		if ok {
			s.loginFailed(r, "basic", u)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="pgrun", charset="UTF-8"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return false
	case s.opts.Token != "":
		if s.tokenOK(r) || r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
			return true
		}
		if _, presented := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); presented {
			s.loginFailed(r, "token", "")
		}
		// A browser goes to the login page; a program (JSON, the event stream, a
		// Prometheus scraper on /metrics) gets 401.
		if r.Method == http.MethodGet && !strings.HasPrefix(r.Header.Get("Accept"), "application/json") &&
			r.URL.Path != "/events" && r.URL.Path != "/metrics" && r.URL.Query().Get("format") != "json" {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return false
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="pgrun"`)
		http.Error(w, "authentication required: send Authorization: Bearer <token>", http.StatusUnauthorized)
		return false
	}
	return true
}

// tokenOK reports whether r carries the bearer token or the login cookie.
func (s *Server) tokenOK(r *http.Request) bool {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(bearer, s.opts.Token) {
		return true
	}
	c, err := r.Cookie(tokenCookie)
	return err == nil && equal(c.Value, s.loginValue())
}

// loginValue is the login cookie's value: a MAC of the token, so that the cookie
// does not hold the token and stops working when the server restarts.
func (s *Server) loginValue() string { return hex.EncodeToString(s.mac("login:" + s.opts.Token)) }

// equal compares two secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// checkPost guards an action: same-origin only (Origin and Sec-Fetch-Site, when the
// browser sends them) and the CSRF token. A failure is an error to show, 403.
func (s *Server) checkPost(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errors.New("cross-site request refused")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("request from another origin refused")
		}
	}
	if !equal(r.PostFormValue("csrf"), s.csrfToken()) {
		return errors.New("missing or wrong CSRF token: reload the page and try again")
	}
	return nil
}

// loginPage shows the token form (token mode only).
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login", "Sign in", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginData struct {
	Next  string `json:"next"`
	Error string `json:"error,omitempty"`
}

// login checks a typed token and sets the login cookie (HttpOnly, SameSite=Strict).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			http.Error(w, "request from another origin refused", http.StatusForbidden)
			return
		}
	}
	next := safeNext(r.PostFormValue("next"))
	if !equal(r.PostFormValue("token"), s.opts.Token) {
		s.loginFailed(r, "login form", "")
		w.WriteHeader(http.StatusUnauthorized)
		s.render(w, r, "login", "Sign in", loginData{Next: next, Error: "That token is not the one this dashboard was started with."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: s.loginValue(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a redirect target on this site: a path, never "//host" or a URL.
func safeNext(p string) string {
	if p == "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	return p
}
