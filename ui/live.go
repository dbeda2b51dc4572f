package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// The channels the engine notifies on (grep pg_notify sql/): jobs claimable in a
// queue, a running job to stop, an operator's worker switch, a host's sample.
var liveChannels = []string{"pgrun_jobs", "pgrun_cancel", "pgrun_control", "pgrun_hw"}

const (
	// liveDebounce gathers the notifications of a burst into one event: a thousand
	// enqueues in a second make one refresh, not a thousand.
	liveDebounce = 250 * time.Millisecond
	// liveMinInterval is the least time between two events to browsers, so that a
	// busy engine refreshes pages once a second at most.
	liveMinInterval = time.Second
	// liveCheckEvery is how often, while a browser watches, the server reads the
	// fingerprint of what changes without a notification (completions, progress,
	// heartbeats: the hot path sends none, on purpose).
	liveCheckEvery = time.Second
	// liveKeepAlive is how often an idle event stream gets a comment, so that
	// proxies do not close it.
	liveKeepAlive = 20 * time.Second
	// maxStreams bounds the open event streams per server.
	maxStreams = 256
	// listenRetry is how long the listener waits before reconnecting.
	listenRetry = 2 * time.Second
)

// change is what one live event tells browsers: the channels that spoke since the
// last event ("state" for the fingerprint), and a few of their payloads' subjects.
type change struct {
	Channels []string `json:"channels"`
	Queues   []string `json:"queues,omitempty"`
	Jobs     []string `json:"jobs,omitempty"`
	Hosts    []string `json:"hosts,omitempty"`
}

// add merges one notification into c, keeping at most 20 subjects of each sort.
func (c *change) add(channel, subject string) {
	if !slices.Contains(c.Channels, channel) {
		c.Channels = append(c.Channels, channel)
	}
	keep := func(list *[]string) {
		if subject != "" && len(*list) < 20 && !slices.Contains(*list, subject) {
			*list = append(*list, subject)
		}
	}
	switch channel {
	case "pgrun_jobs":
		keep(&c.Queues)
	case "pgrun_cancel":
		keep(&c.Jobs)
	case "pgrun_control", "pgrun_hw":
		keep(&c.Hosts)
	}
}

// hub owns the server's LISTEN connection and fingerprint check, and fans changes
// out to the open event streams.
type hub struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	in   chan [2]string // channel, subject

	mu     sync.Mutex
	subs   map[chan change]struct{}
	closed bool
	// seq counts the changes broadcast so far. A page carries the value it was
	// rendered under, and a stream that opens later than a change it missed gets
	// that change at once (see events).
	seq uint64
}

func newHub(pool *pgxpool.Pool, log *slog.Logger) *hub {
	return &hub{pool: pool, log: log, in: make(chan [2]string, 1024), subs: map[chan change]struct{}{}}
}

// subscribe returns a stream's channel (nil when too many are open or the hub is
// closed). It holds at most one pending change: a stream that has not read the last
// one will refresh anyway.
func (h *hub) subscribe() chan change {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.subs) >= maxStreams {
		return nil
	}
	ch := make(chan change, 1)
	h.subs[ch] = struct{}{}
	return ch
}

func (h *hub) unsubscribe(ch chan change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

// closeAll ends every stream (Close).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// sequence is the number of changes broadcast so far.
func (h *hub) sequence() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

func (h *hub) broadcast(c change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	for ch := range h.subs {
		select {
		case ch <- c:
		default: // a change is pending there already
		}
	}
}

// note records one notification; it never blocks the listener (a full buffer means
// a refresh is coming anyway).
func (h *hub) note(channel, subject string) {
	select {
	case h.in <- [2]string{channel, subject}:
	default:
	}
}

// run listens, checks the fingerprint and fans out until ctx is done.
func (h *hub) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.listen(ctx) }()
	go func() { defer wg.Done(); h.check(ctx) }()
	h.fanOut(ctx)
	wg.Wait()
}

