package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// FIFO waiting (Options.FIFO; docs/etcd.md, "FIFO waiting"). A waiting acquire
// keeps one waiter key (lock/NAME\x00w<ID>, the key of exclusive-waiter records)
// from its first try that found the name held to its grant, which deletes it, or
// to its end, which deletes it at once. Its create revision is the waiter's place
// in the queue: a grant compares that no waiter key has a lower one (an acquire
// with no key: that there is no waiter key at all), so a new arrival, or a waiter
// woken before its turn, cannot be granted past an earlier waiter. The first try
// writes the key under the etcd lease of the call's grant (so an acquire that
// finds the name free pays nothing); the call then moves it, keeping its create
// revision, to a waiter lease of its own, of waiterSecs, which a keep-alive keeps
// alive while the call waits: a waiter that sleeps long keeps its place, and one
// whose process dies leaves the queue when etcd expires that short lease, not
// after the grant's TTL.

// waiterSecs is the TTL of a waiter lease: etcd raises it to its minimum lease
// TTL (1.5 election timeouts), and a waiter that died holds its place until then,
// plus up to 500ms.
const waiterSecs = 1

// queueOps returns the compares, the grant's operations and the failure's
// operations that FIFO adds to a try of call c under el: the queue compare; the
// deletion of c's waiter key; and, for a waiting call, the writing of its waiter
// key if it has none, and a read of the queue (always last).
func (l *Locker) queueOps(r *driver.Request, el clientv3.LeaseID, c *acquireCall) (cmps []clientv3.Cmp, then, els []clientv3.Op) {
	wFrom, wTo := l.keys.waiters(r.Name)
	if c.queued > 0 {
		cmps = []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(c.waiter), "=", c.queued),
			clientv3.Compare(clientv3.CreateRevision(wFrom), ">", c.queued-1).WithRange(wTo),
		}
		then = []clientv3.Op{clientv3.OpDelete(c.waiter)}
	} else {
		cmps = []clientv3.Cmp{none(wFrom, wTo)}
	}
	if r.Waiting {
		lease := el
		if c.wl != 0 {
			lease = c.wl
		}
		els = append(els, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.waiter), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(c.waiter, "", clientv3.WithLease(lease))}, nil))
	}
	els = append(els, clientv3.OpGet(wFrom, clientv3.WithRange(wTo)))
	return cmps, then, els
}

// turn reads the queue that a failed try read (queue) for call c: it notes c's
// place (the create revision of its waiter key; 0 if it has none), and reports
// whether c may be granted: no waiter key has a lower create revision than c's, or
// there is none at all.
func (c *acquireCall) turn(queue []*mvccpb.KeyValue) bool {
	c.queued = 0
	var head int64
	for _, kv := range queue {
		if string(kv.Key) == c.waiter {
			c.queued = kv.CreateRevision
			c.marked = true
		}
		if head == 0 || kv.CreateRevision < head {
			head = kv.CreateRevision
		}
	}
	clear(c.ahead)
	if c.queued > 0 {
		for _, kv := range queue {
			if kv.CreateRevision < c.queued {
				if c.ahead == nil {
					c.ahead = map[string]bool{}
				}
				c.ahead[string(kv.Key)] = true
			}
		}
	}
	return head == 0 || head == c.queued
}

// notForMe reports whether the deletes a queued call c was woken by (freed, the
// keys its watch saw deleted since its last try) cannot have brought its turn:
// some waiter that was ahead of it at its last try is still there. Later arrivals
// only join behind it, and a waiter ahead leaves only by the deletion of its key,
// which c's watch reports; so c strikes each one reported off, and its turn can
// come only when none is left. Until then only a waiter ahead can be granted, and
// c sends no transaction at a release or at a waiter's grant (a herd of one
// failed transaction per waiter and handoff). A wake-up without deletes (a
// timer), or with more than the watch keeps, is not judged here; a broken watch
// is not consulted at all.
func (c *acquireCall) notForMe(freed []string) bool {
	if len(freed) == 0 || len(c.ahead) == 0 || len(freed) >= maxFreed {
		return false
	}
	for _, k := range freed {
		delete(c.ahead, k)
	}
	return len(c.ahead) > 0
}

