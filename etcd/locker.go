package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	fast   bool // Options.FastExpiry
	fifo   bool // Options.FIFO

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

	_ fence.FeatureLocker = (*Locker)(nil)
)

// NewLocker returns a Locker that keeps its locks in etcd through cli, under
// opts.Prefix. The caller keeps ownership of cli: Locker.Close does not close it.
func NewLocker(cli *clientv3.Client, opts *Options) *Locker {
	l := &Locker{cli: cli, keys: keys{opts.prefix()}, clock: opts.clock(), done: make(chan struct{}), fast: opts.fast(), fifo: opts.fifo()}
	l.wctx, l.wcancel = context.WithCancel(context.Background())
	l.engine = driver.Engine{Backend: "etcd", Locker: l, Clock: l.clock, Poll: fallbackPoll, Closed: l.done, Features: l.Features()}
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

// Acquire grants a lease on name for ttl (see fence.Locker), or a semaphore permit
// (fence.WithLimit) or a shared lease (fence.WithShared). The etcd lease behind it
// has ceil(ttl) whole seconds, or etcd's minimum lease TTL if that is longer; the
// returned lease's deadline is the requested ttl from when the request was sent.
// A waiting call sleeps until its watch reports a delete of one of the name's
// keys, and tries again at least every 5 s without one; it rides out
// fence.ErrUnavailable, backing off, until its wait ends. With Options.FIFO a
// waiting call keeps its place in the name's queue across its tries; with
// Options.FastExpiry it ends a grant whose holder has fallen silent (see the
// package documentation).
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when ctx ended the wait or a request;
// fence.ErrInvalid for a bad name or TTL, and a *fence.LimitError (matching it) for
// a limit other than the live leases'; fence.ErrTokenExhausted if etcd's revision
// passed fence.MaxToken; fence.ErrUnavailable if etcd cannot be reached; ErrCorrupt
// for a key of the name this package did not write; fence.ErrClosed after Close.
// The wording is driver.Engine's.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	var (
		el    clientv3.LeaseID // the etcd lease for the grant, kept across tries
		from  time.Time        // when el's countdown last started
		start time.Time        // the last try's start: the grant's, if it grants
		w     *watch           // a waiting call's watch, registered after its first held try
		c     = acquireCall{waiter: l.keys.waiter(name, driver.NewLeaseID()), hint: -1}
	)
	defer func() {
		if w != nil {
			w.cancel()
		}
		l.leaveQueue(&c)
		if el != 0 && c.marked && l.unmark(c.waiter) != nil {
			// No grant: the waiter record under el goes before el is pooled. If
			// it could not be deleted it lives while el does, holding off shared
			// acquires of the name: el is revoked, which ends it.
			l.revoke(el)
			el = 0
		}
		l.putLease(el, l.grantSeconds(ttl), from) // 0 after a grant: its key holds it
	}()
	return l.engine.Acquire(ctx, name, ttl, opts, func(ctx context.Context, r *driver.Request) (driver.Result, error) {
		var wake <-chan struct{} // taken before the look: a delete after it closes wake
		watching := false
		if w != nil {
			wake, watching = w.next()
			freed := w.freed()
			c.hint = l.keys.lowestSlot(name, kindOf(r.Options), freed)
			if watching && c.notForMe(freed) {
				// FIFO: a waiter ahead is still queued, so this try could not
				// succeed: sleep again, until the next delete or the last try's retry.
				return driver.Result{Wake: wake, Retry: max(c.due.Sub(l.clock.Now()), time.Millisecond), ExpiresIn: c.expiresIn}, nil
			}
		}
		last := !r.Waiting || r.WaitLeft != fence.WaitForever && r.WaitLeft <= fallbackPoll
		var err error
		var res driver.Result
		if err = l.checkPlace(ctx, &c); err == nil {
			start, err = l.prepareLease(ctx, &el, &from, r.TTL)
		}
		if err == nil {
			if res, err = l.try(ctx, r, el, &c, last); err != nil {
				l.dropTried(r, el)
				el = 0
			}
		}
		if err != nil && r.Waiting && c.wl != 0 && errors.Is(err, fence.ErrNotHeld) {
			// The waiter lease expired under the try (a leader change longer than
			// its TTL): the place went with it; the next try joins the queue again.
			l.dropPlace(&c)
			return driver.Result{}, driver.Transient(err)
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
		if res.Token != 0 {
			if c.retried { // the grant keeps its own etcd lease; el stays the call's
				return res, nil
			}
			if l.fifo && c.queued > 0 {
				c.marked = false // the grant deleted the waiter key
			}
			l.track(el, l.grantSeconds(r.TTL), from)
			el = 0
			res.Start = start
			return res, nil
		}
		if res.Again || watching {
			res.Wake = wake
			return res, nil
		}
		if r.Waiting {
			// Watch first, then look again: a release before the watch is registered
			// is seen by the next try, one after it by the watch.
			if w != nil {
				w.cancel()
			}
			if w, err = l.watch(ctx, r.Name, r.WaitLeft, &c.beats); err != nil {
				return driver.Result{}, transient(err)
			}
			if w != nil {
				return driver.Result{Again: true}, nil
			}
			// The call is over (ctx, its wait, Close): the Engine says how.
		}
		return res, nil
	})
}

