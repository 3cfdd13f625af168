package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// fallbackPoll bounds how long a waiter trusts its watch alone: after it, the waiter
// tries again even without an event (a watch that silently stalled, say behind a
// partition, must not strand it).
const fallbackPoll = 5 * time.Second

// cleanupTimeout bounds the best-effort revocation of an etcd lease that was granted
// for a failed attempt, which runs even if the caller's context has ended.
const cleanupTimeout = 2 * time.Second

// DefaultListLimit is the number of locks List returns when its limit is <= 0.
const DefaultListLimit = 1000

// Locker is a fence.Locker on etcd. The fencing token of a grant is the create
// revision of the lock key (see the package documentation). It also implements
// fence.Inspector. It is safe for concurrent use.
type Locker struct {
	cli   *clientv3.Client
	keys  keys
	clock driver.Clock

	closed atomic.Bool
	mu     sync.Mutex
	done   chan struct{}                  // closed by Close: ends waits
	pool   map[int64][]pooledLease        // spare etcd leases by TTL seconds, under mu
	pooled int                            // number of leases in pool
	held   map[clientv3.LeaseID]heldLease // etcd leases of this Locker's grants, under mu
}

// heldLease is what a Locker knows of the etcd lease of one of its grants, so that
// Release can pool it.
type heldLease struct {
	secs    int64
	renewed time.Time
}

// maxTracked bounds the grants whose etcd leases a Locker remembers for pooling; when
// it is reached, the entries of leases that expired without a release are dropped.
const maxTracked = 4096

// pooledLease is an etcd lease with no key attached, kept for reuse: a keep-alive
// (no Raft write) makes it as good as new, where a grant is a Raft write.
type pooledLease struct {
	id      clientv3.LeaseID
	renewed time.Time // when its countdown last started (no later than that)
}

// maxPooled bounds the spare etcd leases a Locker keeps; the others are revoked.
const maxPooled = 64

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
)

// NewLocker returns a Locker that keeps its locks in etcd through cli, under
// opts.Prefix. The caller keeps ownership of cli: Locker.Close does not close it.
func NewLocker(cli *clientv3.Client, opts *Options) *Locker {
	return &Locker{cli: cli, keys: keys{opts.prefix()}, clock: opts.clock(), done: make(chan struct{})}
}

// Close makes later calls return fence.ErrClosed and ends waits in progress with
// fence.ErrClosed. Leases already granted stay held at etcd until released or
// expired. It does not close the client and always returns nil.
func (l *Locker) Close() error {
	l.closeOnce()
	return nil
}

// closeOnce closes l and reports whether it was already closed.
func (l *Locker) closeOnce() bool {
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return true
	}
	close(l.done)
	pool := l.pool
	l.pool, l.pooled, l.held = nil, 0, nil
	l.mu.Unlock()
	for _, ls := range pool { // spare leases have no key: revoking frees etcd's memory
		for _, pl := range ls {
			l.revoke(pl.id)
		}
	}
	return false
}

// putLease keeps etcd lease id, whose countdown of secs seconds started no later than
// renewed and which has no key attached, for reuse; it revokes it if the pool is full
// or the Locker closed.
func (l *Locker) putLease(id clientv3.LeaseID, secs int64, renewed time.Time) {
	if id == 0 {
		return
	}
	l.mu.Lock()
	if l.closed.Load() || l.pooled >= maxPooled {
		l.mu.Unlock()
		l.revoke(id)
		return
	}
	if l.pool == nil {
		l.pool = map[int64][]pooledLease{}
	}
	l.pool[secs] = append(l.pool[secs], pooledLease{id: id, renewed: renewed})
	l.pooled++
	l.mu.Unlock()
}

// track remembers the etcd lease of a grant for pooling at release.
func (l *Locker) track(id clientv3.LeaseID, secs int64, renewed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[clientv3.LeaseID]heldLease{}
	}
	if len(l.held) >= maxTracked { // forget the leases that have expired by now
		now := l.clock.Now()
		for k, h := range l.held {
			if now.Sub(h.renewed) > time.Duration(h.secs)*time.Second {
				delete(l.held, k)
			}
		}
	}
	if len(l.held) < maxTracked {
		l.held[id] = heldLease{secs: secs, renewed: renewed}
	}
}

// untrack forgets the etcd lease of a grant and returns what was known of it.
func (l *Locker) untrack(id clientv3.LeaseID) (heldLease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[id]
	delete(l.held, id)
	return h, ok
}

