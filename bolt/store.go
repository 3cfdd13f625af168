package bolt

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	bbolt "go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"
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

	closed  atomic.Bool
	crashed atomic.Bool  // set by abandon (tests): stop without the final write
	life    sync.RWMutex // held shared by KV operations, exclusively by Close

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

	next  uint64 // next token to hand out
	ceil  uint64 // durable token ceiling: tokens <= ceil may be handed out
	steps int    // forward wall-clock steps absorbed (for tests and logs)

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
	owner   *string     // its owner (fence.WithOwner), nil if none (most leases: a pointer keeps entry within 96 bytes)
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

// ownerName returns h's owner, "" if none.
func (h *hold) ownerName() string {
	if h.owner == nil {
		return ""
	}
	return *h.owner
}

// setOwner sets h's owner ("": none) to a copy of owner, which may be cut from
// a larger string (a request body) that would otherwise stay in memory.
func (h *hold) setOwner(owner string) {
	h.owner = nil
	if owner != "" {
		o := strings.Clone(owner)
		h.owner = &o
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

// flushGen is one commit (the flusher's or a caller's, see lead); its done closes
// after it.
type flushGen struct {
	s      *Store // whose commit it is
	done   chan struct{}
	err    error
	grants int // grants waiting for this commit (for the benchmarks)
}

// wait returns once g's commit is done, with its error: nil when everything
// changed before g was taken is on disk. It starts the commit (see lead).
func (g *flushGen) wait() error {
	g.s.lead(g)
	<-g.done
	return g.err
}

// lead starts the commit of g, which must have come from syncLocked: a caller
// that finds no commit running writes g itself, on its own goroutine; otherwise
// it asks the flusher, which writes g once the running commit is done (the
// callers that arrive meanwhile share it). Handing every commit to the flusher
// cost two goroutine wakeups per operation (the flusher's, then the caller's),
// which with idle CPUs took longer than the fdatasync itself: behind fence
// serve's HTTP handler, an uncontended operation took 0.45ms with the handoff
// and 0.30ms without it (0.17ms in process either way: the wakeups stay on one
// CPU there). Under load a commit is running when most operations arrive, so
// the flusher runs most commits, as before. A checkpoint the commit makes due
// runs on the same goroutine, after g is done: the next commit would wait for
// it anyway. s.mu must not be held.
func (s *Store) lead(g *flushGen) {
	if !s.fmu.TryLock() {
		s.kickFlusher()
		return
	}
	// Let the callers the last commit woke queue their next operation first, so
	// that under load it joins this commit rather than waiting for the next one
	// (as the flusher does; when nothing else is runnable this returns at once).
	runtime.Gosched()
	s.mu.Lock()
	// After Close began, the flusher's last commit (or abandon) ends g.
	mine := s.pending == g && !s.isClose
	s.mu.Unlock()
	if mine {
		_ = s.flushLocked()
	}
	s.fmu.Unlock()
}

var (
	bucketMeta  = []byte("fence/meta")
	bucketLocks = []byte("fence/locks")
	bucketKV    = []byte("fence/kv")

	keySchema  = []byte("schema")
	keyCeiling = []byte("token_ceiling")
	keyHorizon = []byte("lease_horizon")
)

// Open opens (creating it if missing) the fence store in the file at path.
//
// It returns an error matching ErrNotStore if the file is not a fence store,
// ErrCorrupt if it is damaged, fence.ErrUnavailable if another process holds the
// file for longer than Options.Timeout, and fence.ErrInvalid for an empty path or
// negative options. In each of those cases the file is left untouched.
func Open(path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if path == "" {
		return nil, fmt.Errorf("bolt: open: %w", &fence.InvalidError{Field: "path", Reason: "is empty"})
	}
	if o.Timeout < 0 || o.FlushInterval < 0 {
		return nil, fmt.Errorf("bolt: open %s: negative duration in options: %w", path, fence.ErrInvalid)
	}
	o.Clock = cmp.Or(o.Clock, driver.SystemClock)
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	o.TokenBlock = cmp.Or(o.TokenBlock, DefaultTokenBlock)
	o.FlushInterval = cmp.Or(o.FlushInterval, DefaultFlushInterval)

	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("bolt: open %s: is a directory: %w", path, fence.ErrInvalid)
	case err == nil && fi.Size() > 0:
		// Look before writing: a read-only open writes nothing, so a foreign or
		// damaged file is refused exactly as it was.
		if err := check(path, o.Timeout); err != nil {
			return nil, err
		}
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}

	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: o.Timeout, NoSync: o.NoSync})
	if err != nil {
		return nil, openError(path, o.Timeout, err)
	}
	db.MaxBatchDelay = time.Millisecond
	w, err := openWAL(path, o.NoSync)
	if err != nil {
		_ = db.Close()
		return nil, err
	}

	s := &Store{
		db: db, path: path, clock: o.Clock, wall: o.Wall, wal: w,
		block: o.TokenBlock, interval: o.FlushInterval, externalLocks: o.ExternalLocks,
		closing: make(chan struct{}),
		locks:   make(map[string]*entry),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	s.pending = &flushGen{s: s, done: make(chan struct{})}
	s.engine = driver.Engine{Backend: "bolt", Locker: s, Clock: s.clock, Closed: s.closing, Features: s.Features()}
	// The frame's wall reading is taken after base and the one that restores
	// leases before it, so that rounding errs toward longer leases both ways.
	wallBefore := s.wallNow(s.clock.Now())
	s.base = s.clock.Now()
	s.wall0 = s.wallNow(s.base)
	if s.wall == nil {
		wallBefore = s.wall0 // one reading: exact
	}
	if err := s.load(wallBefore); err != nil {
		_ = w.close()
		_ = db.Close()
		return nil, err
	}
	dropMapped(db) // load read every lock record
	go s.flusher()
	return s, nil
}

