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

// prepareLease makes *el an etcd lease with ttl's seconds left, and returns when the
// request that started its countdown was sent (the lease's Start: the holder's
// deadline is never later than etcd's expiry). The first try takes a spare lease
// of the Locker's pool, or grants one; a waiter keeps it while it waits. A kept or
// spare lease is refreshed with a keep-alive, which is not a Raft write (so a handoff
// or an uncontended acquire costs one write less than with a grant); a new one is
// granted only if it expired meanwhile.
func (l *Locker) prepareLease(ctx context.Context, el *clientv3.LeaseID, ttl time.Duration) (time.Time, error) {
	if *el == 0 {
		*el = l.getLease(leaseSeconds(ttl))
	}
	if *el != 0 {
		start := l.clock.Now()
		_, err := l.cli.KeepAliveOnce(ctx, *el)
		if err == nil {
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
	g, err := l.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return time.Time{}, fmt.Errorf("grant: %w", storeErr(err))
	}
	*el = g.ID
	return start, nil
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
