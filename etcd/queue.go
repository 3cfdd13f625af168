package etcd

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence/driver"
)

// FIFO waiting (Options.FIFO; docs/etcd.md, "FIFO waiting"). A waiting acquire
// keeps one waiter key (lock/NAME\x00w<ID>, the key of exclusive-waiter records)
// under the etcd lease it will hold the grant with, from its first try that found
// the name held to its grant, which deletes it, or to its end, which deletes it at
// once. Its create revision is the waiter's place in the queue: a grant compares
// that no waiter key has a lower one (an acquire with no key: that there is no
// waiter key at all), so a new arrival, or a waiter woken before its turn, cannot
// be granted past an earlier waiter. A keep-alive keeps the etcd lease alive while
// the call waits, so a waiter that sleeps long keeps its place, and one whose
// process dies leaves the queue when etcd expires that lease.

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
		els = append(els, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.waiter), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(c.waiter, "", clientv3.WithLease(el))}, nil))
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
	return head == 0 || head == c.queued
}

// keepWaiting keeps the etcd lease el of a queued call alive until stopWaiting,
// with the client's keep-alives (not Raft writes): the call's tries may be far
// apart, and its waiter key must outlive them.
func (l *Locker) keepWaiting(c *acquireCall, el clientv3.LeaseID) {
	if c.stopKA != nil || el == 0 {
		return
	}
	ctx, cancel := context.WithCancel(l.wctx)
	ch, err := l.cli.KeepAlive(ctx, el)
	if err != nil {
		cancel()
		return // the tries' keep-alives still refresh it
	}
	go func() {
		for range ch {
		}
	}()
	c.stopKA = cancel
}

// stopWaiting ends keepWaiting's keep-alives: at a grant (the holder's renewals
// keep the lease from then on), when el is revoked, and when the call ends.
func (c *acquireCall) stopWaiting() {
	if c.stopKA != nil {
		c.stopKA()
		c.stopKA = nil
	}
}