// dropTried disposes of the etcd lease el of a try of r that failed: its grant
// transaction may have committed all the same (its answer lost to a timeout, a
// reset connection, a leader change), so el may hold a grant. Without a request
// id nobody can find that grant, and el is revoked: the key goes with it. With
// one, a retry of the acquire (here or through another Locker) may have found
// the grant and returned it with a full TTL: el is revoked only if no retry
// claimed the grant (drop); if one did, or etcd could not be reached, what the
// try may have granted ends by its holder's release or at its expiry. Either
// way el is never pooled.
func (l *Locker) dropTried(r *driver.Request, el clientv3.LeaseID) {
	if r.Options.RequestID == "" {
		l.revoke(el)
		return
	}
	l.drop(r, el)
}

// Features reports that a Locker makes semaphores and shared locks and keeps
// request ids (fence.WithRequestID; see request.go) (see fence.FeatureLocker).
func (l *Locker) Features() fence.Features {
	return fence.Features{Semaphores: true, Shared: true, RequestIDs: true}
}

// check returns ErrClosed after Close and ErrInvalid for a bad name.
func (l *Locker) check(name string) error {
	if l.closed.Load() {
		return fence.ErrClosed
	}
	return fence.ValidateName(name)
}

// checkLease is check, and ErrInvalid for a bad lease id.
func (l *Locker) checkLease(name, leaseID string) error {
	if err := l.check(name); err != nil {
		return err
	}
	return fence.ValidateLeaseID(leaseID)
}

// Renew extends the lease (name, leaseID) to ttl from now (see fence.Locker), a
// lock's, a semaphore permit's or a shared lease's alike. etcd renews a lease to
// the TTL it was granted with, so when ttl is longer than that, or less than half
// of it, Renew moves the lease's key to a new etcd lease of ttl (the key keeps its
// create revision, so the token is unchanged) and revokes the old one. With
// Options.FastExpiry the transaction that checks the lease also writes its beat
// key (a Raft write), the renewal that waiters count a silent holder's TTL from; a
// Locker without it writes the beat of a grant that has one in a second
// transaction.
//
// Two Renews of one lease at once may both move it: the one whose move finds the
// key on another etcd lease than it read, still held by leaseID, renews again (at
// most renewTries times) rather than report the live lease lost.
//
// It returns fence.ErrNotHeld if that lease expired, was released or never existed,
// fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd cannot be reached
// and fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	for try := 1; ; try++ {
		err := l.renew(ctx, name, leaseID, ttl)
		if !errors.Is(err, errMovedMeanwhile) {
			return err
		}
		if try == renewTries {
			return fmt.Errorf("etcd: renew %q: moved by %d other renewals meanwhile: %w", name, try, fence.ErrUnavailable)
		}
	}
}

