package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Locker is a fence.Locker on etcd. The fencing token of a grant is the create
// revision of the lock key (see the package documentation). It also implements
// fence.Inspector, fence.Revoker and fence.Watcher. It is safe for concurrent use.
type Locker struct {
	cli    *clientv3.Client
	keys   keys
	clock  driver.Clock
	engine driver.Engine

	closed atomic.Bool
	mu     sync.Mutex
	done   chan struct{}                  // closed by Close: ends waits
	pool   map[int64][]pooledLease        // spare etcd leases by TTL seconds, under mu
	pooled int                            // number of leases in pool
	held   map[clientv3.LeaseID]heldLease // etcd leases of this Locker's grants, under mu

	wctx    context.Context    // parent of Watch's etcd watches and reads; ended by Close
	wcancel context.CancelFunc // ends wctx
	wmu     sync.Mutex
	watches map[string]*lockWatch // Watch's shared etcd watches by lock name, under wmu
	reads   map[string]*nameReads // Watch's shared reads by lock name, under wmu
}

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
	_ fence.Revoker   = (*Locker)(nil)
	_ fence.Watcher   = (*Locker)(nil)
)

// NewLocker returns a Locker that keeps its locks in etcd through cli, under
// opts.Prefix. The caller keeps ownership of cli: Locker.Close does not close it.
func NewLocker(cli *clientv3.Client, opts *Options) *Locker {
	l := &Locker{cli: cli, keys: keys{opts.prefix()}, clock: opts.clock(), done: make(chan struct{})}
	l.wctx, l.wcancel = context.WithCancel(context.Background())
	l.engine = driver.Engine{Backend: "etcd", Locker: l, Clock: l.clock, Poll: fallbackPoll, Closed: l.done}
	return l
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
	l.mu.Unlock()
	l.wcancel()
	l.drainPool()
	return false
}

// Acquire grants a lease on name for ttl (see fence.Locker). The etcd lease behind it
// has ceil(ttl) whole seconds, or etcd's minimum lease TTL if that is longer; the
// returned lease's deadline is the requested ttl from when the request was sent.
// A waiting call sleeps until its watch reports a delete of the lock key, and tries
// again at least every 5 s without one; it rides out fence.ErrUnavailable, backing
// off, until its wait ends.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when ctx ended the wait or a request;
// fence.ErrInvalid for a bad name or TTL; fence.ErrTokenExhausted if etcd's revision
// passed fence.MaxToken; fence.ErrUnavailable if etcd cannot be reached;
// fence.ErrClosed after Close. The wording is driver.Engine's.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	var (
		el    clientv3.LeaseID // the etcd lease for the grant, kept across tries
		start time.Time        // when el's countdown last started
		w     *watch           // a waiting call's watch, registered after its first held try
	)
	defer func() {
		if w != nil {
			w.cancel()
		}
		l.putLease(el, leaseSeconds(ttl), start) // 0 after a grant: its key holds it
	}()
	return l.engine.Acquire(ctx, name, ttl, opts, func(ctx context.Context, r *driver.Request) (driver.Result, error) {
		var wake <-chan struct{} // taken before the look: a delete after it closes wake
		watching := false
		if w != nil {
			wake, watching = w.next()
		}
		last := !r.Waiting || r.WaitLeft != fence.WaitForever && r.WaitLeft <= fallbackPoll
		var err error
		var tok fence.Token
		var holder *mvccpb.KeyValue
		if start, err = l.prepareLease(ctx, &el, r.TTL); err == nil {
			if tok, holder, err = l.try(ctx, r, el, last); err != nil {
				l.revoke(el) // a key the try may have created goes with it
				el = 0
			}
		}
		if err != nil {
			// A waiter rides out a leader election or a short partition; its watch
			// is made anew.
			if w != nil {
				w.cancel()
				w = nil
			}
			return driver.Result{}, transient(err)
		}
		if tok != 0 {
			l.track(el, leaseSeconds(r.TTL), start)
			el = 0
			return driver.Result{Token: tok, Start: start}, nil
		}
		held := driver.Result{Retry: fallbackPoll}
		if watching {
			held.Wake = wake
		} else if r.Waiting {
			// Watch first, then look again: a release before the watch is registered
			// is seen by the next try, one after it by the watch.
			if w != nil {
				w.cancel()
			}
			if w, err = l.watch(ctx, r.Name, r.WaitLeft); err != nil {
				return driver.Result{}, transient(err)
			}
			if w != nil {
				return driver.Result{Again: true}, nil
			}
			// The call is over (ctx, its wait, Close): the Engine says how.
		}
		if last {
			held.ExpiresIn = l.timeLeft(ctx, holder)
		}
		return held, nil
	})
}

