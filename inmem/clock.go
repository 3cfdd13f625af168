package inmem

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fence/driver"
)

// ManualClock is a deterministic virtual driver.Clock: time stands still until
// Advance or Set moves it, and the callbacks scheduled with AfterFunc run
// synchronously inside that call, in deadline order (callbacks with equal deadlines
// in the order they were scheduled). Callbacks may schedule more callbacks; those
// that fall due within the same Advance run in it too.
//
// A callback is never run inside AfterFunc, even when it is already due (d <= 0):
// it runs at the next Advance or Set (Advance(0) runs it). So callers may schedule
// while holding their own locks, as fence.Lease does.
//
// ManualClock is safe for concurrent use. Advance and Set are serialised with each
// other; a callback must not call Advance or Set itself (it would deadlock).
type ManualClock struct {
	advanceMu sync.Mutex // serialises Advance and Set so callbacks run in time order

	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
	added  chan struct{} // closed and replaced when a callback is scheduled
}

var _ driver.Clock = (*ManualClock)(nil)

// NewManualClock returns a ManualClock that reads t0 until it is advanced.
func NewManualClock(t0 time.Time) *ManualClock {
	return &ManualClock{now: t0, added: make(chan struct{})}
}

// Now returns the clock's current virtual time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d, inside the Advance
// or Set call that gets there. The returned Timer's Stop cancels it.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) driver.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{clock: c, when: c.now.Add(d), seq: c.seq, f: f, index: -1}
	heap.Push(&c.timers, t)
	close(c.added)
	c.added = make(chan struct{})
	return t
}

// WaitPending blocks until at least n callbacks are pending, so a test can let a
// goroutine schedule its timer (a waiting Acquire, say) before advancing the
// clock. It returns ctx's error, wrapped, if ctx ends first.
func (c *ManualClock) WaitPending(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, added := len(c.timers), c.added
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			return fmt.Errorf("inmem: waiting for %d pending callbacks, have %d: %w", n, have, ctx.Err())
		}
	}
}

// Pending returns how many callbacks are scheduled and not yet run or stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock forward by d, running every callback that falls due, each
// with the clock reading its own deadline. A negative d is treated as 0.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.advanceMu.Lock()
	defer c.advanceMu.Unlock()
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.runUntil(target)
}

// Set moves the clock to t. Moving forward runs the callbacks that fall due, as
// Advance does. Moving backward (a wall-clock jump) runs nothing; scheduled
// callbacks keep their absolute deadlines.
func (c *ManualClock) Set(t time.Time) {
	c.advanceMu.Lock()
	defer c.advanceMu.Unlock()
	c.runUntil(t)
}

// runUntil runs due callbacks one at a time, without holding mu, so they may call
// Now and AfterFunc, then leaves the clock at target.
func (c *ManualClock) runUntil(target time.Time) {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(target) {
			c.now = target
			c.mu.Unlock()
			return
		}
		t := heap.Pop(&c.timers).(*manualTimer)
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
	}
}

type manualTimer struct {
	clock *ManualClock
	when  time.Time
	seq   uint64
	f     func()
	index int // position in the heap, -1 once run or stopped
}

// Stop cancels the callback; it reports whether it did so before the callback ran.
func (t *manualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&c.timers, t.index)
	return true
}

// timerHeap orders timers by deadline, then by scheduling order.
type timerHeap []*manualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}
