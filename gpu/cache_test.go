package gpu

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fakeModel struct {
	name   string
	size   int64
	closed *atomic.Int32
}

func (m fakeModel) Size() int64  { return m.size }
func (m fakeModel) Close() error { m.closed.Add(1); return nil }

// fakeLoader loads models of the given sizes, counting loads and closes; release,
// when set, holds every load until it is closed.
type fakeLoader struct {
	sizes   map[string]int64
	loads   atomic.Int32
	closed  atomic.Int32
	release chan struct{}
}

func (l *fakeLoader) load(ctx context.Context, name string, _ int) (Model, error) {
	l.loads.Add(1)
	if l.release != nil {
		<-l.release
	}
	return fakeModel{name: name, size: l.sizes[name], closed: &l.closed}, nil
}

// clock is an injectable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestConcurrentGetsShareOneLoad(t *testing.T) {
	l := &fakeLoader{sizes: map[string]int64{"clip": 10}, release: make(chan struct{})}
	c := NewCache(CacheConfig{Load: l.load, Budgets: []int64{100}})
	var wg sync.WaitGroup
	handles := make([]*Handle, 8)
	for i := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Get(context.Background(), "clip")
			require.NoError(t, err)
			handles[i] = h
		}()
	}
	require.Eventually(t, func() bool { return l.loads.Load() == 1 }, time.Second, time.Millisecond)
	close(l.release)
	wg.Wait()
	require.EqualValues(t, 1, l.loads.Load())
	st := c.Stats()
	require.EqualValues(t, 1, st.Loads)
	require.EqualValues(t, 7, st.Hits)
	for _, h := range handles {
		h.Release()
	}
	require.Equal(t, []string{"clip"}, c.Loaded())
}

func TestEvictsLeastRecentlyUsedButNeverAModelInUse(t *testing.T) {
	clk := &clock{t: time.Unix(0, 0)}
	l := &fakeLoader{sizes: map[string]int64{"a": 40, "b": 40, "c": 40, "d": 90}}
	c := NewCache(CacheConfig{Load: l.load, Budgets: []int64{100}, Now: clk.now})
	ctx := context.Background()
	a, err := c.Get(ctx, "a")
	require.NoError(t, err)
	clk.add(time.Second)
	b, err := c.Get(ctx, "b")
	require.NoError(t, err)
	b.Release()
	clk.add(time.Second)
	a.Release() // a used more recently than b
	clk.add(time.Second)
	cm, err := c.Get(ctx, "c") // 40+40+40 > 100: evict b (LRU)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, c.Loaded())
	require.EqualValues(t, 1, c.Stats().Evictions)

	// d needs 90: a can go, c is held -> no room.
	_, err = c.Get(ctx, "d")
	require.ErrorIs(t, err, ErrNoRoom)
	require.Contains(t, c.Loaded(), "c", "a model in use is never evicted")
	cm.Release()
	d, err := c.Get(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, c.Loaded())
	d.Release()

	_, err = NewCache(CacheConfig{Load: l.load, Budgets: []int64{10}}).Get(ctx, "a")
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestIdleModelsUnloadOnTheInjectedClock(t *testing.T) {
	clk := &clock{t: time.Unix(0, 0)}
	l := &fakeLoader{sizes: map[string]int64{"a": 1, "b": 1}}
	c := NewCache(CacheConfig{Load: l.load, IdleUnload: time.Minute, Now: clk.now})
	ctx := context.Background()
	a, err := c.Get(ctx, "a")
	require.NoError(t, err)
	b, err := c.Get(ctx, "b")
	require.NoError(t, err)
	b.Release()
	clk.add(59 * time.Second)
	require.Zero(t, c.Sweep())
	clk.add(2 * time.Second)
	require.Equal(t, 1, c.Sweep(), "b idle for 61 s")
	require.Equal(t, []string{"a"}, c.Loaded(), "a is held: never unloaded")
	clk.add(time.Hour)
	require.Zero(t, c.Sweep())
	a.Release()
	clk.add(2 * time.Minute)
	require.Equal(t, 1, c.Sweep())
	require.Empty(t, c.Loaded())
	require.EqualValues(t, 2, l.closed.Load())
	require.EqualValues(t, 2, c.Stats().Unloads)
}

func TestModelsSpreadAcrossDevices(t *testing.T) {
	l := &fakeLoader{sizes: map[string]int64{"a": 60, "b": 60}}
	c := NewCache(CacheConfig{Load: l.load, Budgets: []int64{100, 100}})
	a, err := c.Get(context.Background(), "a")
	require.NoError(t, err)
	b, err := c.Get(context.Background(), "b")
	require.NoError(t, err)
	require.NotEqual(t, a.Device, b.Device)
	require.Zero(t, c.Stats().Evictions)
}
