package bolt

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	bbolt "go.etcd.io/bbolt"
)

// Defaults of Options fields left zero.
const (
	DefaultTimeout       = time.Second
	DefaultTokenBlock    = 1 << 16
	DefaultFlushInterval = 100 * time.Millisecond
)

// MaxValueLen is the largest value Put stores, in bytes (1 MiB). A larger value is
// refused with fence.ErrInvalid.
const MaxValueLen = 1 << 20

// SchemaVersion is the layout version stored in the file. Open refuses files of
// another version with ErrNotStore.
const SchemaVersion = "1"

// Errors of Open about the file itself. Open never writes to a file it refuses.
var (
	// ErrNotStore means the file is not a fence store: not a bbolt database, a bbolt
	// database of another program, or a fence store of another schema version.
	ErrNotStore = errors.New("bolt: not a fence store")
	// ErrCorrupt means the file is a damaged bbolt database (a checksum failed or a
	// page is inconsistent).
	ErrCorrupt = errors.New("bolt: corrupt database file")
)

// Options configure a Store. The zero value (or a nil *Options) is a safe default.
type Options struct {
	// Clock judges lease expiry; nil means driver.SystemClock. Durations are
	// measured with it (monotonic for the system clock).
	Clock driver.Clock
	// Wall reads the wall clock, in which the file stores lease expiries (the one
	// clock that survives a restart); nil means the wall reading of Clock.Now. Tests
	// inject a wall clock that steps, to show that a forward step does not shorten
	// a lease after a restart (see the package doc).
	Wall func() time.Time
	// Timeout bounds how long Open waits for the file lock held by another process
	// before it fails with fence.ErrUnavailable; 0 means DefaultTimeout.
	Timeout time.Duration
	// NoSync skips fsync. UNSAFE: a power loss or OS crash can then lose tokens,
	// leases and acknowledged Puts (kill -9 of the process alone cannot). For tests
	// and benchmarks only.
	NoSync bool
	// TokenBlock is how many tokens are reserved on disk ahead of use (see the
	// package doc); 0 means DefaultTokenBlock. A crash skips at most this many.
	TokenBlock uint64
	// SyncTTL is ignored.
	//
	// Deprecated: every grant, renewal and release is written before it is
	// acknowledged, whatever its TTL, so there is no lease horizon any more.
	SyncTTL time.Duration
	// HorizonChunk is ignored.
	//
	// Deprecated: see SyncTTL.
	HorizonChunk time.Duration
	// FlushInterval is how often the store checks the wall clock for a forward
	// step when it is idle, and writes the last tokens of leases that expired
	// (their memory is reclaimed then); 0 means DefaultFlushInterval.
	FlushInterval time.Duration
	// ExternalLocks says that the fences the KV checks (Put, Delete, Fence) come
	// from another Locker than this store, such as a Redis whose locks guard the
	// store's keys: the store cannot know which tokens another locker issued, so
	// it does not refuse a fence it never issued itself (P9, see the package doc),
	// and checks fences with fence.Admit only. Leave it false when the locks come
	// from this store.
	ExternalLocks bool
}

