package bolt

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	bbolt "go.etcd.io/bbolt"
)

// Acquire grants a lease on name for ttl, with a token greater than every token
// the store handed out before for name, across restarts and crashes (and than
// every token of other names too, but for those of a name healed above the
// shared counter: see Heal). By
// default it tries once; with fence.WithWait it waits, woken at once by a Release
// and by the holder's expiry, for at most the wait (by the store's clock) and
// until ctx is done. The grant is on disk when Acquire returns (group commit), so
// a restart, after a crash too, honours it until its expiry.
//
// With fence.WithLimit(n) it grants one of n permits, with the lowest free
// slot; with fence.WithShared a shared lease (see Features). driver.Decide
// decides every grant, exclusive ones too, over the name's live leases; a
// waiting exclusive acquire holds off new shared ones (writer preference).
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the
// lock stayed held, also matching ctx.Err() when ctx ended the wait;
// fence.ErrInvalid for a bad name, TTL or limit, and a *fence.LimitError (also
// fence.ErrInvalid) for a limit other than the live leases'; fence.ErrTokenExhausted when the
// counter reached fence.MaxToken; fence.ErrUnavailable when the file could not be
// written; fence.ErrClosed after Close. The errors are worded as driver.Engine
// words them.
func (s *Store) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return s.engine.Acquire(ctx, name, ttl, opts, s.try)
}

// Features returns the kinds of grant the store makes beyond locks: semaphores
// (fence.WithLimit) and shared locks (fence.WithShared), both native, durable
// and decided by driver.Decide as locks are (see the package doc); and that it
// keeps request ids (fence.WithRequestID), in memory only: after a restart, a
// retry of a grant made before it finds the name held (or grants anew once that
// lease ended), as without a request id.
func (s *Store) Features() fence.Features {
	return fence.Features{Semaphores: true, Shared: true, RequestIDs: true}
}

// Grant is Acquire without the *fence.Lease (see driver.Granter): the token, lease
// id and start of the grant, with Acquire's errors. `fence serve` grants through it,
// so a lease held by a remote client costs the server no timer.
func (s *Store) Grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	return s.engine.Grant(ctx, name, ttl, opts, s.try)
}

// try grants r.Name under r.ID if it is free and returns once the grant is on
// disk (group commit); it also waits for the flusher when the token ceiling must
// be raised first. If the lock is held it reports the holder's time left and the
// channel that closes when the lock may be free (its release or expiry, or the
// end of the grace period after a crash).
func (s *Store) try(ctx context.Context, r *driver.Request) (driver.Result, error) {
	id, ok := parseLeaseID(r.ID)
	if !ok {
		return driver.Result{}, fmt.Errorf("lease id %q: %w", r.ID, fence.ErrInvalid)
	}
	if res, found, err := s.retried(ctx, r); found || err != nil {
		return res, err
	}
	for {
		// The grant is timed from start, taken before the request: the holder's
		// deadline (start+ttl) is then exactly the store's expiry, never later.
		start := s.clock.Now()
		s.mu.Lock()
		res, g, err := s.grantLocked(r, id, s.readLocked(start))
		s.mu.Unlock()
		if g == nil {
			return res, err
		}
		err = g.wait()
		switch {
		case err != nil && res.Token == 0:
			return driver.Result{}, fmt.Errorf("reserve tokens: %w", err)
		case err != nil:
			s.mu.Lock()
			if h := s.locks[r.Name].find(id); h != nil {
				s.endLeaseLocked(h)
			}
			s.mu.Unlock()
			return driver.Result{}, fmt.Errorf("write lease: %w", err)
		case res.Token != 0:
			res.Start = start
			return res, nil
		}
		// The ceiling is raised: try again, timed afresh.
	}
}