// renewTries bounds Renew's tries against other Renews moving the same lease.
const renewTries = 3

// errMovedMeanwhile is renew's answer when another Renew moved the lease's key
// to another etcd lease between its read and its move: the lease is still held.
var errMovedMeanwhile = errors.New("etcd: lease moved by another renewal meanwhile")

// renew is one try of Renew: errMovedMeanwhile if another renewal moved the
// lease's key meanwhile.
func (l *Locker) renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	key, holder := l.keys.leaseKey(name, leaseID)
	held := heldBy(key, leaseID, holder)
	// With FastExpiry the renewal writes the key's beat: a Raft write, which waiters
	// see (see expiry.go). Without, the read shows whether the key has one.
	beat := clientv3.OpGet(l.keys.beat(key), clientv3.WithCountOnly())
	if l.fast {
		beat = l.keys.touchBeat(key, ttl)
	}
	resp, err := l.cli.Txn(ctx).
		If(held...).
		Then(clientv3.OpGet(key), clientv3.OpGet(l.keys.owner(name)), beat).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 || kvs[0].Lease == 0 {
		return fmt.Errorf("etcd: renew %q: lease key has no etcd lease: %w", name, ErrCorrupt)
	}
	if !l.fast && resp.Responses[2].GetResponseRange().GetCount() > 0 {
		if err := l.renewBeat(ctx, key, held, ttl); err != nil {
			return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
		}
	}
	old := clientv3.LeaseID(kvs[0].Lease)
	kaStart := l.clock.Now()
	ka, err := l.cli.KeepAliveOnce(ctx, old)
	if err != nil {
		err = storeErr(err)
		if errors.Is(err, fence.ErrNotHeld) && l.movedMeanwhile(ctx, key, held, old) {
			return errMovedMeanwhile
		}
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	want := leaseSeconds(ttl)
	if ka.TTL >= want && ka.TTL <= 2*want+1 {
		l.renewed(old, kaStart)
		return nil
	}
	// Move the keys to a lease of the new TTL, if the lease is still ours on the old one.
	g, err := l.cli.Grant(ctx, l.grantSeconds(ttl))
	if err != nil {
		return fmt.Errorf("etcd: renew %q: grant: %w", name, storeErr(err))
	}
	// A lock's owner key goes along, so that it lives as long as the lock key; so
	// does the grant's claim record (see request.go), if a retry claimed it.
	move := []clientv3.Op{clientv3.OpPut(key, string(kvs[0].Value), clientv3.WithLease(g.ID)), l.keys.moveBeat(key, g.ID), l.keys.moveClaim(name, leaseID, g.ID)}
	if owner := grantOwner(kvs[0], only(resp.Responses[1].GetResponseRange().GetKvs())); owner != nil && !holder {
		move = append(move, clientv3.OpPut(string(owner.Key), string(owner.Value), clientv3.WithLease(g.ID)))
	}
	resp, err = l.cli.Txn(ctx).
		If(append(held, clientv3.Compare(clientv3.LeaseValue(key), "=", old))...).
		Then(move...).
		Commit()
	if err != nil {
		l.revoke(g.ID)
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		l.revoke(g.ID)
		if l.movedMeanwhile(ctx, key, held, old) {
			return errMovedMeanwhile
		}
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	l.untrack(old)
	l.revoke(old)
	return nil
}

// movedMeanwhile reports whether the lease key, which a renewal read on the etcd
// lease old, is still held (the comparisons held) on another etcd lease: another
// Renew moved it meanwhile. An error reading it is false.
func (l *Locker) movedMeanwhile(ctx context.Context, key string, held []clientv3.Cmp, old clientv3.LeaseID) bool {
	now, err := l.cli.Txn(ctx).If(held...).Then(clientv3.OpGet(key)).Commit()
	if err != nil || !now.Succeeded {
		return false
	}
	kv := only(now.Responses[0].GetResponseRange().GetKvs())
	return kv != nil && clientv3.LeaseID(kv.Lease) != old
}

// Release ends the lease (name, leaseID): it deletes the lease's key (the lock key
// and its owner key, or the permit's or shared lease's holder key) if it is still
// held by leaseID, which wakes the waiters' watches, then pools or revokes the
// etcd lease. It returns fence.ErrNotHeld if the lease is no longer held (never
// touching a newer holder's key), fence.ErrInvalid for bad arguments,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	key, holder := l.keys.leaseKey(name, leaseID)
	// The claim record (request.go) goes too: the etcd lease may be pooled.
	del := []clientv3.Op{clientv3.OpDelete(key, clientv3.WithPrevKV()), clientv3.OpDelete(l.keys.beat(key)), clientv3.OpDelete(l.keys.claimKey(name, leaseID))}
	if !holder {
		del = append(del, clientv3.OpDelete(l.keys.owner(name)))
	}
	if err := l.end(ctx, heldBy(key, leaseID, holder), del, true); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	return nil
}

