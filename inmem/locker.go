// Package inmem is fence's reference implementation: a Locker and a Guard that keep
// their state in the memory of one process, with an injectable clock so the
// simulator and tests can drive time deterministically (see ManualClock).
//
// It is correct and safe for concurrent use, and it passes fencetest, but it is not
// for production across processes: locks and fences live and die with the process
// that holds them. Use it to test code written against fence.Locker and fence.Guard,
// in the simulator, and as the executable definition the other backends are
// compared with.
package inmem

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Options configure a Locker.
type Options struct {
	// Clock judges expiry and measures waits; nil means driver.SystemClock. Leases
	// the Locker grants use it too.
	Clock driver.Clock
}

// Locker is the in-process reference fence.Locker. For each lock name it keeps a
// token counter that never goes down, not even when the lock expires or is
// released (only Restore, emulating a failover, can lower it), and at most one
// lease (or the leases of a semaphore or shared lock), which expire by the
// Locker's clock.
//
// Expired leases are cleared lazily, when the name is next touched; a waiter sets a
// clock timer for the holder's expiry and is also woken at once by Release.
// Semaphores (fence.WithLimit) and shared locks (fence.WithShared) follow the
// rules of driver.Decide; the record of a waiting exclusive acquire lives in
// memory with the rest.
// Waiters are not served in FIFO order: after a release they race, and one wins.
// The state of every name ever used is kept for the life of the Locker (about a
// hundred bytes each), because a counter must never restart.
type Locker struct {
	clock  driver.Clock
	engine driver.Engine

	mu       sync.Mutex
	locks    map[string]*lockState
	watchers driver.Watchers // Watch subscriptions, notified under mu
}

var (
	_ fence.Locker    = (*Locker)(nil)
	_ driver.Granter  = (*Locker)(nil)
	_ fence.Revoker   = (*Locker)(nil)
	_ fence.Healer    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
	_ fence.Watcher   = (*Locker)(nil)
)

type lockState struct {
	counter fence.Token // highest token issued for the name (or healed to)
	// leases are the name's leases: one for a lock, up to the limit for a
	// semaphore, up to fence.MaxLimit shared ones. Expired ones are dropped when
	// the name is next touched.
	leases []driver.Holding
	// claimed are the ids of the live leases that a retry of their acquire
	// returned (see driver.UnclaimedReleaser); nil when none.
	claimed map[string]struct{}
	// waiterUntil is when the record of an exclusive acquire waiting for shared
	// holders ends (writer preference; see driver.Decide).
	waiterUntil time.Time
	// released is closed (and replaced) when a lease ends by Release or Revoke, or
	// when the state is replaced by Restore, to wake waiters at once.
	released chan struct{}
}

// live drops the expired leases of st and returns the live ones. l.mu must
// be held.
func (st *lockState) live(now time.Time) []driver.Holding {
	st.leases = slices.DeleteFunc(st.leases, func(h driver.Holding) bool {
		if now.Before(h.Expires) {
			return false
		}
		delete(st.claimed, h.ID)
		return true
	})
	return st.leases
}

// find returns the index of the live lease leaseID in st, or -1.
func (st *lockState) find(leaseID string, now time.Time) int {
	return slices.IndexFunc(st.live(now), func(h driver.Holding) bool { return h.ID == leaseID })
}

// claim records that a retry of the acquire of the live lease leaseID returned
// it: ReleaseUnclaimed no longer ends it. l.mu must be held.
func (st *lockState) claim(leaseID string) {
	if st.claimed == nil {
		st.claimed = make(map[string]struct{})
	}
	st.claimed[leaseID] = struct{}{}
}

// NewLocker returns an empty Locker.
func NewLocker(opts Options) *Locker {
	c := opts.Clock
	if c == nil {
		c = driver.SystemClock
	}
	l := &Locker{clock: c, locks: make(map[string]*lockState)}
	l.engine = driver.Engine{Backend: "inmem", Locker: l, Clock: c, Features: l.Features()}
	return l
}

// Features reports that the Locker makes semaphores and shared locks and keeps
// request ids (fence.WithRequestID).
func (l *Locker) Features() fence.Features {
	return fence.Features{Semaphores: true, Shared: true, RequestIDs: true}
}

// Clock returns the clock the Locker judges expiry by.
func (l *Locker) Clock() driver.Clock { return l.clock }