// grantLocked does one attempt at lease time now, granting under id. It returns
// the grant (Token set) with the flush to wait for before handing it out; no
// grant with a flush to wait for before trying again (the token ceiling is being
// raised); or how the lock is held, without a flush. driver.Decide decides over
// the name's live leases, after the expired ones are ended.
func (s *Store) grantLocked(r *driver.Request, id [16]byte, now int64) (driver.Result, *flushGen, error) {
	if s.isClose {
		return driver.Result{}, nil, fence.ErrClosed
	}
	if now < s.graceUntil {
		return driver.Result{ExpiresIn: time.Duration(s.graceUntil - now), Wake: s.graceDone}, nil, nil
	}
	e := s.locks[r.Name]
	var d driver.Decision
	if e != nil {
		var hbuf [8]*hold
		var buf [8]driver.Holding
		live := buf[:0]
		for _, h := range e.leases(hbuf[:0]) {
			if h.expires <= now {
				s.endLeaseLocked(h)
				continue
			}
			live = append(live, s.holding(e, h))
		}
		var waiter time.Time
		if e.x != nil && e.x.waiterUntil != 0 {
			waiter = s.at(e.x.waiterUntil)
		}
		var err error
		if d, err = driver.Decide(r, live, s.at(now), waiter); err != nil {
			return driver.Result{}, nil, err
		}
		if !d.Grant {
			if d.MarkWaiter {
				if e.x == nil {
					e.x = &extra{}
				}
				e.x.waiterUntil = now + int64(driver.WaiterFor(r))
			}
			res := driver.Result{ExpiresIn: d.ExpiresIn, Retry: d.Retry}
			if r.Waiting {
				if e.x == nil {
					e.x = &extra{}
				}
				if e.x.wake == nil {
					e.x.wake = make(chan struct{})
				}
				res.Wake = e.x.wake
			}
			return res, nil, nil
		}
	}
	// The token is the shared counter's next, or, on a name healed above it,
	// the name's own next (its floor): such a grant leaves the shared counter,
	// and so every other name, where it is. It needs no ceiling: the name's
	// record, written before the grant is handed out, carries it (e.last).
	t, floor := s.next, false
	if e != nil && uint64(e.last) >= t {
		t, floor = uint64(e.last)+1, true
	}
	if t > uint64(fence.MaxToken) {
		return driver.Result{}, nil, fmt.Errorf("counter at %d: %w", t-1, fence.ErrTokenExhausted)
	}
	if !floor {
		if t > s.ceil {
			return driver.Result{}, s.syncLocked(), nil
		}
		s.next++
	}
	if e == nil {
		e = newEntry(r.Name, 0)
		s.locks[e.name] = e
	}
	if !e.held() {
		s.held++
	}
	h := &e.h
	if h.hidx >= 0 {
		h = &hold{e: e}
		if e.x == nil {
			e.x = &extra{}
		}
		e.x.holds = append(e.x.holds, h)
	}
	h.id, h.token, h.expires = id, fence.Token(t), now+int64(r.TTL)
	h.setOwner(r.Options.Owner, r.Options.RequestID)
	h.slot = int32(d.Slot)
	e.last, e.limit, e.shared = h.token, int16(r.Options.Limit), r.Options.Shared
	if e.x != nil && r.Options.Limit == 0 && !r.Options.Shared {
		e.x.waiterUntil = 0 // the exclusive waiter is served
	}
	s.heapPush(h)
	s.armLocked(now)
	s.watchers.Notify(r.Name)
	// The lease is held in memory at once (others see it held), and handed out
	// once it is on disk, so that after a crash it is restored. The flush also
	// raises the token ceiling when the counter nears it.
	s.markDirtyLocked(e)
	g := s.syncLocked()
	g.grants++
	return driver.Result{Token: h.token, Slot: d.Slot}, g, nil
}

// at returns the store's clock reading of lease time t.
func (s *Store) at(t int64) time.Time { return s.base.Add(time.Duration(t)) }

// holding returns h, a lease of e, as driver.Decide and driver.Info take it.
func (s *Store) holding(e *entry, h *hold) driver.Holding {
	return driver.Holding{
		Token: h.token, Owner: h.ownerName(), Slot: int(h.slot), Limit: int(e.limit), Shared: e.shared,
		Expires: s.at(h.expires),
	}
}