// getLease returns a pooled etcd lease of secs seconds that has not expired by the
// local clock (with a margin), or 0. Expired ones are dropped: etcd removed them.
func (l *Locker) getLease(secs int64) clientv3.LeaseID {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.pool[secs]
	for len(ls) > 0 {
		pl := ls[len(ls)-1]
		ls = ls[:len(ls)-1]
		l.pooled--
		if l.clock.Now().Sub(pl.renewed) < time.Duration(secs)*time.Second-500*time.Millisecond {
			l.pool[secs] = ls
			return pl.id
		}
	}
	delete(l.pool, secs)
	return 0
}

// leaseSeconds is the etcd lease TTL for a fence TTL: whole seconds, rounded up, so
// etcd never expires a lease before the holder's deadline. (etcd also raises TTLs
// below its minimum, 1.5 election timeouts, to that minimum.)
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// Acquire grants a lease on name for ttl (see fence.Locker). The etcd lease behind it
// has ceil(ttl) whole seconds, or etcd's minimum lease TTL if that is longer; the
// returned lease's deadline is the requested ttl from when the request was sent.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when ctx ended the wait; fence.ErrInvalid for a
// bad name or TTL; fence.ErrTokenExhausted if etcd's revision passed fence.MaxToken;
// fence.ErrUnavailable if etcd cannot be reached; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if err := l.check(name); err != nil {
		return nil, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return nil, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	o := driver.ApplyOptions(opts...)
	var waitEnd <-chan time.Time
	if o.Wait > 0 && o.Wait != fence.WaitForever {
		t := time.NewTimer(o.Wait)
		defer t.Stop()
		waitEnd = t.C
	}
	id := driver.NewLeaseID()
	var el clientv3.LeaseID // the etcd lease for the grant, kept across attempts
	var w *watch            // set once the first attempt failed and we wait
	defer func() {
		if w != nil {
			w.cancel()
		}
	}()
	backoff := minBackoff
	for {
		start, err := l.prepareLease(ctx, name, &el, ttl)
		var won fence.Token
		if err == nil {
			if won, err = l.try(ctx, name, id, el); err != nil {
				l.revoke(el) // a key the attempt may have created goes with it
				el = 0
			}
		}
		if err != nil {
			// A waiter rides out a leader election or a short partition: it tries
			// again, backing off, until its wait ends.
			if o.Wait == 0 || ctx.Err() != nil || !errors.Is(err, fence.ErrUnavailable) {
				l.putLease(el, leaseSeconds(ttl), start)
				return nil, err
			}
			if err := l.pause(ctx, name, backoff, waitEnd, err); err != nil {
				l.putLease(el, leaseSeconds(ttl), start)
				return nil, err
			}
			backoff = min(2*backoff, maxBackoff)
			if w != nil {
				w.broken = true
			}
			continue
		}
		backoff = minBackoff
		if won != 0 {
			l.track(el, leaseSeconds(ttl), start)
			return driver.NewLease(driver.LeaseConfig{
				Locker: l, Name: name, Token: won, ID: id, TTL: ttl,
				Start: start, Clock: l.clock, AutoRenew: o.AutoRenew,
			}), nil
		}
		if o.Wait == 0 {
			l.putLease(el, leaseSeconds(ttl), start)
			return nil, l.heldError(ctx, name, nil)
		}
		if w == nil || w.broken {
			// Watch first, then try again: a release before the watch is registered
			// is seen by the next attempt, one after it by the watch.
			if w != nil {
				w.cancel()
			}
			if w, err = l.watch(ctx, name, waitEnd); err != nil {
				if !errors.Is(err, fence.ErrUnavailable) || ctx.Err() != nil {
					l.putLease(el, leaseSeconds(ttl), start)
					return nil, err
				}
				if err := l.pause(ctx, name, backoff, waitEnd, err); err != nil {
					l.putLease(el, leaseSeconds(ttl), start)
					return nil, err
				}
				backoff = min(2*backoff, maxBackoff)
			}
			continue
		}
		if err := w.wait(ctx, waitEnd); err != nil {
			l.putLease(el, leaseSeconds(ttl), start)
			return nil, err
		}
	}
}

