package bolt

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	bbolt "go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"
)

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
func Open(path string, opts *Options) (*Store, error) { return open(path, opts, nil) }

// recovered is what Open read back from the file and its lease log, before the
// store takes it in.
type recovered struct {
	nowWall  int64    // the wall clock at Open, Unix nanoseconds
	next     uint64   // the next token to hand out: above every one a crash may have handed out
	restored []*entry // the names with a lease live by its written expiry (not yet in the heap)
	floors   []*entry // the names healed above the shared counter, without a live lease
	horizon  int64    // the lease horizon of a file of an older version, wall time (0: none)
}

// open is Open. forget, nil in the product and checked only here, is how the
// negative controls of the crash tests (export_test.go) make a store forget
// what it read back (its token ceiling, leases, owners, floors), to show that
// their checkers catch such a store. A hook on what was read, rather than
// switches inside load, restore and replay, leaves the product no branch that
// only a test takes but this one, and keeps the faults in the test files.
func open(path string, opts *Options, forget func(*recovered)) (*Store, error) {
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
	if err := s.load(wallBefore, forget); err != nil {
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
// that expiry. forget, if not nil, may change what was read (see open).
func (s *Store) load(nowWall int64, forget func(*recovered)) error {
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
				} else if uint64(r.last) > s.ceil {
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
	// Every token up to the ceiling may have been handed out before a crash.
	r := recovered{nowWall: nowWall, next: s.ceil + 1, restored: restored, floors: floors, horizon: horizon}
	if forget != nil {
		forget(&r)
	}
	s.mu.Lock() // the expiry timer armed below may fire at once
	defer s.mu.Unlock()
	s.next = r.next
	now := s.now()
	for _, e := range r.restored {
		s.locks[e.name] = e
		s.held++
		s.heapPush(&e.h)
		if e.x != nil {
			for _, h := range e.x.holds {
				s.heapPush(h)
			}
		}
	}
	for _, e := range r.floors {
		s.locks[e.name] = e
	}
	s.peak = len(s.locks)
	s.armLocked(now)
	// Earlier releases kept short leases in memory only, covered by a horizon
	// written ahead: after a crash of such a version, wait for it once.
	if left := r.horizon - nowWall; left > 0 {
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
		h := &e.h
		if e.h.token != 0 {
			h = &hold{e: e}
			if e.x == nil {
				e.x = &extra{}
			}
			e.x.holds = append(e.x.holds, h)
		}
		h.id, h.token, h.slot = f.id, f.token, int32(f.slot)
		h.setOwner(f.owner, "") // request ids live in memory only
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
	case w.gen == folded && w.size > 0:
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