func (s *Store) markDirtyLocked(e *entry) {
	if !e.dirty {
		e.dirty = true
		s.dirty = append(s.dirty, e)
	}
}

// endLeaseLocked ends lease h (release, revoke, expiry, or a grant taken back
// because its write failed) and wakes the waiters and watchers of its name.
func (s *Store) endLeaseLocked(h *hold) {
	e := h.e
	s.heapRemove(h)
	if h != &e.h {
		hs := e.x.holds
		if i := slices.Index(hs, h); i >= 0 {
			hs[i] = hs[len(hs)-1]
			hs[len(hs)-1] = nil
			e.x.holds = hs[:len(hs)-1]
		}
	}
	h.id, h.token, h.meta, h.expires, h.slot = [16]byte{}, 0, nil, 0, 0
	if !e.held() {
		s.held--
	}
	s.markDirtyLocked(e) // lets the flusher reclaim e once its last token is on disk
	if e.x != nil && e.x.wake != nil {
		close(e.x.wake)
		e.x.wake = nil
	}
	s.watchers.Notify(e.name)
}

// parseLeaseID returns the 16 bytes of a lease id this store made, and false for
// any other id (which then holds nothing here).
func parseLeaseID(id string) (b [16]byte, ok bool) {
	if len(id) != 32 {
		return b, false
	}
	for i := 0; i < len(id); i++ { // lower-case only, as NewLeaseID makes them
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return b, false
		}
	}
	_, err := hex.Decode(b[:], []byte(id))
	return b, err == nil
}

// checkArgs returns the error of an operation that must not start, as every
// operation of the store words it: "bolt: OP: ERR" for a bad name or key
// (nameErr, from a validator that names it), "bolt: OP "NAME": ERR" for another
// bad argument (argErr) or when ctx is done. It returns nil if all are nil.
func checkArgs(ctx context.Context, op, name string, nameErr, argErr error) error {
	if nameErr != nil {
		return fmt.Errorf("bolt: %s: %w", op, nameErr)
	}
	if argErr == nil {
		argErr = ctx.Err()
	}
	if argErr != nil {
		return opError(op, name, argErr)
	}
	return nil
}

// opError returns err as the error of operation op on name (or key, or prefix).
func opError(op, name string, err error) error {
	return fmt.Errorf("bolt: %s %q: %w", op, name, err)
}

// lockOpen locks s.mu and returns true, or returns false, with s.mu unlocked,
// if the store is closed.
func (s *Store) lockOpen() bool {
	s.mu.Lock()
	if s.isClose {
		s.mu.Unlock()
		return false
	}
	return true
}

// Renew extends the lease identified by name and leaseID to ttl from now, by the
// store's clock, durably as Acquire does; a lease restored after a restart is
// renewed by its holder as any other. It returns an error matching
// fence.ErrNotHeld if that lease expired, was released or never existed (another
// holder's lease is never touched), fence.ErrInvalid for a bad name, lease id or
// TTL, fence.ErrUnavailable if the file could not be written (the lease keeps its
// previous expiry), and fence.ErrClosed after Close.
func (s *Store) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := checkArgs(ctx, "renew", name, driver.ValidateLease(name, leaseID), fence.ValidateTTL(ttl)); err != nil {
		return err
	}
	id, ok := parseLeaseID(leaseID)
	if !s.lockOpen() {
		return opError("renew", name, fence.ErrClosed)
	}
	e := s.locks[name]
	now := s.readLocked(s.clock.Now())
	h := e.find(id)
	if !ok || h == nil {
		s.mu.Unlock()
		return opError("renew", name, fence.ErrNotHeld)
	}
	if h.expires <= now {
		s.endLeaseLocked(h)
		s.mu.Unlock()
		return opError("renew", name, fence.ErrExpired)
	}
	oldExp := h.expires
	h.expires = now + int64(ttl)
	s.heapFix(h)
	s.armLocked(now)
	s.markDirtyLocked(e)
	g := s.syncLocked()
	s.mu.Unlock()
	if err := g.wait(); err != nil {
		s.mu.Lock()
		if s.locks[name] == e && e.find(id) == h {
			h.expires = oldExp
			s.heapFix(h)
			s.armLocked(s.now())
			s.markDirtyLocked(e)
		}
		s.mu.Unlock()
		return opError("renew", name, err)
	}
	return nil
}