// holdPlace moves the waiter key of a queued call c (c.queued > 0) that has no
// waiter lease yet to one, pooled or granted, keeping its create revision, and
// keeps that lease alive until leaveQueue. If the key is gone meanwhile, c is no
// longer queued: its next try joins the queue again.
func (l *Locker) holdPlace(ctx context.Context, c *acquireCall) error {
	if c.wl != 0 || c.queued == 0 {
		return nil
	}
	wl, _ := l.getLease(waiterSecs)
	from := l.clock.Now() // before the request that starts wl's countdown
	if wl != 0 {
		if _, err := l.cli.KeepAliveOnce(ctx, wl); err != nil {
			l.revoke(wl)
			wl = 0
		}
	}
	if wl == 0 {
		from = l.clock.Now()
		g, err := l.cli.Grant(ctx, waiterSecs)
		if err != nil {
			return fmt.Errorf("waiter lease: %w", storeErr(err))
		}
		wl = g.ID
	}
	c.wl = wl
	c.kaAt.Store(&from)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.waiter), "=", c.queued)).
		Then(clientv3.OpPut(c.waiter, "", clientv3.WithLease(wl))).
		Commit()
	if err != nil {
		return fmt.Errorf("waiter key: %w", storeErr(err))
	}
	if !resp.Succeeded {
		c.queued = 0
	}
	l.keepWaiting(c, wl, from)
	return nil
}

// leaveQueue ends c's waiting: it stops the keep-alives of its waiter lease,
// deletes its waiter key unless its grant did, and pools the emptied waiter
// lease (revokes it if the key may remain: a pooled lease must have no key).
func (l *Locker) leaveQueue(c *acquireCall) {
	c.stopWaiting()
	if c.wl == 0 {
		return
	}
	empty := true
	if c.marked {
		empty = l.unmark(c.waiter) == nil
		c.marked = false
	}
	if at := c.kaAt.Load(); empty && at != nil {
		l.putLease(c.wl, waiterSecs, *at)
	} else {
		l.revoke(c.wl)
	}
	c.wl = 0
}

// keepWaiting keeps the waiter lease wl of a queued call alive until
// stopWaiting, with keep-alives (not Raft writes): the call's tries may be far
// apart, and its waiter key must outlive them. from is when the request that
// last started wl's countdown was sent. c.kaAt records, for the pool, when
// the last keep-alive that etcd answered was sent: taken before the request,
// on the monotonic clock, it is never later than the countdown it restarted
// (an answer's arrival would be). Keep-alives go a third of the lease's TTL
// apart, and every half second while they fail; when one finds the lease gone,
// or none is answered within the TTL, c.kaLost says so, and the next try looks
// at the lease again (checkPlace).
func (l *Locker) keepWaiting(c *acquireCall, wl clientv3.LeaseID, from time.Time) {
	if c.stopKA != nil {
		return
	}
	c.kaAt.Store(&from)
	c.kaLost.Store(false)
	ctx, cancel := context.WithCancel(l.wctx)
	c.stopKA = cancel
	go func() {
		ttl := time.Duration(waiterSecs) * time.Second // until the first answer says etcd's
		for {
			sent := l.clock.Now()
			kctx, kcancel := context.WithTimeout(ctx, ttl) // unanswered that long, it has expired
			ka, err := l.cli.KeepAliveOnce(kctx, wl)
			kcancel()
			next := 500 * time.Millisecond
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				c.kaAt.Store(&sent)
				ttl = time.Duration(ka.TTL) * time.Second
				next = ttl / 3
			case errors.Is(storeErr(err), fence.ErrNotHeld), l.clock.Now().Sub(*c.kaAt.Load()) >= ttl:
				c.kaLost.Store(true) // the lease is gone, or going: checkPlace decides
				return
			}
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// checkPlace runs before each try of a queued call whose waiter lease's
// keep-alives stopped (the client gave up on them): it renews the lease and keeps
// it alive again, or, if etcd has let it expire, forgets it and the place (its
// waiter key went with it): the next try joins the queue again. Its errors are
// the keep-alive's.
func (l *Locker) checkPlace(ctx context.Context, c *acquireCall) error {
	if c.wl == 0 || !c.kaLost.Load() {
		return nil
	}
	c.stopWaiting()
	from := l.clock.Now()
	if _, err := l.cli.KeepAliveOnce(ctx, c.wl); err != nil {
		if err = storeErr(err); errors.Is(err, fence.ErrNotHeld) {
			l.dropPlace(c)
			return nil
		}
		return fmt.Errorf("waiter lease: %w", err)
	}
	l.keepWaiting(c, c.wl, from)
	return nil
}

// dropPlace forgets the waiter lease of c, which etcd let expire, and with it
// c's place: its waiter key is gone.
func (l *Locker) dropPlace(c *acquireCall) {
	c.stopWaiting()
	c.wl, c.queued, c.marked = 0, 0, false
	clear(c.ahead)
}

// stopWaiting ends keepWaiting's keep-alives: at a grant, and when the call ends.
func (c *acquireCall) stopWaiting() {
	if c.stopKA != nil {
		c.stopKA()
		c.stopKA = nil
	}
}