// stateLocked returns name's state, creating it. l.mu must be held.
func (l *Locker) stateLocked(name string) *lockState {
	st := l.locks[name]
	if st == nil {
		st = &lockState{released: make(chan struct{})}
		l.locks[name] = st
	}
	return st
}

// Acquire grants a lease on name for ttl, with a token greater than every token
// issued for name before. By default it tries once; with fence.WithWait it waits,
// woken at once by a Release and by the holder's expiry on the Locker's clock, for
// at most the wait (measured by that clock) and until ctx is done.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the
// lock stayed held, also matching ctx.Err() when ctx ended the wait;
// fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted when the name's
// counter is at fence.MaxToken.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return l.engine.Acquire(ctx, name, ttl, opts, l.try)
}

// Grant is Acquire without the *fence.Lease (see driver.Granter): the token, lease
// id and start of the grant, with Acquire's errors.
func (l *Locker) Grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	return l.engine.Grant(ctx, name, ttl, opts, l.try)
}

// try grants a lease if the name is free for it (driver.Decide), or reports how
// it is held and hands the waiter the channel that a Release closes.
func (l *Locker) try(_ context.Context, r *driver.Request) (driver.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(r.Name)
	now := l.clock.Now()
	live := st.live(now)
	if h, ok := driver.Retried(r, live); ok {
		// A retry of a grant whose answer was lost: the same grant, renewed and
		// claimed.
		for i := range st.leases {
			if st.leases[i].ID == h.ID {
				st.leases[i].Expires = now.Add(r.TTL)
			}
		}
		st.claim(h.ID)
		return driver.Result{Token: h.Token, ID: h.ID, Slot: h.Slot}, nil
	}
	d, err := driver.Decide(r, live, now, st.waiterUntil)
	if err != nil {
		return driver.Result{}, err
	}
	if !d.Grant {
		if d.MarkWaiter {
			st.waiterUntil = now.Add(driver.WaiterFor(r))
		}
		return driver.Result{ExpiresIn: d.ExpiresIn, Retry: d.Retry, Wake: st.released}, nil
	}
	if st.counter >= fence.MaxToken {
		return driver.Result{}, fmt.Errorf("counter at %d: %w", st.counter, fence.ErrTokenExhausted)
	}
	st.counter++
	st.leases = append(st.leases, driver.Holding{
		ID: r.ID, Token: st.counter, Owner: r.Options.Owner, RequestID: r.Options.RequestID, Slot: d.Slot,
		Limit: r.Options.Limit, Shared: r.Options.Shared, Expires: now.Add(r.TTL),
	})
	if !r.Options.Shared && r.Options.Limit == 0 {
		st.waiterUntil = time.Time{}
	}
	l.watchers.Notify(r.Name)
	return driver.Result{Token: st.counter, Slot: d.Slot}, nil
}

var _ driver.RetryFinder = (*Locker)(nil)

