// Package gate serialises work per key: the resource-side middleware holds a key's
// gate across a guard's admission and the handler, so that a request admitted with
// a lower token has finished before one with a higher token is admitted.
package gate

import (
	"context"
	"sync"
)

// Gate is a set of mutexes, one per key, that exist only while someone holds or
// waits for them. The zero value is ready to use; a Gate must not be copied.
type Gate struct {
	mu    sync.Mutex
	slots map[string]*slot
}

type slot struct {
	ch   chan struct{} // capacity 1: full while held
	refs int           // holders and waiters, guarded by Gate.mu
}

// Lock waits until it holds key's mutex or ctx is done. It returns the function
// that releases the mutex (call it exactly once), or ctx's error, in which case
// nothing is held.
func (g *Gate) Lock(ctx context.Context, key string) (unlock func(), err error) {
	g.mu.Lock()
	if g.slots == nil {
		g.slots = make(map[string]*slot)
	}
	s := g.slots[key]
	if s == nil {
		s = &slot{ch: make(chan struct{}, 1)}
		g.slots[key] = s
	}
	s.refs++
	g.mu.Unlock()

	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; g.drop(key, s) }, nil
	case <-ctx.Done():
		g.drop(key, s)
		return nil, ctx.Err()
	}
}

// drop forgets key's slot once nobody holds or waits for it.
func (g *Gate) drop(key string, s *slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.refs--
	if s.refs == 0 {
		delete(g.slots, key)
	}
}

// Len returns the number of keys held or waited for.
func (g *Gate) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.slots)
}
