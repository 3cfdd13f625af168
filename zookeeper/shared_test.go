package zookeeper_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/zookeeper"
)

// Shared leases hold together; an exclusive acquire waits for all of them, and
// while it waits a new shared acquire finds the lock held (writer preference: its
// node queues behind the exclusive waiter's). Tokens rise across kinds in grant
// order.
func TestShared_ExclusiveWaiter_NotStarved(t *testing.T) {
	l, w := open(t, nil), open(t, nil)
	ctx := testCtx(t)
	name := "shared-" + driver.NewLeaseID()[:8]
	r1 := acquireKind(t, ctx, l, name, time.Minute, fence.WithShared(), fence.WithOwner("r1"))
	r2 := acquireKind(t, ctx, l, name, time.Minute, fence.WithShared(), fence.WithOwner("r2"))
	if r2.Token() <= r1.Token() || r1.Slot() != 0 || r2.Slot() != 0 {
		t.Fatalf("shared leases: tokens %d, %d, slots %d, %d; want rising tokens, slot 0", r1.Token(), r2.Token(), r1.Slot(), r2.Slot())
	}
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || !info.Shared || info.Limit != 0 || len(info.Holders) != 2 || info.Holders[0].Token != r1.Token() || info.Holders[1].Owner != "r2" {
		t.Fatalf("Inspect = %+v; want shared, two holders in token order", info)
	}
	if _, err := l.Acquire(ctx, name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("exclusive try while shared = %v; want ErrNotAcquired", err)
	}
	// The try left nothing behind: shared acquires still go.
	r3 := acquireKind(t, ctx, l, name, time.Minute, fence.WithShared())
	writer := later(func() (*fence.Lease, error) {
		return w.Acquire(ctx, name, time.Minute, fence.WithWait(30*time.Second))
	})
	wantNothingYet(t, writer, "exclusive waiter behind shared holders")
	if _, err := l.Acquire(ctx, name, time.Minute, fence.WithShared()); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("shared try while an exclusive acquire waits = %v; want ErrNotAcquired", err)
	}
	reader := later(func() (*fence.Lease, error) {
		return l.Acquire(ctx, name, time.Minute, fence.WithShared(), fence.WithWait(30*time.Second))
	})
	for _, r := range []*fence.Lease{r1, r2, r3} {
		wantNothingYet(t, writer, "exclusive waiter while shared leases are left")
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	x := wantGranted(t, writer, "exclusive waiter after the shared leases' release")
	if x.Token() <= r3.Token() {
		t.Fatalf("exclusive token = %d; want > %d", x.Token(), r3.Token())
	}
	wantNothingYet(t, reader, "shared waiter behind the exclusive holder")
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r4 := wantGranted(t, reader, "shared waiter after the exclusive release")
	if r4.Token() <= x.Token() {
		t.Fatalf("shared token after the exclusive lease = %d; want > %d", r4.Token(), x.Token())
	}
	r4.Release(ctx)
}

// Shared waiters behind an exclusive holder are all granted when it releases
// (each watches it), and an exclusive waiter behind them waits for them all.
func TestShared_WaitersBehindExclusive_AllGrantedTogether(t *testing.T) {
	l, w := open(t, nil), open(t, nil)
	ctx := testCtx(t)
	name := "shared-batch-" + driver.NewLeaseID()[:8]
	x := acquireKind(t, ctx, l, name, time.Minute)
	readers := make([]<-chan result, 3)
	for i := range readers {
		readers[i] = later(func() (*fence.Lease, error) {
			return w.Acquire(ctx, name, time.Minute, fence.WithShared(), fence.WithWait(30*time.Second))
		})
	}
	wantNothingYet(t, readers[0], "shared waiter behind an exclusive holder")
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range readers {
		r := wantGranted(t, c, "shared waiter")
		if r.Token() <= x.Token() {
			t.Fatalf("shared waiter %d token = %d; want > %d", i, r.Token(), x.Token())
		}
		defer r.Release(ctx)
	}
}

// A shared lease whose TTL passed (its session alive, so only the TTL ends it) is
// taken over by the exclusive waiter behind it, by the leader's clock.
func TestShared_ExpiredSharedLease_ExclusiveWaiterTakesOver(t *testing.T) {
	root := freshRoot("shared-expiry")
	l, w := open(t, &zookeeper.Options{Root: root}), open(t, &zookeeper.Options{Root: root})
	ctx := testCtx(t)
	name := "shared"
	short := acquireKind(t, ctx, l, name, 300*time.Millisecond, fence.WithShared())
	long := acquireKind(t, ctx, l, name, 600*time.Millisecond, fence.WithShared())
	x, err := w.Acquire(ctx, name, time.Minute, fence.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("exclusive acquire behind expiring shared leases = %v; want a lease", err)
	}
	defer x.Release(ctx)
	if x.Token() <= long.Token() {
		t.Fatalf("token = %d; want > %d", x.Token(), long.Token())
	}
	for _, r := range []*fence.Lease{short, long} {
		if err := r.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Renew of a taken-over shared lease = %v; want ErrNotHeld", err)
		}
	}
}

// Under contention from two sessions, readers and writers never overlap a writer,
// and every grant's token is above the tokens of the grants that ended before its
// acquire began (shared grants made together may return in any order).
func TestShared_Contention_WriterAlone(t *testing.T) {
	const workers = 6
	var (
		readers, writers int
		ended            fence.Token // the highest token of a lease that ended
		before           [workers]fence.Token
	)
	shared := func(i int) bool { return i%3 != 0 }
	contend(t, "shared-contention-"+driver.NewLeaseID()[:8], workers, 6,
		func(i int) []fence.AcquireOption {
			before[i] = ended // as the acquire begins
			if shared(i) {
				return []fence.AcquireOption{fence.WithShared()}
			}
			return nil
		},
		func(i int, lease *fence.Lease) error {
			if writers > 0 || (!shared(i) && readers > 0) || lease.Token() <= before[i] {
				return fmt.Errorf("grant (shared %v, token %d) with %d readers, %d writers, token %d ended before its acquire: want a writer alone and a rising token", shared(i), lease.Token(), readers, writers, before[i])
			}
			if shared(i) {
				readers++
			} else {
				writers++
			}
			return nil
		},
		func(i int, lease *fence.Lease) {
			if shared(i) {
				readers--
			} else {
				writers--
			}
			ended = max(ended, lease.Token())
		})
}
