package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"
)

// Defaults of Options fields left zero.
const (
	DefaultTimeout       = time.Second
	DefaultTokenBlock    = 1 << 16
	DefaultSyncTTL       = time.Minute
	DefaultHorizonChunk  = time.Second
	DefaultFlushInterval = 100 * time.Millisecond
	// DefaultListLimit is how many locks List returns when called with limit <= 0.
	DefaultListLimit = 1000
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
	// Clock judges lease expiry and the lease horizon; nil means fence.SystemClock.
	Clock fence.Clock
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
	// SyncTTL is the longest TTL covered by the lease horizon; leases with longer
	// TTLs are written to disk before Acquire returns. It bounds the grace period
	// after a crash (SyncTTL+HorizonChunk). 0 means DefaultSyncTTL.
	SyncTTL time.Duration
	// HorizonChunk is how far past a grant the lease horizon is pushed; 0 means
	// DefaultHorizonChunk.
	HorizonChunk time.Duration
	// FlushInterval is how often the last tokens of ended leases are written
	// behind (their memory is reclaimed then); 0 means DefaultFlushInterval.
	FlushInterval time.Duration
}

// Store is the embedded durable store: a fence.Locker, fence.Healer,
// fence.Inspector, fence.KV and fence.Guard in one bbolt file. It is safe for
// concurrent use. Close it to release the file.
type Store struct {
	db    *bbolt.DB
	path  string
	clock fence.Clock
	base  time.Time // clock reading at Open; lease times are nanoseconds since it
	wall0 int64     // base as Unix nanoseconds, to turn those into wall-clock times

	block    uint64
	syncTTL  int64
	chunk    int64
	interval time.Duration

	closed  atomic.Bool
	crashed atomic.Bool  // set by abandon (tests): stop without the final write
	life    sync.RWMutex // held shared by KV operations, exclusively by Close

	mu      sync.Mutex
	isClose bool
	closing chan struct{} // closed by Close: wakes every waiter
	locks   map[string]*entry
	peak    int // largest len(locks) since the map was last rebuilt
	heap    []*entry
	timer   fence.Timer
	timerAt int64 // when timer fires (0: none armed)

	next  uint64 // next token to hand out
	ceil  uint64 // durable token ceiling: tokens <= ceil may be handed out
	hDur  int64  // durable lease horizon, Unix nanoseconds
	hWant int64  // horizon requested from the flusher

	graceUntil int64         // no grants before this (lease time); 0: no grace
	graceDone  chan struct{} // closed when the grace period ends

	dirty   []*entry
	pending *flushGen
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
}

// entry is one lock name in memory: held, or with a last token not yet on disk,
// or with waiters. Kept small: at a million held leases it is most of the memory.
type entry struct {
	name    string
	id      [16]byte    // lease id of the holder
	token   fence.Token // holder's token
	last    fence.Token // last token issued for name (or healed to)
	expires int64       // holder's expiry, lease time
	hidx    int32       // index in the expiry heap; -1: not held
	dirty   bool        // last/lease not yet written behind
	durable bool        // lease is written to disk (TTL > SyncTTL)
	wake    chan struct{}
}