// Store is the embedded durable store: a fence.Locker, fence.Healer,
// fence.Revoker, fence.Inspector, fence.Watcher, fence.KV and fence.Guard in one
// bbolt file. It is safe for
// concurrent use. Close it to release the file.
type Store struct {
	db     *bbolt.DB
	path   string
	clock  driver.Clock
	engine driver.Engine    // Acquire's loop, by clock, stopped by closing
	wall   func() time.Time // nil: the wall reading of clock.Now
	base   time.Time        // clock reading at Open; lease times are nanoseconds since it
	// wall0 turns lease times into wall-clock times (Unix nanoseconds): the wall
	// reading at Open, raised by every forward step of the wall clock seen since
	// (never lowered), so written expiries never come earlier by the wall clock
	// than the lease's real expiry. Guarded by mu.
	wall0 int64

	block    uint64
	interval time.Duration
	// externalLocks: the KV does not check that this store issued its fences
	// (Options.ExternalLocks).
	externalLocks bool

	closed atomic.Bool
	life   sync.RWMutex // held shared by KV operations, exclusively by Close

	mu       sync.Mutex
	isClose  bool
	closing  chan struct{} // closed by Close: wakes every waiter
	locks    map[string]*entry
	watchers driver.Watchers // Watch subscriptions, notified under mu
	peak     int             // largest len(locks) since the map was last rebuilt
	heap     []*hold
	held     int // names with a lease in the heap (entry.held)
	timer    driver.Timer
	timerAt  int64 // when timer fires (0: none armed)

	next uint64 // next token to hand out
	ceil uint64 // durable token ceiling: tokens <= ceil may be handed out

	// Commits of lock records and the grants they carried, for the benchmarks.
	statCommits, statGrants int64

	// graceUntil is only set when a file written by an older version (with a
	// lease horizon) is opened after a crash: until that horizon passes no
	// grants (lease time); 0: no grace.
	graceUntil int64
	graceDone  chan struct{} // closed when the grace period ends

	fmu     sync.Mutex // serialises flushOnce
	wal     *wal       // the lease log the flusher appends to
	dirty   []*entry
	pending *flushGen
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
}

// The interfaces of packages fence and driver that a Store implements.
var _ interface {
	fence.FeatureLocker
	driver.Granter
	fence.Healer
	fence.Revoker
	fence.Inspector
	fence.Watcher
	fence.KV
	fence.Guard
} = (*Store)(nil)

// entry is one lock name in memory: held, or with a last token not yet on disk,
// or with waiters. Kept small: at a million held leases it is most of the memory.
// Its live leases are of one kind (a lock, a semaphore's permits, or shared
// leases: driver.Decide grants no other), which limit and shared say.
type entry struct {
	name   string
	last   fence.Token // last token issued for name (or healed to)
	x      *extra      // the leases beyond h, the waiters' channel and the exclusive waiter; nil for a lock nobody waited for
	h      hold        // the first lease (h.hidx -1: none); a lock has only this one
	limit  int16       // the semaphore limit of the live leases; 0 for a lock or shared
	shared bool        // the live leases are shared ones
	dirty  bool        // last/leases not yet written
}

// hold is one lease on a name, in the expiry heap while live.
type hold struct {
	e       *entry
	id      [16]byte    // lease id
	token   fence.Token // its token
	meta    *holdMeta   // its owner and request id, nil if neither (most leases: a pointer keeps entry within 96 bytes)
	expires int64       // its expiry, lease time
	hidx    int32       // index in the expiry heap; -1: ended
	slot    int32       // its semaphore slot; 0 for a lock or shared lease
}

// extra is what a semaphore or a shared lock has beyond a lock, and a lock that
// was waited for.
type extra struct {
	holds []*hold // live leases other than entry.h
	// wake closes when a lease ends (nil: nobody waits): the wake-up of the
	// waiting acquires, made by the first.
	wake chan struct{}
	// waiterUntil is when the record of an exclusive acquire waiting for shared
	// holders ends (lease time; 0: none). It lives in memory only: a waiter is a
	// call in this process (or a fence serve request), which a crash ends with
	// the store, and a waiter that outlives the store (a remote client that asks
	// again) records itself again at its first try on the reopened store, before
	// it waits. A crash can therefore let shared acquires in ahead of a remote
	// exclusive waiter once, never grant anything the rules refuse.
	waiterUntil int64
}

// holdMeta is what a lease may have beyond its token and expiry: its owner
// (fence.WithOwner), on disk, and its request id (fence.WithRequestID), in
// memory only.
type holdMeta struct {
	owner     string
	requestID string
	claimed   bool // a retry of its acquire returned it (see driver.UnclaimedReleaser)
}

// ownerName returns h's owner, "" if none.
func (h *hold) ownerName() string {
	if h.meta == nil {
		return ""
	}
	return h.meta.owner
}

// requestID returns h's request id, "" if none.
func (h *hold) requestID() string {
	if h.meta == nil {
		return ""
	}
	return h.meta.requestID
}