// Release ends the lease identified by name and leaseID and wakes the waiters on
// name. It returns an error matching fence.ErrNotHeld if that lease is no longer
// held (fence.ErrExpired if it had expired), so a retried Release never ends a
// newer holder's lease; fence.ErrInvalid for a bad name or lease id;
// fence.ErrUnavailable if the release could not be written (it took effect in
// memory; after a crash the lease would be honoured until its expiry);
// fence.ErrClosed after Close. The release is on disk when Release returns.
func (s *Store) Release(ctx context.Context, name, leaseID string) error {
	if err := checkArgs(ctx, "release", name, driver.ValidateLease(name, leaseID), nil); err != nil {
		return err
	}
	id, ok := parseLeaseID(leaseID)
	now := s.now() // read the clock outside the lock; a little early is harmless
	if !s.lockOpen() {
		return opError("release", name, fence.ErrClosed)
	}
	h := s.locks[name].find(id)
	if !ok || h == nil {
		s.mu.Unlock()
		return opError("release", name, fence.ErrNotHeld)
	}
	expired := h.expires <= now
	s.endLeaseLocked(h)
	g := s.syncLocked()
	s.mu.Unlock()
	if err := g.wait(); err != nil {
		return opError("release", name, err)
	}
	if expired {
		return opError("release", name, fence.ErrExpired)
	}
	return nil
}

// Revoke ends the current lease on name (every live lease of a semaphore or
// shared lock), whoever holds it, and wakes the waiters on name, as Release does; the revoked holder's Renew and Release then return
// fence.ErrNotHeld, and the next grant's token is higher. The check and the end
// are one step under the store's lock, so a lease granted after the check is
// never ended. The revocation is on disk when Revoke returns. It returns an
// error matching fence.ErrNotHeld if no unexpired lease is held on name (also
// during the grace period after a crash of an earlier release, whose leases are
// unknown), fence.ErrInvalid for a bad name, fence.ErrUnavailable if the
// revocation could not be written (it took effect in memory; after a crash the
// lease would be honoured until its expiry), and fence.ErrClosed after Close.
func (s *Store) Revoke(ctx context.Context, name string) error {
	if err := checkArgs(ctx, "revoke", name, fence.ValidateName(name), nil); err != nil {
		return err
	}
	if !s.lockOpen() {
		return opError("revoke", name, fence.ErrClosed)
	}
	var hs []*hold
	if e := s.locks[name]; e != nil {
		hs = e.leases(nil)
	}
	now := s.now()
	if !slices.ContainsFunc(hs, func(h *hold) bool { return h.expires > now }) {
		s.mu.Unlock()
		return opError("revoke", name, fence.ErrNotHeld)
	}
	for _, h := range hs {
		s.endLeaseLocked(h)
	}
	g := s.syncLocked()
	s.mu.Unlock()
	if err := g.wait(); err != nil {
		return opError("revoke", name, err)
	}
	return nil
}