// check opens path read-only and verifies it is a fence store of this version.
func check(path string, timeout time.Duration) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return openError(path, timeout, err)
	}
	defer db.Close()
	return guarded(path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			if err := checkPages(path, db.Info().PageSize, uint64(tx.ID()), uint64(tx.Cursor().Bucket().RootPage()), tx.Size()); err != nil {
				return err
			}
			if err := checkSchema(path, tx); err != nil {
				return err
			}
			// Walk every page once (O(file size)), so a damaged page is found here,
			// as an error, and not later by a panic in the middle of a request.
			var first error
			n := 0
			for err := range tx.Check() {
				if first == nil {
					first = err
				}
				n++
			}
			if first != nil {
				return fmt.Errorf("bolt: open %s: consistency check found %d problems, first: %v: %w", path, n, first, ErrCorrupt)
			}
			return nil
		})
	})
}

// checkSchema returns nil for a fence store of this version and for a bbolt file
// without any bucket (a new file), an error otherwise.
func checkSchema(path string, tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		var names []string
		_ = tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			if len(names) < 3 {
				names = append(names, fmt.Sprintf("%q", name))
			}
			return nil
		})
		if len(names) > 0 {
			return fmt.Errorf("bolt: open %s: a bbolt database of another program (buckets %v, no %q): %w", path, names, bucketMeta, ErrNotStore)
		}
		return nil
	}
	if v := meta.Get(keySchema); string(v) != SchemaVersion {
		return fmt.Errorf("bolt: open %s: schema version %q, this build reads %q: %w", path, v, SchemaVersion, ErrNotStore)
	}
	if tx.Bucket(bucketLocks) == nil || tx.Bucket(bucketKV) == nil {
		return fmt.Errorf("bolt: open %s: fence buckets missing: %w", path, ErrCorrupt)
	}
	return nil
}

// guarded runs f, turning a panic of bbolt on a damaged page into ErrCorrupt.
func guarded(path string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bolt: open %s: %v: %w", path, r, ErrCorrupt)
		}
	}()
	return f()
}

func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bberrors.ErrTimeout):
		return fmt.Errorf("bolt: open %s: file is locked by another process (waited %v): %w", path, timeout, fence.ErrUnavailable)
	case errors.Is(err, bberrors.ErrInvalid), errors.Is(err, bberrors.ErrVersionMismatch):
		return fmt.Errorf("bolt: open %s: not a bbolt database (%v): %w", path, err, ErrNotStore)
	case errors.Is(err, bberrors.ErrChecksum):
		return fmt.Errorf("bolt: open %s: %v: %w", path, err, ErrCorrupt)
	}
	return fmt.Errorf("bolt: open %s: %w (%w)", path, err, ErrNotStore)
}