// FindRetried returns the live grant of name made under the request id of opts,
// extended to ttl from now and claimed (see driver.UnclaimedReleaser), and
// true, or false if there is none (see driver.RetryFinder); it grants nothing.
// It returns fence.ErrInvalid for a bad
// name, TTL or request id.
func (l *Locker) FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, bool, error) {
	r := driver.RetryRequest(name, ttl, opts)
	if err := precheck(ctx, "acquire", name, fence.ValidateName(name), fence.ValidateTTL(ttl)); err != nil {
		return driver.Grant{}, false, err
	}
	if r.Options.RequestID == "" {
		return driver.Grant{}, false, nil
	}
	if err := fence.ValidateRequestID(r.Options.RequestID); err != nil {
		return driver.Grant{}, false, fmt.Errorf("inmem: acquire %q: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.locks[name]
	if st == nil {
		return driver.Grant{}, false, nil
	}
	now := l.clock.Now()
	h, ok := driver.Retried(r, st.live(now))
	if !ok {
		return driver.Grant{}, false, nil
	}
	st.leases[st.find(h.ID, now)].Expires = now.Add(ttl)
	st.claim(h.ID)
	return driver.Grant{Token: h.Token, ID: h.ID, Start: now, Slot: h.Slot}, true, nil
}

var _ driver.UnclaimedReleaser = (*Locker)(nil)

// ReleaseUnclaimed releases the live lease leaseID of name, granted under
// requestID, and wakes the waiters on name, if no retry of its acquire claimed
// it (Acquire or FindRetried returned it): true. It returns false and changes
// nothing if a retry claimed it, if it is no longer held or if it was granted
// under another request id (see driver.UnclaimedReleaser); fence.ErrInvalid for a
// bad name, lease id or request id.
func (l *Locker) ReleaseUnclaimed(ctx context.Context, name, leaseID, requestID string) (bool, error) {
	if err := precheck(ctx, "release", name, driver.ValidateLease(name, leaseID), fence.ValidateRequestID(requestID)); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.locks[name]
	if st == nil {
		return false, nil
	}
	i := st.find(leaseID, l.clock.Now())
	if _, claimed := st.claimed[leaseID]; i < 0 || claimed || st.leases[i].RequestID != requestID {
		return false, nil
	}
	st.leases = slices.Delete(st.leases, i, i+1)
	l.endLocked(name, st)
	return true, nil
}

// Renew extends the lease identified by name and leaseID to ttl from now, by the
// Locker's clock. It returns an error matching fence.ErrNotHeld if that lease
// expired, was released or never existed (another holder's lease is never
// touched), and fence.ErrInvalid for a bad name, lease id or TTL.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := precheck(ctx, "renew", name, driver.ValidateLease(name, leaseID), fence.ValidateTTL(ttl)); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.locks[name]
	now := l.clock.Now()
	i := -1
	if st != nil {
		i = st.find(leaseID, now)
	}
	if i < 0 {
		return fmt.Errorf("inmem: renew %q: %w", name, fence.ErrNotHeld)
	}
	st.leases[i].Expires = now.Add(ttl)
	return nil
}

// Release ends the lease identified by name and leaseID and wakes the waiters on
// name. It returns an error matching fence.ErrNotHeld if that lease is no longer
// held, so a retried Release never ends a newer holder's lease, and
// fence.ErrInvalid for a bad name or lease id.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := precheck(ctx, "release", name, driver.ValidateLease(name, leaseID)); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.locks[name]
	if st == nil {
		return fmt.Errorf("inmem: release %q: %w", name, fence.ErrNotHeld)
	}
	now := l.clock.Now()
	i := slices.IndexFunc(st.leases, func(h driver.Holding) bool { return h.ID == leaseID })
	if i < 0 {
		return fmt.Errorf("inmem: release %q: %w", name, fence.ErrNotHeld)
	}
	held := now.Before(st.leases[i].Expires)
	st.leases = slices.Delete(st.leases, i, i+1)
	delete(st.claimed, leaseID)
	l.endLocked(name, st)
	if !held {
		return fmt.Errorf("inmem: release %q: %w", name, fence.ErrExpired)
	}
	return nil
}

// Revoke ends the current lease on name now (every live lease of a semaphore or
// shared lock), whoever holds it, and wakes the waiters on name (see
// fence.Revoker). It returns an error matching
// fence.ErrNotHeld if no unexpired lease is held, and fence.ErrInvalid for a bad
// name.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := precheck(ctx, "revoke", name, fence.ValidateName(name)); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.locks[name]
	if st == nil || len(st.live(l.clock.Now())) == 0 {
		return fmt.Errorf("inmem: revoke %q: %w", name, fence.ErrNotHeld)
	}
	st.leases = st.leases[:0]
	clear(st.claimed)
	l.endLocked(name, st)
	return nil
}

// endLocked wakes the waiters and watchers of name, whose state st has just lost
// a lease. l.mu must be held.
func (l *Locker) endLocked(name string, st *lockState) {
	close(st.released)
	st.released = make(chan struct{})
	l.watchers.Notify(name)
}

// Heal raises name's counter to at least seen, so the next grant's token is above
// it (P4). Each name has its own counter, so no other name's tokens move. It never
// lowers a counter. seen may be at most fence.MaxHealAhead above the name's last
// token (its counter: the highest token issued for it, or healed to; 0 for a name
// never used); a larger seen is refused with a *fence.HealBoundError (matching
// fence.ErrInvalid) and nothing changes. It returns fence.ErrInvalid for a bad
// name or a seen outside [1, fence.MaxToken].
func (l *Locker) Heal(ctx context.Context, name string, seen fence.Token) error {
	if err := precheck(ctx, "heal", name, fence.ValidateName(name), fence.ValidateToken(seen)); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var last fence.Token
	if st := l.locks[name]; st != nil {
		last = st.counter
	}
	if err := fence.CheckHeal(name, seen, last); err != nil {
		return fmt.Errorf("inmem: heal %q: %w", name, err)
	}
	st := l.stateLocked(name)
	if st.counter < seen {
		st.counter = seen
		l.watchers.Notify(name)
	}
	return nil
}