// Heal raises name's next token above seen (P4), and no other name's: the
// store keeps seen as the name's own floor above the one counter the other
// names share, so a heal of one name never moves what another is granted. The
// floor is on disk when Heal returns, and a restart after a crash keeps it.
// Heal never lowers a token, nor the last token recorded for name
// (LockInfo.LastToken), which becomes seen if seen is higher.
//
// seen may be at most fence.MaxHealAhead above the name's last token, which
// here is the highest token the name could have been issued: the higher of its
// own last token (or floor) and the shared counter's last token (after a
// restart, the token ceiling, which may have been issued to any name). A larger
// seen is refused with a *fence.HealBoundError (matching fence.ErrInvalid) and
// nothing changes; heal a larger regression in steps (see fence.MaxHealAhead).
//
// It returns fence.ErrInvalid for a bad name or a seen outside [1,
// fence.MaxToken], fence.ErrUnavailable if the file could not be read or written,
// and fence.ErrClosed after Close.
func (s *Store) Heal(ctx context.Context, name string, seen fence.Token) error {
	if err := checkArgs(ctx, "heal", name, fence.ValidateName(name), fence.ValidateToken(seen)); err != nil {
		return err
	}
	if !s.lockOpen() {
		return opError("heal", name, fence.ErrClosed)
	}
	e := s.locks[name]
	var last fence.Token
	if e == nil {
		// A name whose entry was reclaimed keeps its last token in the log or the
		// file: start from it, or the record written below would lower it.
		var err error
		last, err = s.recordedLastLocked(name)
		if err == nil && s.isClose {
			err = fence.ErrClosed
		}
		if err != nil {
			s.mu.Unlock()
			return opError("heal", name, err)
		}
		e = s.locks[name] // may have come while the file was read
	}
	if e != nil {
		last = e.last
	}
	if err := fence.CheckHeal(name, seen, max(last, fence.Token(s.next-1))); err != nil {
		s.mu.Unlock()
		return opError("heal", name, err)
	}
	if e == nil {
		e = newEntry(name, last)
		s.locks[e.name] = e
	}
	// Marked dirty either way: a new entry is reclaimed once written.
	s.markDirtyLocked(e)
	var g *flushGen
	if seen > e.last {
		e.last = seen
		s.watchers.Notify(name)
		g = s.syncLocked()
	}
	s.mu.Unlock()
	if g != nil {
		if err := g.wait(); err != nil {
			return opError("heal", name, err)
		}
	}
	return nil
}

// Watch yields the state of name as Inspect reports it, then its state after
// each acquire, release, expiry, revoke and heal, in order (see fence.Watcher).
// Changes are learned in process: every change of a lock's state in memory
// signals the watchers of its name at once, under the store's lock, so a
// watcher hears of a grant or a release as soon as other callers can see it
// (a grant is reported held while its write is in flight; if the write fails,
// the grant is taken back and that is signalled too). An expiry is seen at the
// holder's expiry by the store's clock, and so is the end of the grace period
// after a crash of an earlier release. A watch runs in the goroutine that
// ranges over it and costs one subscription (a channel in a map), removed when
// ctx ends; it needs no connection, so none can be lost.
//
// It yields an error matching fence.ErrInvalid for a bad name and one
// matching fence.ErrClosed when the store is closed, and ends; an error
// matching fence.ErrUnavailable (the file could not be read) is yielded and
// the read is tried again, backing off.
func (s *Store) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return s.engine.Watch(ctx, name, s.watchers.Subscribe, s.Inspect)
}

// fillLocked describes e at now with driver.Info: a lock's holder, or every
// holder of a semaphore or shared lock. During the grace period after a crash
// of an earlier release of this store (see load) every lock is reported held,
// by an unknown lease, until the grace ends.
func (s *Store) fillLocked(info *fence.LockInfo, e *entry, now int64) {
	if e != nil {
		var hbuf [8]*hold
		var buf [8]driver.Holding
		live := buf[:0]
		for _, h := range e.leases(hbuf[:0]) {
			live = append(live, s.holding(e, h))
		}
		*info = driver.Info(info.Name, live, e.last, s.at(now))
	}
	if !info.Held && now < s.graceUntil {
		info.Held, info.ExpiresIn = true, time.Duration(s.graceUntil-now)
	}
}

// Inspect returns the state of name. A lock never acquired is reported with Held
// false and LastToken 0. A semaphore or shared lock is reported with its Limit
// or Shared and every live lease in Holders (driver.Info). After a crash, a
// lease restored from the file is reported held with its token and time left.
// It returns
// fence.ErrInvalid for a bad name, fence.ErrUnavailable if the file could not be
// read, and fence.ErrClosed after Close.
func (s *Store) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := checkArgs(ctx, "inspect", name, fence.ValidateName(name), nil); err != nil {
		return fence.LockInfo{}, err
	}
	info := fence.LockInfo{Name: name}
	if !s.lockOpen() {
		return info, opError("inspect", name, fence.ErrClosed)
	}
	defer s.mu.Unlock()
	e := s.locks[name]
	var last fence.Token
	if e == nil {
		var err error
		if last, err = s.recordedLastLocked(name); err != nil {
			return fence.LockInfo{}, opError("inspect", name, err)
		}
		e = s.locks[name] // may have come while the file was read
	}
	s.fillLocked(&info, e, s.now())
	info.LastToken = max(info.LastToken, last)
	return info, nil
}