// load initialises a new file or reads the token ceiling and the written leases
// of an existing one. A lease whose written expiry is still ahead of nowWall
// (the wall clock at Open) is restored, held by the same lease id and token until
// that expiry.
func (s *Store) load(nowWall int64) error {
	var restored, floors []*entry
	var horizon int64 // lease horizon of a file written by an older version
	if s.wal.f == nil {
		if err := s.createLog(); err != nil {
			return err
		}
	}
	err := guarded(s.path, func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			if err := checkSchema(s.path, tx); err != nil {
				return err
			}
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				for _, b := range [][]byte{bucketMeta, bucketLocks, bucketKV} {
					if _, err := tx.CreateBucket(b); err != nil {
						return fmt.Errorf("bolt: open %s: create bucket %q: %w", s.path, b, err)
					}
				}
				if err := tx.Bucket(bucketMeta).Put(keySchema, []byte(SchemaVersion)); err != nil {
					return fmt.Errorf("bolt: open %s: write schema: %w", s.path, err)
				}
				return s.replayLocked(tx)
			}
			if v := meta.Get(keyCeiling); v != nil {
				if len(v) != 8 {
					return fmt.Errorf("bolt: open %s: token ceiling is %d bytes: %w", s.path, len(v), ErrCorrupt)
				}
				s.ceil = binary.BigEndian.Uint64(v)
			}
			if v := meta.Get(keyHorizon); v != nil {
				if len(v) != 8 {
					return fmt.Errorf("bolt: open %s: lease horizon is %d bytes: %w", s.path, len(v), ErrCorrupt)
				}
				horizon = int64(binary.BigEndian.Uint64(v))
			}
			if err := s.replayLocked(tx); err != nil {
				return err
			}
			return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
				r, err := decodeNamed(k, v)
				if err != nil {
					return fmt.Errorf("bolt: open %s: lock %q: %w", s.path, k, err)
				}
				if e := restore(string(k), r, nowWall); e != nil {
					restored = append(restored, e)
				} else if uint64(r.last) > s.ceil && brokenForTest != "floors" {
					// Healed above the shared counter (see Heal): the name's
					// floor, which its next grant must pass.
					floors = append(floors, newEntry(string(k), r.last))
				}
				return nil
			})
		})
	})
	if err != nil {
		var pe *fs.PathError
		switch {
		case strings.HasPrefix(err.Error(), "bolt: "):
		case errors.As(err, &pe): // the commit's write or sync: a full disk, say
			err = fmt.Errorf("bolt: open: %w", writeError(s.path, err))
		default:
			err = fmt.Errorf("bolt: open %s: %w", s.path, err)
		}
		return err
	}
	// The log's records are in the bbolt file now, under a new generation:
	// start the log afresh with it.
	if err := s.wal.reset(s.wal.gen); err != nil {
		return fmt.Errorf("bolt: open: %w", writeError(s.wal.path, err))
	}
	clear(s.wal.names)
	s.mu.Lock() // the expiry timer armed below may fire at once
	defer s.mu.Unlock()
	// Every token up to the ceiling may have been handed out before a crash.
	s.next = s.ceil + 1
	switch brokenForTest {
	case "tokens":
		s.next = 1
	case "leases":
		restored = nil
	}
	now := s.now()
	for _, e := range restored {
		s.locks[e.name] = e
		s.held++
		s.heapPush(&e.h)
		if e.x != nil {
			for _, h := range e.x.holds {
				s.heapPush(h)
			}
		}
	}
	for _, e := range floors {
		s.locks[e.name] = e
	}
	s.peak = len(s.locks)
	s.armLocked(now)
	// Earlier releases kept short leases in memory only, covered by a horizon
	// written ahead: after a crash of such a version, wait for it once.
	if brokenForTest == "grace" { // the old behaviour: refuse every grant for a while
		horizon = max(horizon, nowWall+int64(300*time.Millisecond))
	}
	if left := horizon - nowWall; left > 0 {
		s.graceUntil = now + left
		s.graceDone = make(chan struct{})
		done := s.graceDone
		s.clock.AfterFunc(time.Duration(left), func() { close(done) })
	}
	return nil
}

// restore returns the entry of name's record r with the leases whose written
// expiry is ahead of nowWall, held by the same lease ids, tokens, owners and
// slots until then (their hidx still -1: not yet in the heap), or nil if none is.
func restore(name string, r lockFields, nowWall int64) *entry {
	e := newEntry(name, r.last)
	e.limit, e.shared = int16(r.limit), r.shared
	for _, f := range r.holds {
		if f.wallExp <= nowWall {
			continue
		}
		if brokenForTest == "owners" {
			f.owner = ""
		}
		h := &e.h
		if e.h.token != 0 {
			h = &hold{e: e}
			if e.x == nil {
				e.x = &extra{}
			}
			e.x.holds = append(e.x.holds, h)
		}
		h.id, h.token, h.slot = f.id, f.token, int32(f.slot)
		h.setOwner(f.owner)
		h.expires, h.hidx = f.wallExp-nowWall, -1
	}
	if e.h.token == 0 {
		return nil
	}
	return e
}