// Backoff of a waiter whose attempts fail because etcd is unavailable.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// pause waits d before a waiter's next attempt after lastErr (fence.ErrUnavailable).
// It returns lastErr if the wait ends first, lastErr and ctx.Err() if ctx ends, and
// fence.ErrClosed if the Locker is closed.
func (l *Locker) pause(ctx context.Context, name string, d time.Duration, waitEnd <-chan time.Time, lastErr error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-waitEnd:
		return lastErr
	case <-ctx.Done():
		return fmt.Errorf("%w (waiting ended: %w)", lastErr, ctx.Err())
	case <-l.done:
		return fmt.Errorf("etcd: acquire %q: %w", name, fence.ErrClosed)
	}
}

// prepareLease makes *el an etcd lease with ttl's seconds left, and returns when the
// request that started its countdown was sent (the lease's Start: the holder's
// deadline is never later than etcd's expiry). The first attempt takes a spare lease
// of the Locker's pool, or grants one; a waiter keeps it while it waits. A kept or
// spare lease is refreshed with a keep-alive, which is not a Raft write (so a handoff
// or an uncontended acquire costs one write less than with a grant); a new one is
// granted only if it expired meanwhile.
func (l *Locker) prepareLease(ctx context.Context, name string, el *clientv3.LeaseID, ttl time.Duration) (time.Time, error) {
	if *el == 0 {
		*el = l.getLease(leaseSeconds(ttl))
	}
	if *el != 0 {
		start := l.clock.Now()
		if _, err := l.cli.KeepAliveOnce(ctx, *el); err == nil {
			return start, nil
		} else if !errors.Is(storeErr(err), fence.ErrNotHeld) {
			l.revoke(*el)
			*el = 0
			return time.Time{}, fmt.Errorf("etcd: acquire %q: keep-alive: %w", name, storeErr(err))
		}
		*el = 0 // expired: etcd removed it
	}
	start := l.clock.Now()
	g, err := l.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return time.Time{}, fmt.Errorf("etcd: acquire %q: grant: %w", name, storeErr(err))
	}
	*el = g.ID
	return start, nil
}

// try makes one attempt: create the lock key under etcd lease el if it does not
// exist. It returns the token of the grant, or 0 if the lock is held.
func (l *Locker) try(ctx context.Context, name, id string, el clientv3.LeaseID) (fence.Token, error) {
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(clientv3.OpPut(lk, id, clientv3.WithLease(el)), clientv3.OpPut(l.keys.token(name), "")).
		Commit()
	if err != nil {
		// The key may or may not have been created; if it was, it is under el and
		// the caller's revocation of el deletes it: no lock is left that nobody holds.
		return 0, fmt.Errorf("etcd: acquire %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return 0, nil
	}
	// The transaction's revision is the create revision of the lock key.
	tok := fence.Token(resp.Header.Revision)
	if resp.Header.Revision <= 0 || tok > fence.MaxToken {
		return 0, fmt.Errorf("etcd: acquire %q: revision %d: %w", name, resp.Header.Revision, fence.ErrTokenExhausted)
	}
	return tok, nil
}

// revoke revokes an etcd lease that is of no use, best effort: if it fails the lease
// expires by itself.
func (l *Locker) revoke(id clientv3.LeaseID) {
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, id)
}

// watch is a waiter's watch on one lock key, registered at the server.
type watch struct {
	l      *Locker
	name   string
	ch     clientv3.WatchChan
	cancel context.CancelFunc
	broken bool // the watch ended: make a new one
}

// watch registers a watch on the lock key of name for deletes from the current
// revision on, and returns once etcd confirmed it.
//
// It watches from "now" (no start revision), which puts it straight into etcd's
// group of synced watchers, notified as each write is applied. A watch from an
// older revision (concurrency.Mutex watches from its predecessor's revision; so does
// "the failed attempt's revision + 1" as soon as any other write happened since)
// lands in the unsynced group, which a background loop serves every 100 ms: that
// loop, not the network, is most of concurrency.Mutex's handoff time.
func (l *Locker) watch(ctx context.Context, name string, waitEnd <-chan time.Time) (*watch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &watch{l: l, name: name, cancel: cancel}
	w.ch = l.cli.Watch(wctx, l.keys.lock(name), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-w.ch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			if ctx.Err() != nil {
				return nil, l.heldError(ctx, name, ctx.Err())
			}
			err := error(fence.ErrUnavailable)
			if ok && wr.Err() != nil {
				err = storeErr(wr.Err())
			}
			return nil, fmt.Errorf("etcd: acquire %q: watch: %w", name, err)
		}
		return w, nil
	case <-waitEnd:
		cancel()
		return nil, l.heldError(ctx, name, nil)
	case <-ctx.Done():
		cancel()
		return nil, l.heldError(ctx, name, ctx.Err())
	case <-l.done:
		cancel()
		return nil, fmt.Errorf("etcd: acquire %q: %w", name, fence.ErrClosed)
	}
}