// recordedLastLocked returns the last token recorded for name, which has no entry
// in memory: in the lease log (not yet folded into the file), else in the bbolt
// file (0 if it has none). s.mu must be held; it is released while the file is
// read, so the caller looks at s.locks again after. It returns the errors of view.
func (s *Store) recordedLastLocked(name string) (fence.Token, error) {
	logged := func() (fence.Token, bool) {
		if v := s.wal.names[name]; v != nil {
			if rec, err := decodeLock(v); err == nil {
				return rec.last, true
			}
		}
		return 0, false
	}
	if last, ok := logged(); ok {
		return last, nil
	}
	// An entry is reclaimed only once its record is in the log, and the log is
	// cleared only once folded into the file: the file has what the log lacks.
	s.mu.Unlock()
	var rec lockFields
	err := s.view(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketLocks).Get([]byte(name))
		if v == nil {
			return nil
		}
		var err error
		rec, err = decodeLock(v)
		return err
	})
	s.mu.Lock()
	if last, ok := logged(); ok { // logged while the file was read
		rec.last = max(rec.last, last)
	}
	return rec.last, err
}

// List returns the locks opts selects (see fence.Inspector), in name order, at
// most opts.Limit (fence.DefaultListLimit if <= 0). By default it lists the names
// with a live lease, all of which are in memory: a walk of the lease table, O(n)
// in the names in memory, with no read of the file (during the grace period after
// a crash of an older release every name is held, so the file is read as for
// All). With opts.All it lists every name granted or healed at least once: the
// names from the file (a range scan) plus those in memory. It is for inspection,
// not hot paths. It returns fence.ErrUnavailable if the file could not be read and
// fence.ErrClosed after Close.
func (s *Store) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	prefix := opts.Prefix
	if err := ctx.Err(); err != nil {
		return nil, opError("list", prefix, err)
	}
	limit := driver.ListLimit(opts.Limit)
	if !opts.All {
		if !s.lockOpen() {
			return nil, opError("list", prefix, fence.ErrClosed)
		}
		out, ok := s.listHeldLocked(prefix, limit)
		s.mu.Unlock()
		if ok {
			return out, nil
		}
	}
	onDisk := make(map[string]fence.Token)
	var names []string
	err := s.view(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketLocks).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(names) < limit; k, v = c.Next() {
			rec, err := decodeNamed(k, v)
			if err != nil {
				return fmt.Errorf("lock %q: %w", k, err)
			}
			names = append(names, string(k))
			onDisk[string(k)] = rec.last
		}
		return nil
	})
	if err != nil {
		return nil, opError("list", prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClose {
		return nil, opError("list", prefix, fence.ErrClosed)
	}
	// Names logged but not yet in the bbolt file, and those in memory. This
	// walks the lease table, O(n): List is for inspection, not hot paths.
	for name, v := range s.wal.names {
		if rec, err := decodeLock(v); err == nil && strings.HasPrefix(name, prefix) {
			if _, dup := onDisk[name]; !dup {
				names = append(names, name)
			}
			onDisk[name] = max(onDisk[name], rec.last)
		}
	}
	for name := range s.locks {
		if _, dup := onDisk[name]; !dup && strings.HasPrefix(name, prefix) {
			onDisk[name] = 0
			names = append(names, name)
		}
	}
	sort.Strings(names)
	now := s.now()
	out := make([]fence.LockInfo, 0, min(limit, len(names)))
	for _, name := range names {
		if len(out) == limit {
			break
		}
		info := fence.LockInfo{Name: name}
		s.fillLocked(&info, s.locks[name], now)
		if last := onDisk[name]; info.LastToken < last {
			info.LastToken = last
		}
		if info.LastToken == 0 && !info.Held || !driver.Listed(info, opts) {
			continue
		}
		out = append(out, info)
	}
	return out, nil
}

// listHeldLocked returns the held locks whose names start with prefix, in name
// order, at most limit of them, from the lease table: every live lease is in
// memory, with its name's last token. It returns ok false during the grace
// period after a crash of an older release, when every name the file holds is
// held and the file must be read. s.mu must be held.
func (s *Store) listHeldLocked(prefix string, limit int) (out []fence.LockInfo, ok bool) {
	now := s.now()
	if now < s.graceUntil {
		return nil, false
	}
	out = []fence.LockInfo{}
	for name, e := range s.locks {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		info := fence.LockInfo{Name: name}
		s.fillLocked(&info, e, now)
		if info.Held {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b fence.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out[:min(len(out), limit)], true
}

// view runs a read transaction, unless the store is closed.
func (s *Store) view(f func(*bbolt.Tx) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return fence.ErrClosed
	}
	if err := s.db.View(f); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("read %s: %w", s.path, err)
		}
		return fmt.Errorf("read %s: %v: %w", s.path, err, fence.ErrUnavailable)
	}
	return nil
}