// createLog creates the lease log at Open if it is missing, which is fine for a
// new file, a file of an earlier release and one left by a clean Close (its log
// was folded into it); for any other the log's records are lost: refused, before
// anything is written.
func (s *Store) createLog() error {
	var folded, clean bool
	err := guarded(s.path, func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				folded = meta.Get(keyWALGen) != nil
				clean = meta.Get(keyWALClean) != nil
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if folded && !clean {
		return fmt.Errorf("bolt: open %s: the lease log %s is missing: %w", s.path, s.wal.path, ErrCorrupt)
	}
	if err := s.wal.create(); err != nil {
		return fmt.Errorf("bolt: open %s: %w", s.wal.path, err)
	}
	return nil
}

// replayLocked folds the lease log read at Open into the bbolt file in tx, if
// the file has not folded it already, and sets the generation the log restarts
// with (written in tx; s.wal.gen then holds it, for the reset after the commit).
func (s *Store) replayLocked(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	var folded uint64 // generation of the last fold (0: never)
	if v := meta.Get(keyWALGen); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("bolt: open %s: lease log generation is %d bytes: %w", s.path, len(v), ErrCorrupt)
		}
		folded = binary.BigEndian.Uint64(v)
	}
	if meta.Get(keyWALClean) != nil {
		if err := meta.Delete(keyWALClean); err != nil {
			return err
		}
	}
	w := s.wal
	switch {
	case w.gen > folded && w.size > 0:
		return fmt.Errorf("bolt: open %s: lease log generation %d is ahead of the file's %d: %w", s.path, w.gen, folded, ErrCorrupt)
	case w.gen == folded && w.size > 0 && brokenForTest != "log":
		b := tx.Bucket(bucketLocks)
		for k, v := range w.names {
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		if v := meta.Get(keyCeiling); w.ceil > 0 && (len(v) != 8 || binary.BigEndian.Uint64(v) < w.ceil) {
			if err := meta.Put(keyCeiling, u64(w.ceil)); err != nil {
				return err
			}
			s.ceil = w.ceil
		}
	}
	w.gen = max(w.gen, folded) + 1
	return meta.Put(keyWALGen, u64(w.gen))
}

// brokenForTest, set only by the crash test's negative control, makes the store
// forget what it must remember ("tokens": the token ceiling; "leases": the
// written leases; "log": the lease log, not replayed; "steps": forward steps of
// the wall clock; "grace": that names
// were free, refusing every grant for 300ms as a lease horizon did; "owners":
// the owners of the leases it restores; "floors": the tokens of names healed
// above the shared counter), to show
// that the crash checker catches it.
var brokenForTest string

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
	if skew <= stepTolerance || brokenForTest == "steps" {
		return t
	}
	s.wall0 += skew
	s.steps++
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

// Path returns the file the store was opened from.
func (s *Store) Path() string { return s.path }

