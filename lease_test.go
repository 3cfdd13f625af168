package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fakeLocker is a Locker whose Renew and Release answer what the test says, to
// unit-test the Lease type. It grants nothing: leases are made with NewLease.
type fakeLocker struct {
	mu         sync.Mutex
	renewErrs  []error // answers to successive Renew calls; nil entries and an empty list mean success
	releaseErr error
	renews     []time.Duration
	releases   int
}

func (f *fakeLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return nil, fmt.Errorf("fake: acquire %q: %w", name, fence.ErrUnavailable)
}

func (f *fakeLocker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renews = append(f.renews, ttl)
	if len(f.renewErrs) == 0 {
		return nil
	}
	err := f.renewErrs[0]
	f.renewErrs = f.renewErrs[1:]
	return err
}

func (f *fakeLocker) Release(ctx context.Context, name, leaseID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases++
	return f.releaseErr
}

func (f *fakeLocker) renewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.renews)
}

func (f *fakeLocker) failRenewals(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewErrs = append([]error(nil), errs...)
}

var errTransient = fmt.Errorf("fake: renew: %w", fence.ErrUnavailable)

func newTestLease(t *testing.T, ttl time.Duration, auto bool) (*fence.Lease, *fakeLocker, *inmem.ManualClock) {
	t.Helper()
	clock := inmem.NewManualClock(t0)
	fl := &fakeLocker{}
	l := driver.NewLease(driver.LeaseConfig{
		Locker: fl, Name: "job", Token: 7, ID: "lease-7", TTL: ttl, Clock: clock, AutoRenew: auto,
	})
	return l, fl, clock
}

// wantRenewalStopped fails t if the lease renews again in the minute after its
// end (what says which end).
func wantRenewalStopped(t *testing.T, fl *fakeLocker, clock *inmem.ManualClock, after string) {
	t.Helper()
	n := fl.renewCount()
	clock.Advance(time.Minute)
	if m := fl.renewCount(); m != n {
		t.Fatalf("Renew called %d more times after %s; want renewal stopped", m-n, after)
	}
}

func isDone(l *fence.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

func TestLease_Accessors(t *testing.T) {
	l, _, _ := newTestLease(t, 10*time.Second, false)
	if l.Name() != "job" || l.Token() != 7 || l.ID() != "lease-7" || l.TTL() != 10*time.Second {
		t.Fatalf("lease = %q #%d %q ttl %v; want \"job\" #7 \"lease-7\" ttl 10s", l.Name(), l.Token(), l.ID(), l.TTL())
	}
	if got, want := l.Fence(), (fence.Fence{Name: "job", Token: 7, LeaseID: "lease-7"}); got != want {
		t.Fatalf("Fence() = %+v; want %+v", got, want)
	}
	if got, want := l.Deadline(), t0.Add(10*time.Second); !got.Equal(want) {
		t.Fatalf("Deadline() = %v; want %v (start defaults to Clock.Now())", got, want)
	}
}

func TestLease_Done_ClosesAtDeadlineOnManualClock(t *testing.T) {
	l, fl, clock := newTestLease(t, 10*time.Second, false)
	clock.Advance(10*time.Second - time.Millisecond)
	if isDone(l) {
		t.Fatalf("Done closed 1ms before the deadline with %v", l.Err())
	}
	if l.Err() != nil || l.Context().Err() != nil {
		t.Fatalf("before the deadline: Err() = %v, Context().Err() = %v; want nil, nil", l.Err(), l.Context().Err())
	}
	clock.Advance(time.Millisecond)
	if !isDone(l) {
		t.Fatal("Done still open at the deadline")
	}
	if l.Err() != fence.ErrExpired || !errors.Is(l.Err(), fence.ErrNotHeld) {
		t.Fatalf("Err() = %v; want ErrExpired, matching ErrNotHeld", l.Err())
	}
	if n := fl.renewCount(); n != 0 {
		t.Fatalf("a lease without auto-renew called Renew %d times; want 0", n)
	}
}

func TestLease_Deadline_CountsFromStartBeforeGrant(t *testing.T) {
	clock := inmem.NewManualClock(t0)
	start := t0.Add(-2 * time.Second) // the acquire request left 2s ago
	l := driver.NewLease(driver.LeaseConfig{Locker: &fakeLocker{}, Name: "job", Token: 1, ID: "x", TTL: 10 * time.Second, Start: start, Clock: clock})
	if got, want := l.Deadline(), t0.Add(8*time.Second); !got.Equal(want) {
		t.Fatalf("Deadline() = %v; want start+TTL = %v", got, want)
	}
	clock.Advance(8 * time.Second)
	if !isDone(l) {
		t.Fatal("Done still open at start+TTL")
	}
}

func TestLease_Context_CancelledWithCause(t *testing.T) {
	l, _, clock := newTestLease(t, time.Second, false)
	ctx := l.Context()
	clock.Advance(time.Second)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Context not done after Done closed")
	}
	if ctx.Err() != context.Canceled {
		t.Fatalf("Context().Err() = %v; want context.Canceled", ctx.Err())
	}
	if got := context.Cause(ctx); got != fence.ErrExpired || got != l.Err() {
		t.Fatalf("context.Cause = %v; want ErrExpired (= Err() %v)", got, l.Err())
	}
}

