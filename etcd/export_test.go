package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// SetListPageMinForTest makes a held-only List read n names a page, so that a
// test can make it read several pages; it returns the function that restores it.
func SetListPageMinForTest(n int) (restore func()) {
	old := listPageMin
	listPageMin = n
	return func() { listPageMin = old }
}

// FirstAttemptForTest prepares the grant transaction of one try of a semaphore
// or shared acquire of name under request id rid, as a first attempt builds it
// (its look at the holders, then the transaction, in slot), and returns the
// function that sends it later, as a first attempt held up in flight is applied
// late, reporting whether it granted.
func (l *Locker) FirstAttemptForTest(ctx context.Context, name string, ttl time.Duration, limit int, shared bool, rid string, slot int) (send func() (bool, error), err error) {
	opts := []fence.AcquireOption{fence.WithRequestID(rid)}
	if shared {
		opts = append(opts, fence.WithShared())
	} else {
		opts = append(opts, fence.WithLimit(limit))
	}
	r := &driver.Request{Name: name, TTL: ttl, ID: driver.NewLeaseID(), Try: 1, Options: driver.ApplyOptions(opts...)}
	c := &acquireCall{hint: -1}
	kind := kindOf(r.Options)
	since, _, found, err := l.holderRetried(ctx, r, kind, c)
	if err != nil || found {
		return nil, fmt.Errorf("first attempt's look: found %v, %v", found, err)
	}
	g, err := l.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, err
	}
	return func() (bool, error) {
		resp, _, err := l.grantTxn(ctx, r, g.ID, c, kind, slot, since)
		if err != nil {
			return false, err
		}
		return resp.Succeeded, nil
	}, nil
}

// PooledStartForTest returns when the countdown of the spare etcd lease id, as
// its pool entry records it, last started, and whether id is in the pool.
func (l *Locker) PooledStartForTest(id int64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ls := range l.pool {
		for _, pl := range ls {
			if int64(pl.id) == id {
				return pl.renewed, true
			}
		}
	}
	return time.Time{}, false
}