// setOwner sets h's owner ("": none) and request id ("": none) to copies of
// theirs, which may be cut from a larger string (a request body) that would
// otherwise stay in memory.
func (h *hold) setOwner(owner, requestID string) {
	h.meta = nil
	if owner != "" || requestID != "" {
		h.meta = &holdMeta{owner: strings.Clone(owner), requestID: strings.Clone(requestID)}
	}
}

// held reports whether e has a lease in the heap (live, or expired and not yet
// ended by the expiry timer).
func (e *entry) held() bool { return e.h.hidx >= 0 || e.x != nil && len(e.x.holds) > 0 }

// leases appends e's leases in the heap to buf.
func (e *entry) leases(buf []*hold) []*hold {
	if e.h.hidx >= 0 {
		buf = append(buf, &e.h)
	}
	if e.x != nil {
		buf = append(buf, e.x.holds...)
	}
	return buf
}

// find returns e's lease with id in the heap, or nil.
func (e *entry) find(id [16]byte) *hold {
	if e == nil {
		return nil
	}
	if e.h.hidx >= 0 && e.h.id == id {
		return &e.h
	}
	if e.x != nil {
		for _, h := range e.x.holds {
			if h.id == id {
				return h
			}
		}
	}
	return nil
}

// newEntry returns an entry for name without leases. It keeps a copy of name,
// which is what s.locks is keyed by too: a caller's string may be cut from a
// larger one (`fence serve` cuts names from the request line) that would
// otherwise stay in memory as long as the lease.
func newEntry(name string, last fence.Token) *entry {
	e := &entry{name: strings.Clone(name), last: last}
	e.h = hold{e: e, hidx: -1}
	return e
}

// Path returns the file the store was opened from.
func (s *Store) Path() string { return s.path }

// Close writes what is not yet written (last tokens of expired leases) to the
// file, wakes every waiter with fence.ErrClosed, stops the timers and closes the
// file. Held leases stay held in the file: a store reopened before they expire
// honours them. Later calls of any method return fence.ErrClosed; a second Close
// returns nil. It returns the error of the final write or of closing the file.
func (s *Store) Close() error {
	if !s.shut() {
		return nil
	}
	// The last commit, made here rather than by the flusher, so that a test can
	// stop the store as kill -9 would (shut alone) with no switch in the
	// product: what is dirty, and the callers still waiting for it.
	var err error
	if ferr := s.flushOnce(); ferr != nil {
		err = fmt.Errorf("bolt: close: %w", ferr)
	}
	s.life.Lock() // wait for KV operations in flight
	defer s.life.Unlock()
	// Leave the bbolt file complete on its own: fold the lease log into it.
	s.fmu.Lock()
	if cerr := s.checkpointLocked(true); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := s.wal.close(); cerr != nil && err == nil {
		err = fmt.Errorf("bolt: close %s: %w", s.wal.path, cerr)
	}
	s.fmu.Unlock()
	if cerr := s.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("bolt: close %s: %w", s.path, cerr)
	}
	return err
}

// shut marks the store closed, wakes every waiter, stops the expiry timer and
// the flusher, and returns true once the flusher has stopped, with what was
// dirty still unwritten (Close writes it). It returns false if the store was
// closed already.
func (s *Store) shut() bool {
	s.mu.Lock()
	if s.isClose {
		s.mu.Unlock()
		return false
	}
	s.isClose = true
	s.closed.Store(true)
	close(s.closing)
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.stopped
	return true
}

// shrinkLocked rebuilds the map and heap when they hold a quarter of their peak,
// because Go maps never give memory back.
func (s *Store) shrinkLocked() {
	if n := len(s.locks); n > s.peak {
		s.peak = n
	} else if s.peak > 4096 && n < s.peak/4 {
		m := make(map[string]*entry, n)
		for k, v := range s.locks {
			m[k] = v
		}
		s.locks, s.peak = m, n
	}
	if c := cap(s.heap); c > 4096 && len(s.heap) < c/4 {
		s.heap = append(make([]*hold, 0, 2*len(s.heap)), s.heap...)
	}
}