// try makes one try: create the lock key under etcd lease el if it does not exist,
// with the owner key (if the request names an owner) under el in the same write.
// It returns the token of the grant, or 0 and (if withHolder) the holder's lock key
// if the lock is held.
func (l *Locker) try(ctx context.Context, r *driver.Request, el clientv3.LeaseID, withHolder bool) (fence.Token, *mvccpb.KeyValue, error) {
	lk := l.keys.lock(r.Name)
	grant := []clientv3.Op{clientv3.OpPut(lk, r.ID, clientv3.WithLease(el)), clientv3.OpPut(l.keys.token(r.Name), "")}
	if r.Options.Owner != "" {
		grant = append(grant, clientv3.OpPut(l.keys.owner(r.Name), r.Options.Owner, clientv3.WithLease(el)))
	}
	txn := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(grant...)
	if withHolder {
		txn = txn.Else(clientv3.OpGet(lk))
	}
	resp, err := txn.Commit()
	if err != nil {
		// The key may or may not have been created; if it was, it is under el and
		// the caller's revocation of el deletes it: no lock is left that nobody holds.
		return 0, nil, storeErr(err)
	}
	if !resp.Succeeded {
		var holder *mvccpb.KeyValue
		if withHolder {
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
				holder = kvs[0]
			}
		}
		return 0, holder, nil
	}
	// The transaction's revision is the create revision of the lock key.
	tok := fence.Token(resp.Header.Revision)
	if resp.Header.Revision <= 0 || tok > fence.MaxToken {
		return 0, nil, fmt.Errorf("revision %d: %w", resp.Header.Revision, fence.ErrTokenExhausted)
	}
	return tok, nil, nil
}

// timeLeft returns the time left of the etcd lease of holder's lock key, in whole
// seconds, or 0 if it is not known (no holder, no lease, an error): best effort, for
// the *fence.HeldError of the call's last try.
func (l *Locker) timeLeft(ctx context.Context, holder *mvccpb.KeyValue) time.Duration {
	if holder == nil {
		return 0
	}
	var info fence.LockInfo
	if err := l.fillHeld(ctx, &info, holder, nil); err != nil {
		return 0
	}
	return info.ExpiresIn
}

// check returns ErrClosed after Close and ErrInvalid for a bad name.
func (l *Locker) check(name string) error {
	if l.closed.Load() {
		return fence.ErrClosed
	}
	return driver.ValidateName(name)
}

// checkLease is check, and ErrInvalid for a bad lease id.
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
		Then(clientv3.OpGet(lk), clientv3.OpGet(l.keys.owner(name))).
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
		l.renewed(old, kaStart)
		return nil
	}
	// Move the keys to a lease of the new TTL, if the lock is still ours on the old lease.
	g, err := l.cli.Grant(ctx, want)
	if err != nil {
		return fmt.Errorf("etcd: renew %q: grant: %w", name, storeErr(err))
	}
	// The owner key goes along, so that it lives as long as the lock key.
	move := []clientv3.Op{clientv3.OpPut(lk, leaseID, clientv3.WithLease(g.ID))}
	if owner := grantOwner(kvs[0], only(resp.Responses[1].GetResponseRange().GetKvs())); owner != nil {
		move = append(move, clientv3.OpPut(string(owner.Key), string(owner.Value), clientv3.WithLease(g.ID)))
	}
	resp, err = l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID), clientv3.Compare(clientv3.LeaseValue(lk), "=", old)).
		Then(move...).
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

// Release ends the lease (name, leaseID): it deletes the lock key (and its owner
// key) if the lock key's value is still leaseID, which wakes the waiters' watches,
// then pools or revokes the etcd lease. It
// returns fence.ErrNotHeld if the lease is no longer held (never touching a newer
// holder's key), fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd
// cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	if err := l.end(ctx, name, clientv3.Compare(clientv3.Value(l.keys.lock(name)), "=", leaseID), true); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	return nil
}

// Revoke ends the current lease on name now, whoever holds it (see fence.Revoker):
// one transaction deletes the lock key and its owner key if the lock key exists, so
// it ends exactly the grant that holds the lock as it is applied, never a later
// one. The delete wakes the waiters' watches, as a release does. Then the holder's
// etcd lease, now without keys, is revoked (never pooled: a Renew of the revoked
// holder that is in flight may still send it a keep-alive). The revoked holder's
// Renew and Release then return fence.ErrNotHeld: they compare the lock key's value
// with their lease id.
//
// It returns fence.ErrNotHeld if the lock is not held (also if etcd has just
// expired the holder's lease), fence.ErrInvalid for a bad name,
// fence.ErrUnavailable if etcd cannot be reached (the lease may or may not have
// ended) and fence.ErrClosed after Close.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := l.check(name); err != nil {
		return fmt.Errorf("etcd: revoke %q: %w", name, err)
	}
	if err := l.end(ctx, name, clientv3.Compare(clientv3.CreateRevision(l.keys.lock(name)), ">", 0), false); err != nil {
		return fmt.Errorf("etcd: revoke %q: %w", name, err)
	}
	return nil
}

// end deletes the lock key of name and its owner key in one transaction if cmp
// holds, and then disposes of the etcd lease the lock key had: it has no key now,
// so if pool is set and this Locker granted it, it is kept for the next grant; else
// it is revoked. It returns fence.ErrNotHeld if cmp does not hold.
func (l *Locker) end(ctx context.Context, name string, cmp clientv3.Cmp, pool bool) error {
	resp, err := l.cli.Txn(ctx).
		If(cmp).
		Then(clientv3.OpDelete(l.keys.lock(name), clientv3.WithPrevKV()), clientv3.OpDelete(l.keys.owner(name))).
		Commit()
	if err != nil {
		return storeErr(err)
	}
	if !resp.Succeeded {
		return fence.ErrNotHeld
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		id := clientv3.LeaseID(prev[0].Lease)
		if h, ok := l.untrack(id); ok && pool {
			l.putLease(id, h.secs, h.renewed)
		} else {
			l.revoke(id)
		}
	}
	return nil
}