// flushGen is one run of the flusher; its done closes after its commit.
type flushGen struct {
	done chan struct{}
	err  error
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
	if o.Timeout < 0 || o.SyncTTL < 0 || o.HorizonChunk < 0 || o.FlushInterval < 0 {
		return nil, fmt.Errorf("bolt: open %s: negative duration in options: %w", path, fence.ErrInvalid)
	}
	if o.Clock == nil {
		o.Clock = fence.SystemClock
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TokenBlock == 0 {
		o.TokenBlock = DefaultTokenBlock
	}
	if o.SyncTTL == 0 {
		o.SyncTTL = DefaultSyncTTL
	}
	if o.HorizonChunk == 0 {
		o.HorizonChunk = DefaultHorizonChunk
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}

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

	s := &Store{
		db: db, path: path, clock: o.Clock,
		block: o.TokenBlock, syncTTL: int64(o.SyncTTL), chunk: int64(o.HorizonChunk),
		interval: o.FlushInterval,
		closing:  make(chan struct{}),
		locks:    make(map[string]*entry),
		pending:  &flushGen{done: make(chan struct{})},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	s.base = s.clock.Now()
	s.wall0 = s.base.UnixNano()
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
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

// load initialises a new file or reads the token ceiling, lease horizon and
// durable leases of an existing one, and starts the grace period.
func (s *Store) load() error {
	var restored []*entry
	nowWall := s.clock.Now().UnixNano()
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
				return nil
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
				s.hDur = int64(binary.BigEndian.Uint64(v))
			}
			return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
				r, err := decodeLock(v)
				if err != nil {
					return fmt.Errorf("bolt: open %s: lock %q: %w", s.path, k, err)
				}
				if r.hasLease && r.wallExp > nowWall {
					restored = append(restored, &entry{
						name: string(k), id: r.id, token: r.token, last: r.last,
						expires: r.wallExp - s.wall0, hidx: -1, durable: true,
					})
				}
				return nil
			})
		})
	})
	if err != nil {
		if !strings.HasPrefix(err.Error(), "bolt: ") {
			err = fmt.Errorf("bolt: open %s: %w", s.path, err)
		}
		return err
	}
	s.mu.Lock() // the expiry timer armed below may fire at once
	defer s.mu.Unlock()
	// Every token up to the ceiling may have been handed out before a crash.
	s.next = s.ceil + 1
	switch brokenForTest {
	case "tokens":
		s.next = 1
	case "leases":
		restored, s.hDur = nil, 0
	}
	now := s.now()
	for _, e := range restored {
		s.locks[e.name] = e
		s.heapPush(e)
	}
	s.peak = len(s.locks)
	s.armLocked(now)
	if left := s.hDur - s.wallAt(now); left > 0 {
		s.graceUntil = now + left
		s.graceDone = make(chan struct{})
		done := s.graceDone
		s.clock.AfterFunc(time.Duration(left), func() { close(done) })
	}
	return nil
}

// brokenForTest, set only by the crash test's negative control, makes Open forget
// what it must remember ("tokens": the token ceiling; "leases": the lease horizon
// and written leases), to show that the crash checker catches it.
var brokenForTest string

// now returns the lease time: nanoseconds since Open by the store's clock
// (monotonic for the system clock).
func (s *Store) now() int64 { return int64(s.clock.Now().Sub(s.base)) }

// wallAt turns a lease time into Unix nanoseconds.
func (s *Store) wallAt(t int64) int64 { return s.wall0 + t }

// Path returns the file the store was opened from.
func (s *Store) Path() string { return s.path }

// Close writes every held lease and pending last token to the file, wakes every
// waiter with fence.ErrClosed, stops the timers and closes the file. Later calls
// of any method return fence.ErrClosed; a second Close returns nil. It returns
// the error of the final write or of closing the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.isClose {
		s.mu.Unlock()
		return nil
	}
	s.isClose = true
	s.closed.Store(true)
	close(s.closing)
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()

	close(s.stop)
	<-s.stopped // the flusher's last run wrote every held lease

	s.life.Lock() // wait for KV operations in flight
	defer s.life.Unlock()
	var err error
	if s.pending != nil && s.pending.err != nil {
		err = s.pending.err
	}
	if cerr := s.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("bolt: close %s: %w", s.path, cerr)
	}
	return err
}

// abandon stops the store as kill -9 would, for tests: nothing more is written,
// the file keeps what the last commit left in it.
func (s *Store) abandon() {
	s.mu.Lock()
	s.isClose = true
	s.closed.Store(true)
	close(s.closing)
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.crashed.Store(true)
	close(s.stop)
	<-s.stopped
	s.life.Lock()
	_ = s.db.Close()
	s.life.Unlock()
}

// flusher writes dirty entries, the token ceiling and the lease horizon, every
// interval or at once when kicked; one commit serves everyone waiting (group
// commit).
func (s *Store) flusher() {
	defer close(s.stopped)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
		case <-s.stop:
			if s.crashed.Load() {
				return
			}
			err := s.flushOnce(true)
			s.mu.Lock()
			s.pending.err = err
			s.mu.Unlock()
			return
		}
		_ = s.flushOnce(false)
	}
}

