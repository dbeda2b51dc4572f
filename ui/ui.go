// Package ui is pgrun's web dashboard: an http.Handler that shows queues, jobs,
// workflow runs, workers and hosts, schedules and dead letters, straight from the
// database, and lets an operator cancel, retry, pause and resume, and switch
// workers on, to drain or off. `runner ui` serves it; a program may mount it too:
//
//	h, err := ui.New(pool, ui.Options{ReadOnly: true})
//	if err != nil { ... }
//	defer h.Close()
//	http.ListenAndServe("127.0.0.1:8080", h)
//
// Pages are rendered on the server (html/template) from assets embedded in the
// binary: no CDN, no build step, and it works offline. Every page is also JSON with
// ?format=json. Live updates come from one LISTEN connection per Server on the
// engine's channels, debounced and fanned out to browsers as server-sent events
// (/events); the browser then re-renders the page's live part. Nothing in the
// browser polls tables.
//
// Every statement it sends is in internal/sqlapi (dashboard.go), and each list is
// bounded so that pages stay fast with millions of jobs (docs/ui.md, "Speed").
//
// Actions are POSTs carrying a CSRF token, each confirmed in the page first, each
// checked on the server: with ReadOnly the action routes answer 403 whatever the
// page shows. Authentication (basic or bearer token) is the caller's choice;
// CheckListen refuses to serve a non-loopback address without it.
package ui

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
)

// Options configure a Server. The zero value serves every page and every action to
// anyone who reaches it, which suits only a loopback address on a one-person host.
type Options struct {
	// ReadOnly disables every action on the server (403), not only in the page.
	// Connect with a role that can read (docs/ui.md) and set it.
	ReadOnly bool
	// BasicUser and BasicPassword, when BasicUser is set, require HTTP basic
	// authentication on every request.
	BasicUser, BasicPassword string
	// Token, when set, requires "Authorization: Bearer <Token>" on every request, or
	// the cookie the /login page sets after the token was typed there once.
	Token string
	// Logger receives the server's warnings (a lost LISTEN connection, a failed
	// action); nil discards them.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics beside the pages, behind the same
	// authentication (a Prometheus scraper sends the basic credentials or the bearer
	// token): `runner ui` mounts metrics.New(pool).Handler() there.
	Metrics http.Handler
}

// authenticated reports whether some authentication is configured.
func (o Options) authenticated() bool { return o.BasicUser != "" || o.Token != "" }

// Server is the dashboard. It is an http.Handler; Close stops its live-update
// goroutines.
type Server struct {
	pool   *pgxpool.Pool
	client *pgrun.Client // the job and run transitions of the actions, and the reads of one job or run
	opts   Options
	log    *slog.Logger
	mux    *http.ServeMux
	hub    *hub
	secret []byte     // keys the CSRF token and the login cookie
	guard  loginGuard // wrong credentials per address (auth_guard.go)
	pages  pageSet
	// typical holds the typical run times the flags on running jobs compare with
	// (page_jobs_lists.go).
	typical typicalCache

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New builds a Server on pool and starts its live-update listener, which holds one
// connection of its own (made with pool's configuration) for LISTEN. Behind a
// transaction-mode pooler LISTEN does not work: the pages then update on the
// server's one-second check of what changed (completions, progress, heartbeats).
func New(pool *pgxpool.Pool, opts Options) (*Server, error) {
	if pool == nil {
		return nil, errors.New("ui: nil pool")
	}
	if (opts.BasicUser == "") != (opts.BasicPassword == "") {
		return nil, errors.New("ui: basic authentication needs both a user and a password")
	}
	client, err := pgrun.NewClient(pool, pgrun.Config{})
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	s := &Server{pool: pool, client: client, opts: opts, log: opts.Logger, secret: make([]byte, 32)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if _, err := rand.Read(s.secret); err != nil {
		return nil, fmt.Errorf("ui: secret: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s.pages = pages
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.hub = newHub(pool, s.log)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.hub.run(ctx)
	}()
	s.routes()
	return s, nil
}

// dashboardSettings are the settings TunePool gives the dashboard's connections.
// The dashboard's statements are short and read few rows by index, but on a large
// jobs table the planner's estimates can make them look expensive: past
// jit_above_cost, compiling a statement took most of a page's time on each new
// connection (245 of 306 ms); and with a row estimate of one, a failed-jobs list
// filtered by error group chose a parallel scan of every failed job and a sort
// (680 ms) over walking the failed index backwards (9 ms). Neither helps a query
// that returns fifty rows (docs/ui.md, "Speed").
var dashboardSettings = map[string]string{
	"jit":                             "off",
	"max_parallel_workers_per_gather": "0",
}

// TunePool makes the connections of cfg run with the dashboard's settings (JIT off,
// no parallel query; sent when each connection starts), except those cfg already
// sets. `runner ui` builds its pool with it; a program that mounts the dashboard
// may too. Not for a pool that goes through PgBouncer, which refuses a startup
// parameter it does not know: the connections would fail.
func TunePool(cfg *pgxpool.Config) {
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	for k, v := range dashboardSettings {
		if _, set := cfg.ConnConfig.RuntimeParams[k]; !set {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
}

// Close stops the live updates (open event streams end) and waits for them. The
// pool is the caller's.
func (s *Server) Close() {
	s.cancel()
	s.hub.closeAll()
	s.wg.Wait()
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", s.overview)
	m.HandleFunc("GET /queues/{name}", s.queuePage)
	m.HandleFunc("GET /jobs", s.jobs)
	m.HandleFunc("GET /jobs/{id}", s.job)
	m.HandleFunc("GET /errors", s.errorsPage)
	m.HandleFunc("GET /runs", s.runs)
	m.HandleFunc("GET /runs/{id}", s.run)
	m.HandleFunc("GET /workers", s.workers)
	m.HandleFunc("GET /schedules", s.schedules)
	m.HandleFunc("GET /dead", s.dead)
	m.HandleFunc("GET /events", s.events)
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /actions/{action}", s.action)
	// Anything else: the page's own 404, not net/http's plain text.
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("there is no page %s here", r.URL.Path))
	})
	if s.opts.Metrics != nil {
		m.Handle("GET /metrics", s.opts.Metrics)
	}
	s.mux = m
}

// ServeHTTP applies the security headers, the host check, authentication and then
// the page or action.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if !s.opts.authenticated() && !loopbackHost(r.Host) {
		// Without authentication only a loopback name may be used: a page on another
		// site that rebinds its own name to 127.0.0.1 is refused (DNS rebinding).
		http.Error(w, "this dashboard answers to a loopback host name only (it runs without authentication)", http.StatusMisdirectedRequest)
		return
	}
	if !s.authorize(w, r) {
		return
	}
	// The change count before anything is read: the page's stream catches up from it.
	r = r.WithContext(context.WithValue(r.Context(), seqKey{}, s.hub.sequence()))
	s.mux.ServeHTTP(w, r)
}

// seqKey holds a request's live change count (hub.sequence) in its context.
type seqKey struct{}

// cacheStatic lets browsers keep the embedded assets for an hour.
func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// csrfToken is the token every action form carries: a MAC of the server's secret,
// so it cannot be guessed, and a page on another site cannot read it.
func (s *Server) csrfToken() string { return hex.EncodeToString(s.mac("csrf")) }
