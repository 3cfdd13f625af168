package bolt

import (
	"time"
)

// stepTolerance is how far the wall clock may run ahead of the store's frame
// before the store treats it as a forward step. The wall and monotonic clocks
// advance at the same rate (NTP slews both), so only a step moves one against
// the other; the tolerance absorbs reading jitter of an injected wall clock.
const stepTolerance = int64(time.Millisecond)

// wallNow returns the wall-clock reading that goes with n (a reading of the
// store's clock), in Unix nanoseconds.
func (s *Store) wallNow(n time.Time) int64 {
	if s.wall != nil {
		return s.wall().UnixNano()
	}
	return n.UnixNano()
}

// readLocked returns the lease time of n (a reading of the store's clock taken
// now). If the wall clock has stepped forward against it, it raises the frame
// that turns lease times into wall times by the step and marks every held lease
// for rewriting, so that a restart, which has only the wall clock, does not see
// them end early; the caller's next flush carries the rewrite. A backward step is
// ignored: written expiries then lie later by the wall clock (longer, never
// shorter). s.mu must be held.
func (s *Store) readLocked(n time.Time) int64 {
	t := int64(n.Sub(s.base))
	// Compare with a fresh reading: n may be a while old.
	m := s.clock.Now()
	skew := s.wallNow(m) - (s.wall0 + int64(m.Sub(s.base)))
	if skew <= stepTolerance {
		return t
	}
	s.wall0 += skew
	for _, h := range s.heap {
		s.markDirtyLocked(h.e)
	}
	return t
}

// now returns the lease time: nanoseconds since Open by the store's clock
// (monotonic for the system clock).
func (s *Store) now() int64 { return int64(s.clock.Now().Sub(s.base)) }

// wallAt turns a lease time into Unix nanoseconds. s.mu must be held.
func (s *Store) wallAt(t int64) int64 { return s.wall0 + t }