func TestLease_Renew_ExtendsFromNow(t *testing.T) {
	l, fl, clock := newTestLease(t, 10*time.Second, false)
	clock.Advance(5 * time.Second)
	if err := l.Renew(context.Background(), 20*time.Second); err != nil {
		t.Fatalf("Renew = %v; want nil", err)
	}
	if len(fl.renews) != 1 || fl.renews[0] != 20*time.Second {
		t.Fatalf("backend Renew calls = %v; want one with 20s", fl.renews)
	}
	if got, want := l.Deadline(), t0.Add(25*time.Second); !got.Equal(want) {
		t.Fatalf("Deadline() after Renew(20s) at +5s = %v; want %v", got, want)
	}
	if l.TTL() != 20*time.Second {
		t.Fatalf("TTL() = %v; want 20s", l.TTL())
	}
	clock.Advance(20*time.Second - time.Millisecond) // past the original deadline
	if isDone(l) {
		t.Fatalf("Done closed at +25s-1ms after a renewal to +25s: %v", l.Err())
	}
	clock.Advance(time.Millisecond)
	if !isDone(l) || l.Err() != fence.ErrExpired {
		t.Fatalf("at the renewed deadline: done %v, Err() %v; want closed with ErrExpired", isDone(l), l.Err())
	}
}

func TestLease_Renew_BadTTL_ErrInvalidWithoutCallingBackend(t *testing.T) {
	l, fl, _ := newTestLease(t, 10*time.Second, false)
	for _, ttl := range []time.Duration{0, -time.Second, fence.MaxTTL + time.Millisecond} {
		if err := l.Renew(context.Background(), ttl); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Renew(%v) = %v; want ErrInvalid", ttl, err)
		}
	}
	if n := fl.renewCount(); n != 0 {
		t.Fatalf("backend Renew called %d times for bad TTLs; want 0", n)
	}
}

func TestLease_Renew_BackendErrNotHeld_ClosesDone(t *testing.T) {
	l, fl, _ := newTestLease(t, 10*time.Second, false)
	gone := fmt.Errorf("fake: renew %q: %w", "job", fence.ErrNotHeld)
	fl.failRenewals(gone)
	err := l.Renew(context.Background(), 10*time.Second)
	if !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew = %v; want the backend's ErrNotHeld", err)
	}
	if !isDone(l) {
		t.Fatal("Done open after the backend said the lease is gone")
	}
	if l.Err() != gone {
		t.Fatalf("Err() = %v; want the backend's error %v", l.Err(), gone)
	}
	// Later renewals fail at once, without asking the backend.
	if err := l.Renew(context.Background(), 10*time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew after loss = %v; want ErrNotHeld", err)
	}
	if n := fl.renewCount(); n != 1 {
		t.Fatalf("backend Renew called %d times; want 1 (no call after loss)", n)
	}
}

func TestLease_Renew_TransientError_KeepsDeadline(t *testing.T) {
	l, fl, clock := newTestLease(t, 10*time.Second, false)
	clock.Advance(5 * time.Second)
	fl.failRenewals(errTransient)
	if err := l.Renew(context.Background(), 30*time.Second); !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Renew = %v; want ErrUnavailable", err)
	}
	if isDone(l) {
		t.Fatalf("Done closed by a transient renewal error: %v", l.Err())
	}
	if got, want := l.Deadline(), t0.Add(10*time.Second); !got.Equal(want) {
		t.Fatalf("Deadline() after a failed Renew = %v; want unchanged %v", got, want)
	}
	if err := l.Renew(context.Background(), 30*time.Second); err != nil {
		t.Fatalf("retried Renew = %v; want nil", err)
	}
}

func TestLease_Release_ClosesDoneWithErrReleased(t *testing.T) {
	l, fl, _ := newTestLease(t, 10*time.Second, false)
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	if !isDone(l) || l.Err() != fence.ErrReleased {
		t.Fatalf("after Release: done %v, Err() %v; want closed with ErrReleased", isDone(l), l.Err())
	}
	if !errors.Is(l.Err(), fence.ErrNotHeld) {
		t.Fatalf("ErrReleased does not match ErrNotHeld")
	}
	if got := context.Cause(l.Context()); got != fence.ErrReleased {
		t.Fatalf("context.Cause = %v; want ErrReleased", got)
	}
	if fl.releases != 1 {
		t.Fatalf("backend Release called %d times; want 1", fl.releases)
	}
	if err := l.Renew(context.Background(), time.Second); !errors.Is(err, fence.ErrReleased) {
		t.Fatalf("Renew after Release = %v; want ErrReleased", err)
	}
}