// wait blocks until the lock key is deleted (a release, or the expiry of the
// holder's etcd lease), the fallback poll interval passes, or the watch breaks, and
// then returns nil: time for an attempt. It returns the error Acquire returns when
// the wait ends (waitEnd, ctx) or the Locker is closed.
func (w *watch) wait(ctx context.Context, waitEnd <-chan time.Time) error {
	poll := time.NewTimer(fallbackPoll)
	defer poll.Stop()
	for {
		select {
		case wr, ok := <-w.ch:
			if !ok || wr.Err() != nil || wr.Canceled {
				if ctx.Err() != nil {
					return w.l.heldError(ctx, w.name, ctx.Err())
				}
				w.broken = true // no leader, compaction: try, then watch anew
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		case <-poll.C:
			return nil
		case <-waitEnd:
			return w.l.heldError(ctx, w.name, nil)
		case <-ctx.Done():
			return w.l.heldError(ctx, w.name, ctx.Err())
		case <-w.l.done:
			return fmt.Errorf("etcd: acquire %q: %w", w.name, fence.ErrClosed)
		}
	}
}

// heldError is the error of an acquire that found name held: a *fence.HeldError with
// the holder's remaining time if it can be learnt quickly, joined with cause (the
// context's error) if the wait ended by the context.
func (l *Locker) heldError(ctx context.Context, name string, cause error) error {
	he := &fence.HeldError{Name: name}
	if cause == nil {
		if info, err := l.inspect(ctx, name); err == nil && info.Held {
			he.ExpiresIn = info.ExpiresIn
		}
		return fmt.Errorf("etcd: acquire %q: %w", name, he)
	}
	return fmt.Errorf("etcd: acquire %q: %w: %w", name, he, cause)
}

// check returns ErrClosed after Close and ErrInvalid for a bad name.
func (l *Locker) check(name string) error {
	if l.closed.Load() {
		return fence.ErrClosed
	}
	return driver.ValidateName(name)
}

func (l *Locker) checkLease(name, leaseID string) error {
	if err := l.check(name); err != nil {
		return err
	}
	return driver.ValidateLeaseID(leaseID)
}

// Renew extends the lease (name, leaseID) to ttl from now (see fence.Locker). etcd
// renews a lease to the TTL it was granted with, so when ttl is longer than that, or
// less than half of it, Renew moves the lock key to a new etcd lease of ttl (the key
// keeps its create revision, so the token is unchanged) and revokes the old one.
//
// It returns fence.ErrNotHeld if that lease expired, was released or never existed,
// fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd cannot be reached
// and fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID)).
		Then(clientv3.OpGet(lk)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 || kvs[0].Lease == 0 {
		return fmt.Errorf("etcd: renew %q: lock key has no etcd lease: %w", name, ErrCorrupt)
	}
	old := clientv3.LeaseID(kvs[0].Lease)
	kaStart := l.clock.Now()
	ka, err := l.cli.KeepAliveOnce(ctx, old)
	if err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	want := leaseSeconds(ttl)
	if ka.TTL >= want && ka.TTL <= 2*want+1 {
		l.mu.Lock()
		if h, ok := l.held[old]; ok {
			h.renewed = kaStart
			l.held[old] = h
		}
		l.mu.Unlock()
		return nil
	}
	// Move the key to a lease of the new TTL, if it is still ours on the old lease.
	g, err := l.cli.Grant(ctx, want)
	if err != nil {
		return fmt.Errorf("etcd: renew %q: grant: %w", name, storeErr(err))
	}
	resp, err = l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID), clientv3.Compare(clientv3.LeaseValue(lk), "=", old)).
		Then(clientv3.OpPut(lk, leaseID, clientv3.WithLease(g.ID))).
		Commit()
	if err != nil {
		l.revoke(g.ID)
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		l.revoke(g.ID)
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	l.untrack(old)
	l.revoke(old)
	return nil
}

