package etcd_test

import (
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

// An acquire with a request id whose grant commits but whose answer is lost,
// and that nobody retries (a killed client, one that gave up): the failed
// try's cleanup finds the grant unclaimed and ends it at once, so the name is
// free for others without waiting the grant's TTL; a retry that comes after
// the cleanup gets a fresh grant, never the ended one. A lock, a semaphore
// permit and a shared lease alike.
func TestLocker_RequestID_LostAnswerNobodyClaimed_FreedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []fence.AcquireOption
		limit int // grants the name takes at once
	}{
		{"lock", nil, 1},
		{"semaphore", []fence.AcquireOption{fence.WithLimit(2)}, 2},
		{"shared", []fence.AcquireOption{fence.WithShared()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			name := uniq("unclaimed-" + tc.name)
			committed, proceed := make(chan struct{}), make(chan struct{})
			first := etcd.NewLocker(lostAnswerClient(t, name, committed, proceed), nil)
			t.Cleanup(func() { first.Close() })
			rid := "unclaimed-" + name
			opts := append([]fence.AcquireOption{fence.WithRequestID(rid)}, tc.opts...)

			firstErr := make(chan error, 1)
			go func() {
				_, err := first.Acquire(ctx, name, 20*time.Second, opts...)
				firstErr <- err
			}()
			<-committed
			close(proceed)
			if err := <-firstErr; err == nil {
				t.Fatal("the first attempt, whose answer was lost, returned a lease; want its error")
			}

			// The exclusive kind (a lock or a write lock over a shared lease's
			// name) shows whether every grant of the name has ended.
			other := etcd.NewLocker(client(t), nil)
			t.Cleanup(func() { other.Close() })
			var kind []fence.AcquireOption
			if tc.limit > 1 {
				kind = tc.opts
			}
			var leases []*fence.Lease
			for range tc.limit {
				l, err := other.Acquire(ctx, name, 10*time.Second, kind...)
				if err != nil {
					t.Fatalf("another Locker's Acquire after the lost answer = %v; want a grant at once: the unclaimed grant was left to expire", err)
				}
				leases = append(leases, l)
			}
			for _, l := range leases {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}

			retry := etcd.NewLocker(client(t), nil)
			t.Cleanup(func() { retry.Close() })
			lease, err := retry.Acquire(ctx, name, 10*time.Second, opts...)
			if err != nil {
				t.Fatalf("the retry's Acquire after the cleanup = %v; want a fresh grant", err)
			}
			if err := lease.Renew(ctx, 10*time.Second); err != nil {
				t.Fatalf("Renew of the retry's grant = %v; want nil", err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The failed try's cleanup and a retry's claim on another Locker, close
// together, in either order: etcd serializes them, so whichever the retry gets (the claimed grant, or a
// fresh one after the cleanup) stays its own: renewable, and the lock is
// nobody else's while it lasts.
func TestLocker_RequestID_CleanupRacesTheRetry_RetryKeepsItsGrant(t *testing.T) {
	ctx := testCtx(t)
	var claimed, fresh int // the rounds where the claim came first, and the others
	defer func() { t.Logf("the claim came first in %d rounds, the cleanup in %d", claimed, fresh) }()
	for i := range 10 {
		name := uniq("cleanup-race")
		committed, proceed := make(chan struct{}), make(chan struct{})
		first := etcd.NewLocker(lostAnswerClient(t, name, committed, proceed), nil)
		retry := etcd.NewLocker(client(t), nil)
		other := etcd.NewLocker(client(t), nil)
		opts := []fence.AcquireOption{fence.WithRequestID("cleanup-race-" + name)}
		firstErr := make(chan error, 1)
		go func() {
			_, err := first.Acquire(ctx, name, 20*time.Second, opts...)
			firstErr <- err
		}()
		<-committed
		firstGrant, err := other.Inspect(ctx, name)
		if err != nil || !firstGrant.Held {
			t.Fatalf("round %d: Inspect after the first attempt committed = %+v, %v; want it held", i, firstGrant, err)
		}
		retried := make(chan *fence.Lease, 1)
		go func() {
			lease, err := retry.Acquire(ctx, name, 20*time.Second, append(opts, fence.WithWait(5*time.Second))...)
			if err != nil {
				t.Errorf("round %d: the retry's Acquire = %v; want a grant", i, err)
			}
			retried <- lease
		}()
		// The first attempt fails 0 to 9 ms after the retry starts: the early
		// rounds' cleanup tends to come first, the late rounds' claim.
		time.Sleep(time.Duration(i) * time.Millisecond)
		close(proceed)
		if err := <-firstErr; err == nil {
			t.Fatalf("round %d: the first attempt, whose answer was lost, returned a lease; want its error", i)
		}
		lease := <-retried
		if lease == nil {
			t.FailNow()
		}
		if err := lease.Renew(ctx, 20*time.Second); err != nil {
			t.Fatalf("round %d: Renew of the retry's grant (token %d) after the cleanup = %v; want nil", i, lease.Token(), err)
		}
		if lease.Token() == firstGrant.Token {
			claimed++
		} else {
			fresh++
		}
		if l2, err := other.Acquire(ctx, name, 10*time.Second); err == nil {
			t.Fatalf("round %d: another Locker was granted token %d while the retry holds token %d", i, l2.Token(), lease.Token())
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first.Close()
		retry.Close()
		other.Close()
	}
}
