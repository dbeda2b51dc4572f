package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// assets holds the templates and the static files (CSS, JS), served from the binary.
//
//go:embed assets
var assets embed.FS

// pageSet maps a page name to its template set (the layout plus the page).
type pageSet map[string]*template.Template

// parsePages parses each assets/templates/<page>.html with the layout and partials.
func parsePages() (pageSet, error) {
	names, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	set := pageSet{}
	for _, n := range names {
		base := strings.TrimSuffix(n[strings.LastIndex(n, "/")+1:], ".html")
		if base == "layout" || base == "partials" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html",
			"assets/templates/partials.html", n)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", base, err)
		}
		set[base] = t
	}
	return set, nil
}

// view is what every page template gets: the page's own data in Data, and the
// frame around it.
type view struct {
	Title    string
	Page     string
	ReadOnly bool
	CSRF     string
	Flash    string
	Return   string // this page's path and query, where an action comes back to
	Now      time.Time
	Problems []string // sections that could not be read (permission denied, ...)
	Live     bool     // the page refreshes its live part on server-sent events
	Seq      uint64   // the live change count when the request began
	Data     any
}

// render writes page with data: the whole page, its live part alone for a live
// refresh (header X-Pgrun-Live), or data as JSON with ?format=json.
func (s *Server) render(w http.ResponseWriter, r *http.Request, page, title string, data any, problems ...string) {
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Data     any      `json:"data"`
			Problems []string `json:"problems,omitempty"`
		}{data, problems})
		return
	}
	v := view{Title: title, Page: page, ReadOnly: s.opts.ReadOnly, CSRF: s.csrfToken(), Return: r.URL.RequestURI(),
		Now: time.Now(), Problems: problems, Data: data,
		Live: page != "login" && page != "confirm" && page != "error"}
	v.Seq, _ = r.Context().Value(seqKey{}).(uint64)
	if c, err := r.Cookie(flashCookie); err == nil {
		if msg, err := url.QueryUnescape(c.Value); err == nil {
			v.Flash = msg
		}
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1})
	}
	t := s.pages[page]
	name := "layout"
	if r.Header.Get("X-Pgrun-Live") != "" {
		name = "live"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		s.log.Error("ui: render", "page", page, "err", err)
		http.Error(w, "rendering failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page with status code.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	w.WriteHeader(code)
	s.render(w, r, "error", http.StatusText(code), errorData{Code: code, Message: describe(err)})
}

type errorData struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// describe renders err for a person: a PostgreSQL error as its message and hint,
// with advice for a permission error.
func describe(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		s := pe.Message
		if pe.Hint != "" {
			s += " (hint: " + pe.Hint + ")"
		}
		if pe.Code == "42501" {
			s += " — the dashboard's database role lacks this privilege; docs/ui.md says which role to use"
		}
		return s
	}
	return err.Error()
}

// problem is a section's failure as one line for the page.
func problem(section string, err error) string { return section + ": " + describe(err) }

// flashCookie carries the outcome of an action to the page it returns to.
const flashCookie = "pgrun_flash"

func setFlash(w http.ResponseWriter, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

var funcs = template.FuncMap{
	"ago":       ago,
	"at":        func(t *time.Time) string { return stamp(t) },
	"secs":      secs,
	"num":       num,
	"heldText":  heldText,
	"pct":       pct,
	"pretty":    pretty,
	"deref":     deref,
	"derefInt":  func(p *int64) int64 { return derefOr(p, 0) },
	"derefF":    func(p *float64) float64 { return derefOr(p, 0) },
	"join":      strings.Join,
	"query":     withQuery,
	"progress":  func(cur int64, total *int64) int64 { return progressPct(cur, total) },
	"states":    func() []string { return allStates },
	"runStates": func() []string { return runStates },
	"modes":     func() []string { return []string{"on", "drain", "off"} },
	"modeClass": func(m string) string {
		if m == "off" {
			return "danger"
		}
		return ""
	},
	"has":       slices.Contains[[]string],
	"hasPrefix": strings.HasPrefix,
	"ptr":       func(t time.Time) *time.Time { return &t },
	"fptr":      func(f float64) *float64 { return &f },
	"int64":     func(n int) int64 { return int64(n) },
	"gib":       func(b *int64) string { return fmt.Sprintf("%.1f GiB", float64(derefOr(b, 0))/(1<<30)) },
	"compact":   compact,
	"dict":      dict,
}

// compact renders JSON on one line ("" for an empty object or none).
func compact(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// dict builds a map from key, value pairs, for passing several values to a
// template.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// allStates are the job states in state-machine order.
var allStates = []string{"pending", "queued", "running", "waiting", "succeeded", "failed", "cancelled", "skipped"}

// ago renders how long ago t was, "—" for nil.
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	d := time.Since(*t)
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

// stamp renders t in UTC to the second.
func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// short renders a duration the way a person reads it: 850ms, 12s, 4m10s, 3h05m, 2d4h.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// secs renders seconds (nil: "—").
func secs(v *float64) string {
	if v == nil {
		return "—"
	}
	return short(time.Duration(*v * float64(time.Second)))
}

// num renders an integer with thin thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteRune(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// pct renders a share as a percentage with one decimal.
func pct(part, whole float64) string {
	if whole <= 0 {
		return "—"
	}
	return strconv.FormatFloat(100*part/whole, 'f', 1, 64) + "%"
}

// pretty indents a JSON document for reading ("" for none).
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func deref(p *string) string { return derefOr(p, "") }

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// progressPct is a job's progress in whole percent, -1 when it has no total.
func progressPct(cur int64, total *int64) int64 {
	if total == nil || *total <= 0 {
		return -1
	}
	return min(100, max(0, cur*100 / *total))
}

// withQuery returns path with key set to value in its query (for pagination links):
// withQuery "/jobs?state=failed" "before" "42".
func withQuery(uri, key string, value any) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	q.Set(key, fmt.Sprint(value))
	u.RawQuery = q.Encode()
	return u.RequestURI()
}