// Watch yields the state of name, then its state after each acquire, release,
// expiry (by the Locker's clock), revoke, heal or Restore (see fence.Watcher).
// Changes are signalled in process, at once. It yields fence.ErrInvalid for a bad
// name and ends.
func (l *Locker) Watch(ctx context.Context, name string) iter.Seq2[fence.LockInfo, error] {
	return l.engine.Watch(ctx, name, l.watchers.Subscribe, l.Inspect)
}

// Inspect returns the state of name. A lock never acquired is reported with Held
// false and LastToken 0. It returns fence.ErrInvalid for a bad name.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := precheck(ctx, "inspect", name, fence.ValidateName(name)); err != nil {
		return fence.LockInfo{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.infoLocked(name, l.clock.Now()), nil
}

// precheck returns the first failed check of a call on name, in the order every
// method checks: nameErr (the check of name itself, which may also cover what is
// reported with name, such as a lease id) worded "inmem: OP: ERR", then each of
// argErrs and ctx's error, worded "inmem: OP NAME: ERR". It returns nil if all pass.
func precheck(ctx context.Context, op, name string, nameErr error, argErrs ...error) error {
	if nameErr != nil {
		return fmt.Errorf("inmem: %s: %w", op, nameErr)
	}
	for _, err := range append(argErrs, ctx.Err()) {
		if err != nil {
			return fmt.Errorf("inmem: %s %q: %w", op, name, err)
		}
	}
	return nil
}

// infoLocked returns the state of name at now. l.mu must be held.
func (l *Locker) infoLocked(name string, now time.Time) fence.LockInfo {
	st := l.locks[name]
	if st == nil {
		return fence.LockInfo{Name: name}
	}
	return driver.Info(name, st.leases, st.counter, now)
}

// List returns the locks opts selects (see fence.Inspector): by default those
// with a lease unexpired by the Locker's clock, with opts.All every name whose
// counter is above 0 (granted or healed at least once), in name order, at most
// opts.Limit (fence.DefaultListLimit if <= 0). It sorts the matching names, so it
// costs O(n log n) in the number of names: it is for inspection, not for hot
// paths. It returns ctx's error if ctx is done.
func (l *Locker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inmem: list %q: %w", opts.Prefix, err)
	}
	limit := driver.ListLimit(opts.Limit)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	var out []fence.LockInfo
	for name, st := range l.locks {
		if st.counter == 0 || !strings.HasPrefix(name, opts.Prefix) {
			continue
		}
		if info := l.infoLocked(name, now); driver.Listed(info, opts) {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b fence.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > limit {
		out = out[:limit]
	}
	if out == nil {
		out = []fence.LockInfo{}
	}
	return out, nil
}

// Snapshot is a copy of a Locker's counters and leases at one instant, for
// Restore. Its zero value is an empty Locker.
type Snapshot struct {
	locks map[string]lockState
}

// Len returns how many lock names the snapshot holds.
func (s Snapshot) Len() int { return len(s.locks) }

// Snapshot returns a copy of the Locker's counters and current leases.
func (l *Locker) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{locks: make(map[string]lockState, len(l.locks))}
	for name, st := range l.locks {
		c := *st
		c.leases = slices.Clone(st.leases)
		c.claimed = maps.Clone(st.claimed) // a replica has the claims with the leases
		c.released = nil
		s.locks[name] = c
	}
	return s
}

// Restore replaces the Locker's state with s, emulating a failover to a replica
// that last synchronised when s was taken: counters go back to their values then
// (so tokens issued since will be issued again, which is what a guard must catch),
// leases granted since disappear (Renew and Release of them return
// fence.ErrNotHeld), and leases released since reappear until they expire. Waiters
// are woken to look again. Leases already handed out keep their local deadlines.
func (l *Locker) Restore(s Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.locks
	for _, st := range old {
		close(st.released)
	}
	l.locks = make(map[string]*lockState, len(s.locks))
	for name, st := range s.locks {
		c := st
		c.leases = slices.Clone(st.leases)
		c.claimed = maps.Clone(st.claimed)
		c.released = make(chan struct{})
		l.locks[name] = &c
	}
	for name := range old {
		l.watchers.Notify(name)
	}
	for name := range s.locks {
		if old[name] == nil {
			l.watchers.Notify(name)
		}
	}
}
