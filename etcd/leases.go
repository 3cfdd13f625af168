package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
)

// The etcd leases behind a Locker's grants: each grant's lock key is attached to an
// etcd lease of the grant's TTL. A grant of an etcd lease is a Raft write with a
// backend commit, a keep-alive is answered by the leader alone; so a Locker keeps
// the etcd leases of its released grants (their key is gone) and of failed tries in
// a small pool, and refreshes one with a keep-alive instead of granting anew.

// cleanupTimeout bounds the best-effort revocation of an etcd lease that was granted
// for a failed try, which runs even if the caller's context has ended.
const cleanupTimeout = 2 * time.Second

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

// leaseSeconds is the etcd lease TTL for a fence TTL: whole seconds, rounded up, so
// etcd never expires a lease before the holder's deadline. (etcd also raises TTLs
// below its minimum, 1.5 election timeouts, to that minimum.)
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// grantSeconds is the TTL of the etcd lease of a grant of ttl: leaseSeconds, and
// with FastExpiry one spare second. The spare lets a pooled lease taken within
// about a second of its last countdown start be granted on without a keep-alive
// (see prepareLease), which on a follower is a round trip to the leader. It
// delays nothing that waits: with FastExpiry a waiter ends a silent holder's
// grant by its beats, not by etcd's expiry. Only a grant nobody waits for
// lingers, at most a second longer, in Inspect and List.
func (l *Locker) grantSeconds(ttl time.Duration) int64 {
	if l.fast {
		return leaseSeconds(ttl) + 1
	}
	return leaseSeconds(ttl)
}

// reuseMargin is what a pooled etcd lease must have left, beyond a grant's TTL,
// to be granted on without a keep-alive: 1% of the lease's TTL for the rates of
// this process's clock and the etcd leader's, which count the lease apart, plus
// 50 ms (the margin of the waiters' silence rule, see expiry.go).
func reuseMargin(secs int64) time.Duration {
	return time.Duration(secs)*10*time.Millisecond + 50*time.Millisecond
}

// prepareLease makes *el an etcd lease that outlives a grant of ttl made now, and
// returns the grant's start (the holder's deadline is its start plus ttl, never
// later than etcd's expiry) and when the lease's countdown last started (no later
// than the request that started it was sent). The first try takes a spare lease
// of the Locker's pool, or grants one; a waiter keeps it while it waits. A kept or
// spare lease whose time left by this process's clock covers ttl and
// reuseMargin is used as it is: the start is now. One that does not is refreshed
// with a keep-alive, which is not a Raft write (so a handoff or an uncontended
// acquire costs one write less than with a grant): both times are when the
// keep-alive was sent. A new one is granted only if it expired meanwhile.
func (l *Locker) prepareLease(ctx context.Context, el *clientv3.LeaseID, from *time.Time, ttl time.Duration) (time.Time, error) {
	secs := l.grantSeconds(ttl)
	if *el == 0 {
		*el, *from = l.getLease(secs)
	}
	if *el != 0 {
		start := l.clock.Now()
		// A clock seen to run back (a fault clock; never a monotonic one) is not
		// trusted for what is left.
		elapsed := start.Sub(*from)
		if elapsed >= 0 && time.Duration(secs)*time.Second-elapsed >= ttl+reuseMargin(secs) {
			return start, nil
		}
		_, err := l.cli.KeepAliveOnce(ctx, *el)
		if err == nil {
			*from = start
			return start, nil
		}
		if err = storeErr(err); !errors.Is(err, fence.ErrNotHeld) {
			l.revoke(*el)
			*el = 0
			return time.Time{}, fmt.Errorf("keep-alive: %w", err)
		}
		*el = 0 // expired: etcd removed it
	}
	start := l.clock.Now()
	g, err := l.cli.Grant(ctx, secs)
	if err != nil {
		return time.Time{}, fmt.Errorf("grant: %w", storeErr(err))
	}
	*el, *from = g.ID, start
	return start, nil
}

// getLease returns a pooled etcd lease of secs seconds that has not expired by the
// local clock (with a margin), and when its countdown last started; or 0. Expired
// ones are dropped: etcd removed them.
func (l *Locker) getLease(secs int64) (clientv3.LeaseID, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.pool[secs]
	for len(ls) > 0 {
		pl := ls[len(ls)-1]
		ls = ls[:len(ls)-1]
		l.pooled--
		if l.clock.Now().Sub(pl.renewed) < time.Duration(secs)*time.Second-500*time.Millisecond {
			l.pool[secs] = ls
			return pl.id, pl.renewed
		}
	}
	delete(l.pool, secs)
	return 0, time.Time{}
}

// putLease keeps etcd lease id, whose countdown of secs seconds started no later than
// renewed and which has no key attached, for reuse; it revokes it if the pool is full
// or the Locker closed. An id of 0 is no lease: nothing happens.
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

// drainPool empties the pool at Close and revokes its leases: they have no key, so
// revoking them only frees etcd's memory early.
func (l *Locker) drainPool() {
	l.mu.Lock()
	pool := l.pool
	l.pool, l.pooled, l.held = nil, 0, nil
	l.mu.Unlock()
	for _, ls := range pool {
		for _, pl := range ls {
			l.revoke(pl.id)
		}
	}
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

// renewed records that the countdown of a tracked etcd lease restarted at renewed.
func (l *Locker) renewed(id clientv3.LeaseID, renewed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[id]; ok {
		h.renewed = renewed
		l.held[id] = h
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

// revoke revokes an etcd lease that is of no use, best effort: if it fails the lease
// expires by itself. An id of 0 is no lease: nothing happens.
func (l *Locker) revoke(id clientv3.LeaseID) {
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, id)
}