// listen holds the one LISTEN connection (pgxlisten reconnects it).
func (h *hub) listen(ctx context.Context) {
	var warned bool
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, h.pool.Config().ConnConfig.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil && !warned {
				warned = true // once: a pooler that refuses LISTEN would say it every retry
				h.log.Warn("ui: live updates: LISTEN failed; pages still update from the one-second check", "err", err)
			}
		},
		ReconnectDelay: listenRetry,
	}
	for _, c := range liveChannels {
		l.Handle(c, pgxlisten.HandlerFunc(func(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
			h.note(n.Channel, subject(n.Channel, n.Payload))
			return nil
		}))
	}
	_ = l.Listen(ctx)
}

// subject is what a notification is about, for the event: the queue of pgrun_jobs
// ("queue" or "queue front"), the job of pgrun_cancel ("id:attempt"), the host of
// pgrun_control and pgrun_hw (a JSON sample).
func subject(channel, payload string) string {
	switch channel {
	case "pgrun_jobs":
		for i, c := range payload {
			if c == ' ' {
				return payload[:i]
			}
		}
		return payload
	case "pgrun_cancel":
		for i, c := range payload {
			if c == ':' {
				return payload[:i]
			}
		}
		return payload
	case "pgrun_hw":
		var s struct {
			Host string `json:"host"`
		}
		_ = json.Unmarshal([]byte(payload), &s)
		return s.Host
	}
	if len(payload) > 255 {
		return payload[:255]
	}
	return payload
}

// check reads the fingerprint at once and then once a second, and notes a "state"
// change when it moved. It runs whether or not a browser watches (about a
// millisecond a second), so that a change between a page's rendering and its
// stream's opening is counted. The first successful read notes a change too: a page
// served before it could show a state older than that first reading, and a change
// in between would otherwise never be told (a queued job cancelled within a second
// of the server's start sends no notification, and was never redrawn).
func (h *hub) check(ctx context.Context) {
	t := time.NewTicker(liveCheckEvery)
	defer t.Stop()
	var last *string // nil until the first successful read
	var failed bool
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		var fp *string
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := h.pool.QueryRow(qctx, sqlapi.DashboardFingerprint).Scan(&fp)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !failed {
				failed = true
				h.log.Warn("ui: live updates: the change check failed; only notifications refresh pages", "err", err)
			}
			continue
		}
		if fp != nil && (last == nil || *fp != *last) {
			h.note("state", "")
			last = fp
		}
	}
}

// fanOut turns notes into events: the first note of a burst opens a window of
// liveDebounce, and events are at least liveMinInterval apart.
func (h *hub) fanOut(ctx context.Context) {
	var next time.Time
	for {
		var c change
		select {
		case <-ctx.Done():
			return
		case n := <-h.in:
			c.add(n[0], n[1])
		}
		wait := time.NewTimer(max(liveDebounce, time.Until(next)))
	gather:
		for {
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case n := <-h.in:
				c.add(n[0], n[1])
			case <-wait.C:
				break gather
			}
		}
		h.broadcast(c)
		next = time.Now().Add(liveMinInterval)
	}
}

// events is the server-sent event stream a page subscribes to (/events?since=N, N
// the change count the page was rendered under): a "change" event whenever
// something it shows may have changed, and one at once if a change came after N.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	since, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	if err != nil {
		since = math.MaxUint64
	}
	ch := s.hub.subscribe()
	if ch == nil {
		http.Error(w, "too many live streams are open", http.StatusServiceUnavailable)
		return
	}
	defer s.hub.unsubscribe(ch)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	if _, err := fmt.Fprint(w, "retry: 3000\n: live\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	if s.hub.sequence() > since {
		if _, err := fmt.Fprint(w, "event: change\ndata: {\"channels\":[\"missed\"]}\n\n"); err != nil || rc.Flush() != nil {
			return
		}
	}
	keep := time.NewTicker(liveKeepAlive)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case c, ok := <-ch:
			if !ok {
				return
			}
			b, _ := json.Marshal(c)
			if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", b); err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}
