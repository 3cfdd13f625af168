package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// sharedCases are TestLocker's checks of shared locks (fence.WithShared). Those
// named Shared_* run on a Locker whose Features declare Shared and skip
// otherwise, except Shared_Undeclared_ErrNotImplemented, which runs only where
// shared locks are not declared.
func (s *lockerSuite) sharedCases() []suiteCase[fence.Locker] {
	return []suiteCase[fence.Locker]{
		{"Shared_ManyHolders_ExclusiveHeld_TokensIncrease", s.sharedMany},
		{"Shared_ExclusiveWaiter_GrantedWhenLastLeaves", s.sharedExclusiveWaits},
		{"Shared_HeldWhileExclusive_WokenByRelease", s.sharedWhileExclusive},
		{"Shared_WriterPreferred_NewSharedHeldWhileExclusiveWaits", s.sharedWriterPreferred},
		{"Shared_WriterNotStarvedByStreamOfReaders", s.sharedNotStarved},
		{"Shared_WriterWithShortTTL_PreferredWhileItWaits", s.sharedShortTTLWriter},
		{"Shared_ExclusiveWaiterGivesUp_SharedAgainWithinItsTTL", s.sharedWaiterGivesUp},
		{"Shared_OwnerOnlyAndExpiry", s.sharedOwnerExpiry},
		{"Shared_Inspector_HoldersInTokenOrder", s.sharedInspector},
		{"Shared_Revoker_EndsEveryLease", s.sharedRevoker},
		{"Shared_MixedWithLimit_LimitError", s.sharedMixedLimit},
		{"Shared_Undeclared_ErrNotImplemented", s.sharedUndeclared},
	}
}

// needShared skips t unless l declares Features.Shared.
func needShared(t *testing.T, l fence.Locker) {
	t.Helper()
	if !fence.FeaturesOf(l).Shared {
		t.Skipf("%T does not declare Features.Shared", l)
	}
}

// acquireShared takes n shared leases on name (longTTL each) with try-once
// acquires, checks that their tokens increase, and returns them.
func acquireShared(t *testing.T, l fence.Locker, name string, n int) []*fence.Lease {
	t.Helper()
	leases := make([]*fence.Lease, n)
	for i := range leases {
		lease, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithShared())
		if err != nil {
			t.Fatalf("TryAcquire(WithShared) with %d shared leases live = %v; want a shared lease", i, err)
		}
		releaseAtCleanup(t, lease)
		if lease.Slot() != 0 {
			t.Fatalf("shared lease has slot %d; want 0", lease.Slot())
		}
		if i > 0 && lease.Token() <= leases[i-1].Token() {
			t.Fatalf("shared lease %d has token %d after %d; want strictly increasing tokens (P1)", i+1, lease.Token(), leases[i-1].Token())
		}
		leases[i] = lease
	}
	return leases
}

// releaseAll releases leases, failing t on an error.
func releaseAll(t *testing.T, leases ...*fence.Lease) {
	t.Helper()
	ctx := testContext(t)
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release of token %d = %v", lease.Token(), err)
		}
	}
}

// wantSharedAfter fails unless a shared lease on name is granted at once, with
// a token above prev's (what says what prev is); it returns it.
func wantSharedAfter(t *testing.T, l fence.Locker, name string, prev *fence.Lease, what string) *fence.Lease {
	t.Helper()
	q := acquireShared(t, l, name, 1)[0]
	if q.Token() <= prev.Token() {
		t.Fatalf("shared lease after %s has token %d; want above %d", what, q.Token(), prev.Token())
	}
	return q
}

func (s *lockerSuite) sharedMany(t *testing.T, l fence.Locker) {
	needShared(t, l)
	const n = 8
	name := uniqueName(t, "")
	p := acquireShared(t, l, name, n)
	wantHeld(t, l, name, fmt.Sprintf("an exclusive acquire with %d shared leases live", n))
	releaseAll(t, p...)
	x := acquire(t, l, name, longTTL)
	if x.Token() <= p[n-1].Token() {
		t.Fatalf("exclusive lease after shared ones has token %d; want above %d", x.Token(), p[n-1].Token())
	}
	wantHeld(t, l, name, "a shared acquire while an exclusive lease is live", fence.WithShared())
	releaseAll(t, x)
	wantSharedAfter(t, l, name, x, "an exclusive one")
}

