package redis

import (
	"sync"
	"sync/atomic"
	"time"
)

// minPrune is the fewest entries a multiLeases holds before add looks for
// expired ones.
const minPrune = 1024

// multiLeases are the semaphore and shared leases a Locker granted that may still
// be live, by lease id, with their local deadlines. Their release runs lease.lua
// at once; any other release runs release.lua, which serves a lock in one call
// with one key, and lease.lua only if release.lua finds semaphore or shared
// leases on the name (a second round trip: a lease granted by another process,
// or one dropped from here). So the set decides only how many round trips a
// release takes, never whether it succeeds. Leases whose deadline passed without
// a release are dropped as the set grows, and a lease that renews is kept.
// The zero value is ready to use.
type multiLeases struct {
	n       atomic.Int64 // len(m), read without mu: a lock's release skips the lock
	mu      sync.Mutex
	m       map[string]time.Time
	pruneAt int
}

// add records lease id, whose local deadline is deadline; now is the time, for
// dropping entries past their deadline.
func (s *multiLeases) add(id string, deadline, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	if len(s.m) >= max(s.pruneAt, minPrune) {
		for k, d := range s.m {
			if d.Before(now) {
				delete(s.m, k)
			}
		}
		s.pruneAt = 2 * len(s.m)
	}
	s.m[id] = deadline
	s.n.Store(int64(len(s.m)))
}

// extend moves the deadline of lease id, if recorded, to deadline.
func (s *multiLeases) extend(id string, deadline time.Time) {
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[id]; ok {
		s.m[id] = deadline
	}
}

// take reports whether lease id was recorded, and forgets it.
func (s *multiLeases) take(id string) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	delete(s.m, id)
	s.n.Store(int64(len(s.m)))
	return ok
}