// kickLocked asks the flusher to run now, without waiting.
func (s *Store) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// syncLocked returns the flush that will include everything changed so far, and
// starts it. s.mu must be held.
func (s *Store) syncLocked() *flushGen {
	s.kickLocked()
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

// flushOnce runs one flush. With final (from Close) it writes every held lease,
// so the horizon can be dropped and the store reopens without a grace period.
func (s *Store) flushOnce(final bool) error {
	s.mu.Lock()
	g := s.pending
	s.pending = &flushGen{done: make(chan struct{})}
	ents := s.dirty
	s.dirty = nil
	if final {
		ents = ents[:0]
		for _, e := range s.locks {
			ents = append(ents, e)
		}
	}
	recs := make([]lockRec, 0, len(ents))
	for _, e := range ents {
		e.dirty = false
		recs = append(recs, lockRec{name: e.name, val: s.encodeLock(e, final)})
	}
	var meta [][2][]byte
	newCeil, newH := s.ceil, s.hDur
	if s.next-1+s.block/2 > s.ceil {
		newCeil = s.next - 1 + s.block
		meta = append(meta, [2][]byte{keyCeiling, u64(newCeil)})
	}
	if final {
		newH = 0
		meta = append(meta, [2][]byte{keyHorizon, u64(0)})
	} else if s.hWant > s.hDur {
		newH = s.hWant
		meta = append(meta, [2][]byte{keyHorizon, u64(uint64(newH))})
	}
	s.mu.Unlock()

	var err error
	for i := 0; err == nil && (i < len(recs) || (i == 0 && len(meta) > 0)); i += maxTxRecords {
		part := recs[i:min(i+maxTxRecords, len(recs))]
		last := i+maxTxRecords >= len(recs)
		err = s.db.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketLocks)
			for _, r := range part {
				if err := b.Put([]byte(r.name), r.val); err != nil {
					return err
				}
			}
			if last {
				m := tx.Bucket(bucketMeta)
				for _, kv := range meta {
					if err := m.Put(kv[0], kv[1]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err != nil {
		err = fmt.Errorf("bolt: write %s: %v: %w", s.path, err, fence.ErrUnavailable)
	}

	s.mu.Lock()
	if err == nil {
		s.ceil, s.hDur = newCeil, newH
	}
	for _, e := range ents {
		switch {
		case err != nil:
			if !e.dirty {
				e.dirty = true
				s.dirty = append(s.dirty, e)
			}
		case !e.dirty && e.hidx < 0 && e.wake == nil && s.locks[e.name] == e:
			delete(s.locks, e.name) // its last token is on disk now
		}
	}
	s.shrinkLocked()
	s.mu.Unlock()
	g.err = err
	close(g.done)
	return err
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
		s.heap = append(make([]*entry, 0, 2*len(s.heap)), s.heap...)
	}
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// Lock record: flags(1) last(8) [token(8) wallExpiry(8) id(16)].
const flagLease = 1

type lockFields struct {
	last, token fence.Token
	wallExp     int64
	id          [16]byte
	hasLease    bool
}

func (s *Store) encodeLock(e *entry, allLeases bool) []byte {
	if e.hidx < 0 || !(e.durable || allLeases) {
		b := make([]byte, 9)
		binary.BigEndian.PutUint64(b[1:], uint64(e.last))
		return b
	}
	b := make([]byte, 41)
	b[0] = flagLease
	binary.BigEndian.PutUint64(b[1:], uint64(e.last))
	binary.BigEndian.PutUint64(b[9:], uint64(e.token))
	binary.BigEndian.PutUint64(b[17:], uint64(s.wallAt(e.expires)))
	copy(b[25:], e.id[:])
	return b
}

func decodeLock(v []byte) (lockFields, error) {
	var r lockFields
	switch {
	case len(v) == 9 && v[0] == 0:
	case len(v) == 41 && v[0] == flagLease:
		r.hasLease = true
		r.token = fence.Token(binary.BigEndian.Uint64(v[9:]))
		r.wallExp = int64(binary.BigEndian.Uint64(v[17:]))
		copy(r.id[:], v[25:])
	default:
		return r, fmt.Errorf("lock record of %d bytes is malformed: %w", len(v), ErrCorrupt)
	}
	r.last = fence.Token(binary.BigEndian.Uint64(v[1:]))
	return r, nil
}