// Close writes what is not yet written (last tokens of expired leases) to the
// file, wakes every waiter with fence.ErrClosed, stops the timers and closes the
// file. Held leases stay held in the file: a store reopened before they expire
// honours them. Later calls of any method return fence.ErrClosed; a second Close
// returns nil. It returns the error of the final write or of closing the file.
func (s *Store) Close() error {
	if !s.shut(false) { // the flusher's last run wrote what was dirty
		return nil
	}
	s.life.Lock() // wait for KV operations in flight
	defer s.life.Unlock()
	var err error
	if s.pending != nil && s.pending.err != nil {
		err = fmt.Errorf("bolt: close: %w", s.pending.err)
	}
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

// abandon stops the store as kill -9 would, for tests: nothing more is written,
// the file keeps what the last commit left in it.
func (s *Store) abandon() {
	if !s.shut(true) {
		return
	}
	s.mu.Lock()
	s.pending.err = fence.ErrClosed // nothing more is written: fail those waiting
	close(s.pending.done)
	s.mu.Unlock()
	s.life.Lock()
	s.fmu.Lock() // a caller's commit may be running (see lead)
	_ = s.wal.close()
	_ = s.db.Close()
	s.fmu.Unlock()
	s.life.Unlock()
}

// shut marks the store closed, wakes every waiter, stops the expiry timer and
// the flusher, and returns true once the flusher has stopped; crashed stops it
// before its last write. It returns false if the store was closed already.
func (s *Store) shut(crashed bool) bool {
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
	s.crashed.Store(crashed)
	close(s.stop)
	<-s.stopped
	return true
}

// flusher writes dirty entries and the token ceiling when kicked, and checks the
// wall clock for a step every interval; one commit serves everyone waiting
// (group commit): operations that arrive while a commit runs share the next.
func (s *Store) flusher() {
	defer close(s.stopped)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
			s.mu.Lock()
			s.readLocked(s.clock.Now())
			s.mu.Unlock()
		case <-s.stop:
			if s.crashed.Load() {
				return
			}
			err := s.flushOnce()
			s.mu.Lock()
			s.pending.err = err
			s.mu.Unlock()
			return
		}
		// Let the callers the last commit woke queue their next operation, so
		// that it joins this commit rather than waiting for the one after.
		runtime.Gosched()
		_ = s.flushOnce()
	}
}

// kickFlusher asks the flusher to run now, without waiting. s.mu need not be
// held.
func (s *Store) kickFlusher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// syncLocked returns the flush that will include everything changed so far;
// the caller's wait, after it unlocks s.mu, starts it. s.mu must be held.
func (s *Store) syncLocked() *flushGen {
	return s.pending
}

// lockRec is a record of the locks bucket.
type lockRec struct {
	name string
	val  []byte
}

// maxTxRecords bounds one commit, so a million dirty entries do not make one
// huge transaction.
const maxTxRecords = 20000

// flushOnce runs one flush: it writes every dirty entry as it is now (the
// latest state of each name, however many operations changed it) and, when
// needed, a higher token ceiling, then closes the generation it took over.
func (s *Store) flushOnce() error {
	// One flush at a time, so that an older snapshot of an entry is never
	// committed after a newer one.
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flushLocked()
}

// flushLocked is flushOnce with s.fmu held: the flusher's, or a caller's (see
// lead).
func (s *Store) flushLocked() error {
	s.mu.Lock()
	g := s.pending
	s.pending = &flushGen{s: s, done: make(chan struct{})}
	ents := s.dirty
	s.dirty = nil
	recs := make([]lockRec, 0, len(ents))
	for _, e := range ents {
		e.dirty = false
		recs = append(recs, lockRec{name: e.name, val: s.encodeLock(e)})
	}
	newCeil, ceilRec := s.ceil, uint64(0)
	if s.next-1+s.block/2 > s.ceil {
		newCeil = s.next - 1 + s.block
		ceilRec = newCeil
	}
	s.mu.Unlock()

	// One write and one fdatasync of the lease log; the bbolt file gets the
	// records at the next checkpoint.
	var err error
	var logged int64
	if len(recs) > 0 || ceilRec != 0 {
		logged, err = s.wal.append(recs, ceilRec)
	}
	if err != nil {
		// No "bolt:": the operations that waited for this flush add it.
		err = writeError(s.wal.path, err)
	}

	s.mu.Lock()
	if err == nil {
		s.ceil = newCeil
		for _, r := range recs {
			s.wal.names[r.name] = r.val
		}
	}
	if len(recs) > 0 {
		s.statCommits++
		s.statGrants += int64(g.grants)
	}
	for _, e := range ents {
		switch {
		case err != nil:
			if !e.dirty {
				e.dirty = true
				s.dirty = append(s.dirty, e)
			}
		case !e.dirty && !e.held() && (e.x == nil || e.x.wake == nil) && s.locks[e.name] == e && uint64(e.last) < s.next:
			// Its last token is on disk now, and below the shared counter: a
			// grant needs it no more. A name healed above the counter keeps its
			// entry, its floor (see grantLocked).
			delete(s.locks, e.name)
		}
	}
	s.shrinkLocked()
	s.mu.Unlock()
	g.err = err
	close(g.done)
	if err == nil && logged > s.wal.limit() {
		_ = s.checkpointLocked(false) // on failure the log keeps growing; retried next flush
	}
	return err
}

