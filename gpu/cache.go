package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Model is a loaded model: something that holds memory until it is closed.
type Model interface {
	// Size is the memory the model holds, in bytes, counted against its device's
	// budget.
	Size() int64
	// Close releases the model's memory.
	Close() error
}

// Loader loads model name, for example onto device (-1 when it runs on the CPU).
type Loader func(ctx context.Context, name string, device int) (Model, error)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Load loads a model. Required.
	Load Loader
	// Budgets is the memory each device may hold for models, in bytes; device i
	// is Budgets[i]. Empty means one CPU "device" (-1) with CPUBudget.
	Budgets []int64
	// CPUBudget is the budget when Budgets is empty (default 4 GiB).
	CPUBudget int64
	// IdleUnload unloads a model nobody has used for this long (0: never).
	IdleUnload time.Duration
	// Now is the clock idle unloading is judged by (default time.Now).
	Now func() time.Time
}

// DefaultCPUBudget is what a cache without devices may hold: models for CPU
// fallback are small, and a runner should not be killed for memory.
const DefaultCPUBudget = 4 << 30

// Errors Get returns.
var (
	// ErrTooLarge: the model is larger than any device's whole budget.
	ErrTooLarge = errors.New("gpu: model larger than any device budget")
	// ErrNoRoom: every device is full of models in use; try again later.
	ErrNoRoom = errors.New("gpu: no device has room (models in use)")
)

// Stats counts what a cache did.
type Stats struct {
	Hits      int64         `json:"hits"`
	Loads     int64         `json:"loads"`
	Evictions int64         `json:"evictions"`
	Unloads   int64         `json:"unloads"` // idle unloads
	LoadTime  time.Duration `json:"load_time"`
}

// Cache keeps models loaded between jobs. Get loads a model once (concurrent callers
// share the load), keeps it resident, evicts least-recently-used models that nobody
// holds to stay inside each device's budget, and Sweep unloads models idle longer
// than IdleUnload. A model somebody holds is never evicted or unloaded.
type Cache struct {
	cfg     CacheConfig
	devices []int
	budget  map[int]int64

	mu      sync.Mutex
	used    map[int]int64
	entries map[string]*entry
	stats   Stats
}

type entry struct {
	name     string
	model    Model
	device   int
	size     int64
	refs     int
	lastUsed time.Time
	ready    chan struct{} // closed when the load finished
	err      error
}

// Handle is a held model; Release it when the job is done with it.
type Handle struct {
	Model  Model
	Device int
	c      *Cache
	e      *entry
	once   sync.Once
}

// Release lets the model be evicted or unloaded again.
func (h *Handle) Release() {
	h.once.Do(func() {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		h.e.refs--
		h.e.lastUsed = h.c.cfg.Now()
	})
}

// NewCache returns a cache for cfg.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache{cfg: cfg, budget: map[int]int64{}, used: map[int]int64{}, entries: map[string]*entry{}}
	if len(cfg.Budgets) == 0 {
		b := cfg.CPUBudget
		if b <= 0 {
			b = DefaultCPUBudget
		}
		c.devices, c.budget[-1] = []int{-1}, b
	}
	for i, b := range cfg.Budgets {
		c.devices = append(c.devices, i)
		c.budget[i] = b
	}
	return c
}

// Get returns model name, loading it if it is not resident. The caller must Release
// the handle.
func (c *Cache) Get(ctx context.Context, name string) (*Handle, error) {
	c.mu.Lock()
	e := c.entries[name]
	if e != nil {
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.err != nil || c.entries[name] != e {
			if e.err != nil {
				return nil, e.err
			}
			c.mu.Unlock()
			h, err := c.Get(ctx, name) // evicted between the load and now: load again
			c.mu.Lock()
			return h, err
		}
		e.refs++
		e.lastUsed = c.cfg.Now()
		c.stats.Hits++
		return &Handle{Model: e.model, Device: e.device, c: c, e: e}, nil
	}
	e = &entry{name: name, ready: make(chan struct{}), refs: 1}
	c.entries[name] = e
	device := c.leastUsedDevice()
	c.mu.Unlock()

	start := time.Now()
	m, err := c.cfg.Load(ctx, name, device)
	took := time.Since(start)

	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(e.ready)
	if err == nil {
		err = c.place(e, m, device)
	}
	if err != nil {
		e.err = fmt.Errorf("load model %s: %w", name, err)
		delete(c.entries, name)
		return nil, e.err
	}
	e.lastUsed = c.cfg.Now()
	c.stats.Loads++
	c.stats.LoadTime += took
	return &Handle{Model: e.model, Device: e.device, c: c, e: e}, nil
}

// leastUsedDevice is where a new model goes first: the device with the most room.
func (c *Cache) leastUsedDevice() int {
	best := c.devices[0]
	for _, d := range c.devices {
		if c.budget[d]-c.used[d] > c.budget[best]-c.used[best] {
			best = d
		}
	}
	return best
}

// place accounts model m of entry e on a device with room, evicting least recently
// used idle models as needed (preferring device). Called with mu held.
func (c *Cache) place(e *entry, m Model, device int) error {
	size := m.Size()
	order := append([]int{device}, slices.DeleteFunc(slices.Clone(c.devices), func(d int) bool { return d == device })...)
	fits := false
	for _, d := range order {
		fits = fits || size <= c.budget[d]
	}
	if !fits {
		_ = m.Close()
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, size)
	}
	for _, d := range order {
		for c.budget[d]-c.used[d] < size {
			victim := c.lruIdle(d)
			if victim == nil {
				break
			}
			c.unload(victim)
			c.stats.Evictions++
		}
		if c.budget[d]-c.used[d] >= size {
			e.model, e.device, e.size = m, d, size
			c.used[d] += size
			return nil
		}
	}
	_ = m.Close()
	return ErrNoRoom
}

// lruIdle is the least recently used loaded model on device that nobody holds.
func (c *Cache) lruIdle(device int) *entry {
	var victim *entry
	for _, e := range c.entries {
		if e.model == nil || e.refs > 0 || e.device != device {
			continue
		}
		if victim == nil || e.lastUsed.Before(victim.lastUsed) {
			victim = e
		}
	}
	return victim
}

func (c *Cache) unload(e *entry) {
	delete(c.entries, e.name)
	c.used[e.device] -= e.size
	_ = e.model.Close()
}

// Sweep unloads models nobody holds that have been idle longer than IdleUnload and
// returns how many it unloaded.
func (c *Cache) Sweep() int {
	if c.cfg.IdleUnload <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	n := 0
	for _, e := range c.entries {
		if e.model != nil && e.refs == 0 && now.Sub(e.lastUsed) > c.cfg.IdleUnload {
			c.unload(e)
			c.stats.Unloads++
			n++
		}
	}
	return n
}

// Run sweeps every interval until ctx is done.
func (c *Cache) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sweep()
		}
	}
}

// Acquire is [Cache.Get] for callers that hold models through an interface
// (runner.ModelCache): the model, and the func that releases it.
func (c *Cache) Acquire(ctx context.Context, name string) (Model, func(), error) {
	h, err := c.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return h.Model, h.Release, nil
}

// Loaded lists the resident models, sorted: what a runner advertises as warm.
func (c *Cache) Loaded() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, e := range c.entries {
		if e.model != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Stats returns the counters so far.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Close unloads every model nobody holds.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.model != nil && e.refs == 0 {
			c.unload(e)
		}
	}
}