func TestLease_Release_BackendErrNotHeld_StillClosesDone(t *testing.T) {
	l, fl, _ := newTestLease(t, 10*time.Second, false)
	fl.releaseErr = fmt.Errorf("fake: release: %w", fence.ErrNotHeld)
	if err := l.Release(context.Background()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release = %v; want the backend's ErrNotHeld", err)
	}
	if !isDone(l) || l.Err() != fence.ErrReleased {
		t.Fatalf("done %v, Err() %v; want closed with ErrReleased", isDone(l), l.Err())
	}
}

func TestLease_Release_TransientError_LeaseKeptForRetry(t *testing.T) {
	l, fl, _ := newTestLease(t, 10*time.Second, false)
	fl.releaseErr = errTransient
	if err := l.Release(context.Background()); !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Release = %v; want ErrUnavailable", err)
	}
	if isDone(l) {
		t.Fatalf("Done closed by a failed Release: %v", l.Err())
	}
	fl.releaseErr = nil
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("retried Release = %v; want nil", err)
	}
	if l.Err() != fence.ErrReleased {
		t.Fatalf("Err() = %v; want ErrReleased", l.Err())
	}
}

func TestLease_AutoRenew_KeepsLeaseAlive(t *testing.T) {
	l, fl, clock := newTestLease(t, 9*time.Second, true)
	for i := 0; i < 10; i++ {
		clock.Advance(3 * time.Second) // renewals every TTL/3
	}
	if isDone(l) {
		t.Fatalf("auto-renewed lease closed after 30s (TTL 9s): %v", l.Err())
	}
	if n := fl.renewCount(); n < 9 {
		t.Fatalf("backend Renew called %d times in 30s at TTL/3 = 3s; want at least 9", n)
	}
	if got, want := l.Deadline(), t0.Add(39*time.Second); !got.Equal(want) {
		t.Fatalf("Deadline() = %v; want %v (last renewal at +30s, plus 9s)", got, want)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantRenewalStopped(t, fl, clock, "Release")
}

func TestLease_AutoRenew_RetriesTransientErrorsUntilDeadline(t *testing.T) {
	l, fl, clock := newTestLease(t, 9*time.Second, true)
	errs := make([]error, 100)
	for i := range errs {
		errs[i] = errTransient
	}
	fl.failRenewals(errs...)
	clock.Advance(9*time.Second - time.Millisecond)
	if isDone(l) {
		t.Fatalf("Done closed before the deadline while renewals only failed transiently: %v", l.Err())
	}
	// First attempt at 3s, then retries every TTL/10 = 0.9s until 9s.
	if n := fl.renewCount(); n < 5 {
		t.Fatalf("backend Renew called %d times before the deadline; want retries (at least 5)", n)
	}
	clock.Advance(time.Millisecond)
	if !isDone(l) || l.Err() != fence.ErrExpired {
		t.Fatalf("at the deadline: done %v, Err() %v; want closed with ErrExpired", isDone(l), l.Err())
	}
	wantRenewalStopped(t, fl, clock, "the lease expired")
}

func TestLease_AutoRenew_RecoversAfterTransientErrors(t *testing.T) {
	l, fl, clock := newTestLease(t, 9*time.Second, true)
	fl.failRenewals(errTransient, errTransient) // the third attempt succeeds
	clock.Advance(20 * time.Second)
	if isDone(l) {
		t.Fatalf("lease lost although a retry succeeded before the deadline: %v", l.Err())
	}
}

func TestLease_AutoRenew_BackendErrNotHeld_ClosesDoneAtOnce(t *testing.T) {
	l, fl, clock := newTestLease(t, 9*time.Second, true)
	fl.failRenewals(fmt.Errorf("fake: renew: %w", fence.ErrNotHeld))
	clock.Advance(3 * time.Second)
	if !isDone(l) {
		t.Fatal("Done open after an auto-renewal was answered ErrNotHeld")
	}
	if !errors.Is(l.Err(), fence.ErrNotHeld) || l.Err() == fence.ErrExpired {
		t.Fatalf("Err() = %v; want the backend's ErrNotHeld, not a local expiry", l.Err())
	}
}

func TestLease_ConcurrentRenewRelease_RaceFree(t *testing.T) {
	l, _, clock := newTestLease(t, 10*time.Second, true)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(3)
		go func() { defer wg.Done(); _ = l.Renew(context.Background(), 10*time.Second) }()
		go func() { defer wg.Done(); _ = l.Deadline(); _ = l.Err(); _ = l.TTL() }()
		go func() { defer wg.Done(); clock.Advance(time.Second) }()
	}
	wg.Wait()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Err() != fence.ErrReleased {
		t.Fatalf("Err() = %v; want ErrReleased", l.Err())
	}
}