// checkpointLocked folds the lease log into the bbolt file and starts the log
// afresh. s.fmu must be held (it keeps the flusher out, the log's only writer).
func (s *Store) checkpointLocked(clean bool) error {
	w := s.wal
	if w.off <= walHeaderLen && len(w.names) == 0 && w.ceil == 0 && !clean {
		return nil
	}
	gen := w.gen + 1
	if err := w.fold(s.db, w.names, w.ceil, gen, clean); err != nil {
		return fmt.Errorf("bolt: checkpoint: %w", writeError(s.path, err))
	}
	if err := w.reset(gen); err != nil {
		w.resetTo = gen // the next append retries it first
		return fmt.Errorf("bolt: checkpoint: %w", writeError(w.path, err))
	}
	s.mu.Lock()
	w.names = make(map[string][]byte)
	s.mu.Unlock()
	dropMapped(s.db)
	return nil
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

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// Lock record of a lock: flags(1) last(8) [token(8) wallExpiry(8) id(16)
// [ownerLen(2) owner]]. flagOwner is set only on a lease with an owner, so a
// record without one is byte for byte what earlier releases wrote and read.
//
// Lock record of a semaphore or a shared lock with live leases (flagMulti, and
// flagShared for shared ones): flags(1) last(8) limit(2) count(2), then count
// leases of token(8) wallExpiry(8) id(16) slot(2) ownerLen(2) owner. Earlier
// releases refuse it as malformed (ErrCorrupt) without writing anything. A
// name whose leases all ended is written as a lock record without lease.
const (
	flagLease  = 1
	flagOwner  = 2
	flagMulti  = 4
	flagShared = 8
)

// Lengths of the lock records: without a lease, with one, and the owner's
// length prefix after a lease; the head of a multi-lease record and each of
// its leases before the owner.
const (
	lockRecFree  = 9
	lockRecLease = 41
	lockRecOwner = 2
	lockRecMulti = 13
	lockRecHold  = 36
)

// holdFields is one lease of a lock record.
type holdFields struct {
	token   fence.Token
	wallExp int64
	id      [16]byte
	owner   string
	slot    int
}

// lockFields is a decoded lock record: the last token and the leases (none,
// one of a lock, or those of a semaphore of limit or of a shared lock).
type lockFields struct {
	last   fence.Token
	limit  int
	shared bool
	holds  []holdFields
}

func (s *Store) encodeLock(e *entry) []byte {
	if !e.held() {
		b := make([]byte, lockRecFree)
		binary.BigEndian.PutUint64(b[1:], uint64(e.last))
		return b
	}
	if e.limit == 0 && !e.shared {
		h := &e.h
		owner := h.ownerName()
		n := lockRecLease
		if owner != "" {
			n += lockRecOwner + len(owner)
		}
		b := make([]byte, lockRecLease, n)
		b[0] = flagLease
		binary.BigEndian.PutUint64(b[1:], uint64(e.last))
		binary.BigEndian.PutUint64(b[9:], uint64(h.token))
		binary.BigEndian.PutUint64(b[17:], uint64(s.wallAt(h.expires)))
		copy(b[25:], h.id[:])
		if owner != "" {
			b[0] |= flagOwner
			b = binary.BigEndian.AppendUint16(b, uint16(len(owner)))
			b = append(b, owner...)
		}
		return b
	}
	var buf [8]*hold
	hs := e.leases(buf[:0])
	n := lockRecMulti
	for _, h := range hs {
		n += lockRecHold + len(h.ownerName())
	}
	b := make([]byte, 1, n)
	b[0] = flagMulti
	if e.shared {
		b[0] |= flagShared
	}
	b = binary.BigEndian.AppendUint64(b, uint64(e.last))
	b = binary.BigEndian.AppendUint16(b, uint16(e.limit))
	b = binary.BigEndian.AppendUint16(b, uint16(len(hs)))
	for _, h := range hs {
		owner := h.ownerName()
		b = binary.BigEndian.AppendUint64(b, uint64(h.token))
		b = binary.BigEndian.AppendUint64(b, uint64(s.wallAt(h.expires)))
		b = append(b, h.id[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(h.slot))
		b = binary.BigEndian.AppendUint16(b, uint16(len(owner)))
		b = append(b, owner...)
	}
	return b
}

// decodeLock decodes a lock record (of the bucket or of the lease log); a lease
// record without flagOwner, as earlier releases wrote, has owner "". It returns
// an error matching ErrCorrupt, saying what is wrong, for a malformed record.
func decodeLock(v []byte) (lockFields, error) {
	var r lockFields
	bad := func(why string) (lockFields, error) {
		return lockFields{}, fmt.Errorf("lock record of %d bytes is malformed: %s: %w", len(v), why, ErrCorrupt)
	}
	if len(v) == 0 {
		return bad("empty")
	}
	if v[0]&flagMulti != 0 {
		return decodeMulti(v, bad)
	}
	var h holdFields
	switch {
	case len(v) == lockRecFree && v[0] == 0:
	case len(v) == lockRecLease && v[0] == flagLease:
	case len(v) >= lockRecLease+lockRecOwner && v[0] == flagLease|flagOwner:
		n := int(binary.BigEndian.Uint16(v[lockRecLease:]))
		h.owner = string(v[lockRecLease+lockRecOwner:])
		if n == 0 || len(h.owner) != n || driver.ValidateOwner(h.owner) != nil {
			return bad("bad owner")
		}
	default:
		return bad(fmt.Sprintf("flags %#x", v[0]))
	}
	r.last = fence.Token(binary.BigEndian.Uint64(v[1:]))
	if v[0]&flagLease != 0 {
		h.token = fence.Token(binary.BigEndian.Uint64(v[9:]))
		h.wallExp = int64(binary.BigEndian.Uint64(v[17:]))
		copy(h.id[:], v[25:])
		r.holds = []holdFields{h}
	}
	return r, nil
}

// decodeNamed decodes the lock record v of the locks bucket's key k: an error
// matching ErrCorrupt if v is malformed or k is not a lock name (a damaged key).
func decodeNamed(k, v []byte) (lockFields, error) {
	if err := driver.ValidateName(string(k)); err != nil {
		return lockFields{}, fmt.Errorf("the key is not a lock name: %v: %w", err, ErrCorrupt)
	}
	return decodeLock(v)
}

// decodeMulti decodes a lock record with flagMulti; bad makes its error.
func decodeMulti(v []byte, bad func(string) (lockFields, error)) (lockFields, error) {
	if len(v) < lockRecMulti || v[0]&^(flagMulti|flagShared) != 0 {
		return bad(fmt.Sprintf("flags %#x", v[0]))
	}
	r := lockFields{
		last:   fence.Token(binary.BigEndian.Uint64(v[1:])),
		limit:  int(binary.BigEndian.Uint16(v[9:])),
		shared: v[0]&flagShared != 0,
	}
	count := int(binary.BigEndian.Uint16(v[11:]))
	switch {
	case r.shared && r.limit != 0:
		return bad(fmt.Sprintf("shared with limit %d", r.limit))
	case !r.shared && (r.limit < 2 || r.limit > fence.MaxLimit):
		return bad(fmt.Sprintf("limit %d", r.limit))
	case count == 0 || count > fence.MaxLimit || !r.shared && count > r.limit:
		return bad(fmt.Sprintf("%d leases", count))
	}
	used := make(map[int]bool, count)
	p := v[lockRecMulti:]
	for i := range count {
		if len(p) < lockRecHold {
			return bad(fmt.Sprintf("lease %d cut short", i))
		}
		h := holdFields{
			token:   fence.Token(binary.BigEndian.Uint64(p)),
			wallExp: int64(binary.BigEndian.Uint64(p[8:])),
			slot:    int(binary.BigEndian.Uint16(p[32:])),
		}
		copy(h.id[:], p[16:32])
		n := int(binary.BigEndian.Uint16(p[34:]))
		if len(p) < lockRecHold+n {
			return bad(fmt.Sprintf("owner of lease %d cut short", i))
		}
		h.owner = string(p[lockRecHold : lockRecHold+n])
		p = p[lockRecHold+n:]
		switch {
		case h.token == 0 || h.token > r.last:
			return bad(fmt.Sprintf("lease %d has token %d, last token %d", i, h.token, r.last))
		case r.shared && h.slot != 0, !r.shared && (h.slot >= r.limit || used[h.slot]):
			return bad(fmt.Sprintf("lease %d has slot %d", i, h.slot))
		case n > 0 && driver.ValidateOwner(h.owner) != nil:
			return bad(fmt.Sprintf("lease %d has a bad owner", i))
		}
		used[h.slot] = true
		r.holds = append(r.holds, h)
	}
	if len(p) != 0 {
		return bad(fmt.Sprintf("%d bytes after the last lease", len(p)))
	}
	return r, nil
}