// The expiry heap: the held leases ordered by expiry, each knowing its index.

func (s *Store) heapPush(h *hold) {
	h.hidx = int32(len(s.heap))
	s.heap = append(s.heap, h)
	s.heapUp(int(h.hidx))
}

func (s *Store) heapRemove(h *hold) {
	i, n := int(h.hidx), len(s.heap)-1
	if i < 0 {
		return
	}
	if i != n {
		s.heapSwap(i, n)
	}
	s.heap[n] = nil
	s.heap = s.heap[:n]
	h.hidx = -1
	if i != n {
		s.heapFixAt(i)
	}
}

func (s *Store) heapFix(h *hold) { s.heapFixAt(int(h.hidx)) }

func (s *Store) heapFixAt(i int) {
	if !s.heapDown(i) {
		s.heapUp(i)
	}
}

func (s *Store) heapSwap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = int32(i), int32(j)
}

func (s *Store) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].expires <= s.heap[i].expires {
			return
		}
		s.heapSwap(i, p)
		i = p
	}
}

func (s *Store) heapDown(i0 int) bool {
	i, n := i0, len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && s.heap[r].expires < s.heap[l].expires {
			j = r
		}
		if s.heap[i].expires <= s.heap[j].expires {
			break
		}
		s.heapSwap(i, j)
		i = j
	}
	return i > i0
}

// armLocked makes sure the expiry timer fires no later than the earliest expiry.
// A timer armed earlier is kept: when it fires it re-arms for the new earliest.
func (s *Store) armLocked(now int64) {
	if len(s.heap) == 0 || s.isClose {
		return
	}
	top := s.heap[0].expires
	if s.timerAt != 0 && s.timerAt <= top {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timerAt = top
	s.timer = s.clock.AfterFunc(time.Duration(top-now), s.expire)
}

// expire ends the leases whose time has come, waking their waiters, and re-arms.
func (s *Store) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClose {
		return
	}
	s.timerAt = 0
	s.expireLocked(s.now())
}

// expireLocked ends the leases expired at now and re-arms the timer.
func (s *Store) expireLocked(now int64) {
	for len(s.heap) > 0 && s.heap[0].expires <= now {
		s.endLeaseLocked(s.heap[0])
	}
	s.armLocked(now)
}

// HeldLocks returns the number of lock names with a live lease (a lock's, a
// semaphore's permit or a shared lease) by the store's clock: leases expired by
// now are ended first. It is O(1) but for those, and 0 after Close. `fence serve`
// reports it as fence_held_locks, so that it keeps no per-lease record of its
// own beside the store's.
func (s *Store) HeldLocks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClose {
		return 0
	}
	s.expireLocked(s.now())
	return s.held
}