// Release ends the lease (name, leaseID): it deletes the lock key if its value is
// still leaseID, which wakes the waiters' watches, then revokes the etcd lease. It
// returns fence.ErrNotHeld if the lease is no longer held (never touching a newer
// holder's key), fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd
// cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID)).
		Then(clientv3.OpDelete(lk, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: release %q: %w", name, fence.ErrNotHeld)
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		// The etcd lease now has no key: keep it for the next grant if this Locker
		// granted it, else revoke it.
		id := clientv3.LeaseID(prev[0].Lease)
		if h, ok := l.untrack(id); ok {
			l.putLease(id, h.secs, h.renewed)
		} else {
			l.revoke(id)
		}
	}
	return nil
}

// Inspect returns the state of the lock name: Held and Token (the lock key's create
// revision) while the lock key and its etcd lease exist, LastToken (the revision of
// the last grant) and ExpiresIn (the etcd lease's remaining TTL, in whole seconds,
// truncated: 0 in its last second). This is etcd's view, which for a TTL below etcd's
// minimum lease TTL lasts longer than the holder's deadline (see the package
// documentation). A lock never acquired is
// reported not held with LastToken 0. It returns fence.ErrInvalid for a bad name,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := l.check(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("etcd: inspect %q: %w", name, err)
	}
	info, err := l.inspect(ctx, name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("etcd: inspect %q: %w", name, err)
	}
	return info, nil
}

// inspect reads the lock and token keys of name in one transaction, then the
// holder's etcd lease.
func (l *Locker) inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	resp, err := l.cli.Txn(ctx).Then(clientv3.OpGet(l.keys.lock(name)), clientv3.OpGet(l.keys.token(name))).Commit()
	if err != nil {
		return fence.LockInfo{}, storeErr(err)
	}
	info := fence.LockInfo{Name: name}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		info.LastToken = fence.Token(kvs[0].ModRevision)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		if err := l.fillHeld(ctx, &info, kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease)); err != nil {
			return fence.LockInfo{}, err
		}
	}
	return info, nil
}

// fillHeld sets the held fields of info for a lock key created at rev under lease.
func (l *Locker) fillHeld(ctx context.Context, info *fence.LockInfo, rev int64, lease clientv3.LeaseID) error {
	if lease == 0 { // written by hand without a lease: held until deleted
		info.Held, info.Token = true, fence.Token(rev)
		info.LastToken = max(info.LastToken, info.Token)
		return nil
	}
	ttl, err := l.cli.TimeToLive(ctx, lease)
	if err != nil {
		if errors.Is(storeErr(err), fence.ErrNotHeld) {
			return nil // expired between the two reads
		}
		return storeErr(err)
	}
	if ttl.TTL < 0 {
		return nil // the etcd lease is gone, and the key with it
	}
	// The etcd lease exists, so etcd keeps the key and nobody else is granted the
	// lock: held. TTL is whole seconds, truncated; 0 means under a second left, or
	// expired and waiting for etcd's revocation (checked every 500ms), and is
	// reported as ExpiresIn 0 (unknown).
	info.Held = true
	info.Token = fence.Token(rev)
	info.ExpiresIn = time.Duration(ttl.TTL) * time.Second
	if info.LastToken < info.Token {
		info.LastToken = info.Token
	}
	return nil
}

// List returns the locks whose names start with prefix (every name acquired at least
// once, held or not) in name order, at most limit of them (DefaultListLimit if limit
// <= 0). It returns fence.ErrInvalid for a prefix that is not a valid name,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, fence.ErrClosed)
	}
	if prefix != "" {
		if err := driver.ValidateName(prefix); err != nil {
			return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
		}
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	tokPrefix := l.keys.token("")
	resp, err := l.cli.Get(ctx, tokPrefix+prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, storeErr(err))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	out := make([]fence.LockInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, fence.LockInfo{Name: string(kv.Key[len(tokPrefix):]), LastToken: fence.Token(kv.ModRevision)})
	}
	// The held ones among them, at the same revision.
	first, last := l.keys.lock(out[0].Name), l.keys.lock(out[len(out)-1].Name)
	locks, err := l.cli.Get(ctx, first, clientv3.WithRange(last+"\x00"), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, storeErr(err))
	}
	lockPrefix := l.keys.lock("")
	i := 0
	for _, kv := range locks.Kvs {
		name := string(kv.Key[len(lockPrefix):])
		for i < len(out) && out[i].Name < name {
			i++
		}
		if i == len(out) {
			break
		}
		if out[i].Name == name {
			if err := l.fillHeld(ctx, &out[i], kv.CreateRevision, clientv3.LeaseID(kv.Lease)); err != nil {
				return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
			}
		}
	}
	return out, nil
}