func (s *lockerSuite) sharedExclusiveWaits(t *testing.T, l fence.Locker) {
	needShared(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	p := acquireShared(t, l, name, 3)
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	s.settle(t, ch, "exclusive acquire waiting for 3 shared leases")
	releaseAll(t, p[0], p[2])
	s.settle(t, ch, "exclusive acquire waiting for the last shared lease")
	released := time.Now()
	releaseAll(t, p[1])
	wantGranted(t, ch, "the last shared lease's Release", released, p...)
}

func (s *lockerSuite) sharedWhileExclusive(t *testing.T, l fence.Locker) {
	needShared(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	x := acquire(t, l, name, longTTL)
	wantHeld(t, l, name, "a shared acquire while an exclusive lease is live", fence.WithShared())
	ch := goAcquire(ctx, l, name, longTTL, fence.WithShared(), fence.WithWait(longWait))
	s.settle(t, ch, "shared acquire waiting for an exclusive lease")
	released := time.Now()
	releaseAll(t, x)
	r := wantGranted(t, ch, "the exclusive lease's Release", released, x)
	wantSharedAfter(t, l, name, r, "the shared waiter's, which admits others")
}

func (s *lockerSuite) sharedWriterPreferred(t *testing.T, l fence.Locker) {
	needShared(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquireShared(t, l, name, 1)[0]
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	s.settle(t, ch, "exclusive acquire waiting for a shared lease")
	wantHeld(t, l, name, "a new shared acquire while an exclusive acquire waits (writer preference)", fence.WithShared())
	released := time.Now()
	releaseAll(t, a)
	w := wantGranted(t, ch, "the shared lease's Release", released, a)
	releaseAll(t, w)
	wantSharedAfter(t, l, name, w, "the writer's, which no longer holds them off")
}

// sharedShortTTLWriter checks that a waiting exclusive acquire whose TTL is
// shorter than the shared holder's time left holds new shared acquires off for
// as long as it waits, not only for its TTL: the backend renews its record of
// the waiter (driver.Decide's rules: each try extends it) while it waits.
func (s *lockerSuite) sharedShortTTLWriter(t *testing.T, l fence.Locker) {
	needShared(t, l)
	ctx := testContext(t)
	// Not the short TTL itself: the backend's renewal of its record, a timer
	// within the TTL, must survive scheduling stalls of a loaded machine.
	ttl := max(2*s.cfg.shortTTL, time.Second)
	name := uniqueName(t, "")
	a := acquireShared(t, l, name, 1)[0]
	start := time.Now()
	ch := goAcquire(ctx, l, name, ttl, fence.WithWait(longWait))
	s.settle(t, ch, "exclusive acquire waiting for a shared lease")
	select { // past the waiter's TTL, by the settle's pause once more
	case r := <-ch:
		t.Fatalf("exclusive acquire waiting for a live shared lease returned %v", r.err)
	case <-time.After(time.Until(start.Add(ttl + 2*s.cfg.shortTTL))):
	}
	wantHeld(t, l, name, fmt.Sprintf("a new shared acquire %v after an exclusive acquire of TTL %v started waiting (writer preference lasts while it waits)", time.Since(start).Round(time.Millisecond), ttl), fence.WithShared())
	released := time.Now()
	releaseAll(t, a)
	wantGranted(t, ch, "the shared lease's Release", released, a)
}

// sharedNotStarved runs readers that each hold a shared lease and take their
// next one before releasing it (hand over hand), so the name is never free of
// shared holders unless new shared acquires are held off. A writer that waits
// meanwhile must get the lock promptly: the stream would go on for longer.
func (s *lockerSuite) sharedNotStarved(t *testing.T, l fence.Locker) {
	needShared(t, l)
	const (
		readers = 3
		hold    = 10 * time.Millisecond
		stream  = 2 * promptly // how long the readers would go on
	)
	ctx := testContext(t)
	name := uniqueName(t, "")
	first := acquireShared(t, l, name, readers)
	var (
		writing  atomic.Bool  // the writer holds the lock
		overlaps atomic.Int32 // shared grants seen while it did
		wg       sync.WaitGroup
		errs     = make(chan error, readers)
		stop     = make(chan struct{})
		end      = time.Now().Add(stream)
	)
	for _, lease := range first {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < int(stream/hold); round++ {
				select {
				case <-time.After(hold):
				case <-stop:
				}
				next, err := fence.TryAcquire(ctx, l, name, longTTL, fence.WithShared())
				switch {
				case err == nil && writing.Load():
					overlaps.Add(1)
				case err != nil && !errors.Is(err, fence.ErrNotAcquired):
					errs <- fmt.Errorf("reader's TryAcquire: %w", err)
				}
				if err := lease.Release(ctx); err != nil {
					errs <- fmt.Errorf("reader's Release: %w", err)
				}
				if next == nil || time.Now().After(end) {
					if next != nil {
						_ = next.Release(ctx)
					}
					return // held off by the writer (or the stream is over)
				}
				lease = next
			}
			_ = lease.Release(ctx)
		}()
	}
	start := time.Now()
	w, err := l.Acquire(ctx, name, longTTL, fence.WithWait(longWait))
	got := time.Since(start)
	if err == nil {
		writing.Store(true)
		releaseAtCleanup(t, w)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err != nil {
		t.Fatalf("writer's Acquire with wait %v during a stream of readers = %v; want the lock", longWait, err)
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d shared leases granted while the writer held the lock (P6)", n)
	}
	if got > promptly {
		t.Fatalf("writer waited %v during a stream of readers (each holding %v, taking its next lease before releasing); want the lock within %v: new shared acquires must be held off while it waits", got.Round(time.Millisecond), hold, promptly)
	}
	for _, lease := range first {
		if w.Token() <= lease.Token() {
			t.Fatalf("writer's token %d; want above the readers' (%d)", w.Token(), lease.Token())
		}
	}
}

func (s *lockerSuite) sharedWaiterGivesUp(t *testing.T, l fence.Locker) {
	needShared(t, l)
	name := uniqueName(t, "")
	a := acquireShared(t, l, name, 1)[0]
	ttl := s.cfg.shortTTL // the waiter holds shared acquires off for at most this
	wctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	ch := goAcquire(wctx, l, name, ttl, fence.WithWait(fence.WaitForever))
	s.settle(t, ch, "exclusive acquire waiting for a shared lease")
	cancelled := time.Now()
	cancel()
	wantGaveUp(t, ch, context.Canceled, "was cancelled", cancelled)
	b, err := l.Acquire(testContext(t), name, longTTL, fence.WithShared(), fence.WithWait(longWait))
	got := time.Since(cancelled)
	if err != nil {
		t.Fatalf("shared Acquire with wait after the exclusive waiter gave up = %v; want a shared lease", err)
	}
	releaseAtCleanup(t, b)
	if got > ttl+promptly {
		t.Fatalf("shared Acquire granted %v after the exclusive waiter (TTL %v) gave up; want within its TTL (and %v)", got.Round(time.Millisecond), ttl, promptly)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("second shared lease has token %d; want above %d", b.Token(), a.Token())
	}
}

func (s *lockerSuite) sharedOwnerExpiry(t *testing.T, l fence.Locker) {
	needShared(t, l)
	ctx := testContext(t)
	ttl := s.cfg.shortTTL
	name := uniqueName(t, "")
	a := acquireShared(t, l, name, 1)[0]
	start := time.Now() // the store's expiry of b is at least start+ttl
	b := acquire(t, l, name, ttl, fence.WithShared())
	forged := driver.NewLeaseID()
	wantErrIs(t, "Renew of a shared lease with a forged lease id", l.Renew(ctx, name, forged, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of a shared lease with a forged lease id", l.Release(ctx, name, forged), fence.ErrNotHeld)
	if err := l.Release(ctx, name, a.ID()); err != nil {
		t.Fatalf("Release of one shared lease = %v; want nil", err)
	}
	wantErrIs(t, "Renew of the released shared lease", l.Renew(ctx, name, a.ID(), longTTL), fence.ErrNotHeld)
	// b alone holds the name now, until it expires.
	if lease, err := fence.TryAcquire(ctx, l, name, longTTL); err == nil {
		releaseAtCleanup(t, lease)
		if el := time.Since(start); el < ttl {
			t.Fatalf("exclusive lock granted %v after a %v shared lease was requested, before it expired (P6)", el, ttl)
		}
		t.Skipf("inconclusive: the exclusive try ran after %v, past the %v TTL (slow machine)", time.Since(start), ttl)
	}
	x, err := l.Acquire(ctx, name, longTTL, fence.WithWait(longWait))
	got := time.Since(start)
	if err != nil {
		t.Fatalf("exclusive Acquire with wait on a %v shared lease = %v; want the lock once it expires", ttl, err)
	}
	releaseAtCleanup(t, x)
	if got < ttl {
		t.Fatalf("exclusive lock granted %v after a %v shared lease was requested, before it expired (P6)", got, ttl)
	}
	if x.Token() <= b.Token() {
		t.Fatalf("exclusive lease after the shared ones has token %d; want above %d", x.Token(), b.Token())
	}
	wantErrIs(t, "Renew of the expired shared lease", l.Renew(ctx, name, b.ID(), longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of the expired shared lease", l.Release(ctx, name, b.ID()), fence.ErrNotHeld)
	wantDone(t, b, promptly, "expired shared lease")
	wantErrIs(t, "Err() of the expired shared lease", b.Err(), fence.ErrNotHeld)
}

func (s *lockerSuite) sharedInspector(t *testing.T, l fence.Locker) {
	needShared(t, l)
	in := probe[fence.Inspector](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	owners := map[*fence.Lease]string{}
	var p []*fence.Lease
	for _, owner := range []string{"reader-a", "reader-b", ""} {
		lease := acquire(t, l, name, longTTL, fence.WithShared(), fence.WithOwner(owner))
		owners[lease] = owner
		p = append(p, lease)
	}
	info, err := in.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	wantHolders(t, info, p, owners, 0, true)
	releaseAll(t, p[1])
	if info, err = in.Inspect(ctx, name); err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	wantHolders(t, info, []*fence.Lease{p[0], p[2]}, owners, 0, true)
	releaseAll(t, p[0], p[2])
	if info, err = in.Inspect(ctx, name); err != nil || info.Held || info.Shared || len(info.Holders) != 0 {
		t.Fatalf("Inspect after every shared lease's release = %+v, %v; want not Held, not Shared, no Holders", info, err)
	}
}

func (s *lockerSuite) sharedRevoker(t *testing.T, l fence.Locker) {
	needShared(t, l)
	name := uniqueName(t, "")
	p := acquireShared(t, l, name, 3)
	s.revokeEndsEvery(t, l, name, p) // an exclusive waiter: every shared lease ended
}

func (s *lockerSuite) sharedMixedLimit(t *testing.T, l fence.Locker) {
	needShared(t, l)
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquireShared(t, l, name, 1)[0]
	_, err := fence.TryAcquire(ctx, l, name, longTTL, fence.WithLimit(semN))
	wantLimitError(t, fmt.Sprintf("TryAcquire(WithLimit(%d)) while a shared lease is live", semN), err, name, semN, 1)
	releaseAll(t, a)
	acquire(t, l, name, longTTL, fence.WithLimit(semN))
	_, err = fence.TryAcquire(ctx, l, name, longTTL, fence.WithShared())
	wantLimitError(t, fmt.Sprintf("TryAcquire(WithShared) while a permit of limit %d is live", semN), err, name, 1, semN)
}

func (s *lockerSuite) sharedUndeclared(t *testing.T, l fence.Locker) {
	if fence.FeaturesOf(l).Shared {
		t.Skipf("%T declares Features.Shared", l)
	}
	wantNotImplemented(t, l, "WithShared", fence.WithShared())
}