// Revoke ends every live lease on name now, whoever holds them (see
// fence.Revoker): one transaction deletes the lock key and its owner key and every
// holder key (semaphore permits, shared leases), so it ends exactly the grants
// that hold the name as it is applied, never a later one. The delete wakes the
// waiters' watches, as a release does. Then the holders' etcd leases, now without
// keys, are revoked (never pooled: a Renew of a revoked holder that is in flight
// may still send one a keep-alive). The revoked holders' Renew and Release then
// return fence.ErrNotHeld: they compare their key's value with their lease id.
// Exclusive-waiter records stay: their acquires are still waiting.
//
// It returns fence.ErrNotHeld if the name is not held (also if etcd has just
// expired the holders' leases), fence.ErrInvalid for a bad name,
// fence.ErrUnavailable if etcd cannot be reached (the leases may or may not have
// ended) and fence.ErrClosed after Close.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := l.check(name); err != nil {
		return fmt.Errorf("etcd: revoke %q: %w", name, err)
	}
	hFrom, hTo := l.keys.holders(name)
	bFrom, bTo := l.keys.beats(name)
	del := []clientv3.Op{
		clientv3.OpDelete(l.keys.lock(name), clientv3.WithPrevKV()),
		clientv3.OpDelete(hFrom, clientv3.WithRange(hTo), clientv3.WithPrevKV()),
		clientv3.OpDelete(l.keys.owner(name)),
		clientv3.OpDelete(bFrom, clientv3.WithRange(bTo)),
	}
	if err := l.end(ctx, nil, del, false); err != nil {
		return fmt.Errorf("etcd: revoke %q: %w", name, err)
	}
	return nil
}

// end runs the deletes del in one transaction if cmps hold, and then disposes of
// the etcd leases the deleted keys had (those of del with WithPrevKV): they have no
// key now, so if pool is set and this Locker granted one, it is kept for the next
// grant; else it is revoked. It returns fence.ErrNotHeld if cmps do not hold or
// nothing was deleted.
func (l *Locker) end(ctx context.Context, cmps []clientv3.Cmp, del []clientv3.Op, pool bool) error {
	resp, err := l.cli.Txn(ctx).If(cmps...).Then(del...).Commit()
	if err != nil {
		return storeErr(err)
	}
	if !resp.Succeeded {
		return fence.ErrNotHeld
	}
	ended := false
	for _, r := range resp.Responses {
		for _, prev := range r.GetResponseDeleteRange().GetPrevKvs() {
			ended = true
			if prev.Lease == 0 {
				continue
			}
			id := clientv3.LeaseID(prev.Lease)
			if h, ok := l.untrack(id); ok && pool {
				l.putLease(id, h.secs, h.renewed)
			} else {
				l.revoke(id)
			}
		}
	}
	if !ended {
		return fence.ErrNotHeld
	}
	return nil
}
