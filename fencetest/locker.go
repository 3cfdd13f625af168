package fencetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// TestLocker runs the Locker conformance suite against the lockers newLocker
// returns, one per subtest. It checks token order (P1) under 16 concurrent
// goroutines, independence of names, ownership (P5: only the lease id renews or
// releases), exclusivity until expiry and grant after it (P6), renewal, release,
// waiting woken by release and bounded by the wait and by the context, lease Done
// at expiry and with auto-renewal, and rejection of bad names, TTLs and lease ids.
// If the locker implements fence.Inspector, fence.Healer, fence.Revoker or
// fence.Watcher, those are checked too; a Healer must raise only the healed
// name's tokens, and refuse with a *fence.HealBoundError a seen more than
// fence.MaxHealAhead above the name's last token (P9). Package election is run on it as well:
// at most one leader per epoch, epochs increasing and fencing off resigned
// leaders, Resign handing over at once, cancelled campaigns leaving nothing
// behind, and (on a Watcher) observers seeing every change of leader in order.
//
// If fence.FeaturesOf(locker) declares Semaphores, the Semaphore_* subtests check
// fence.WithLimit: at most N live permits under 16 goroutines, each in its own
// slot, the lowest free slot taken, one counter for every slot and for locks,
// a *fence.LimitError for a disagreeing limit while permits are live, ownership,
// renewal, expiry, waiting and Done per permit, Inspect's Holders and Revoke of
// every permit. If it declares Shared, the Shared_* subtests check
// fence.WithShared: many shared holders or one exclusive, waits woken by
// release, writer preference (a stream of readers cannot starve a writer, and a
// writer that gives up stops holding readers off within its TTL), expiry,
// ownership, Inspect and Revoke. A kind a locker does not declare must be
// refused with fence.ErrNotImplemented; WithLimit(1) is a lock everywhere.
func TestLocker(t *testing.T, newLocker func(t *testing.T) fence.Locker, opts ...Option) {
	t.Helper()
	s := &lockerSuite{cfg: newConfig(opts), newLocker: newLocker}
	cases := []suiteCase[fence.Locker]{
		{"Acquire_ReturnsWellFormedLease", s.acquireWellFormed},
		{"LeaseIDs_DistinctAndAtLeast128Bits", s.leaseIDsDistinct},
		{"Acquire_HeldLock_ErrNotAcquired", s.acquireHeld},
		{"AcquireErrors_WordedAlikeOnEveryBackend", s.acquireErrorsWording},
		{"Token_IncreasesUnder16Goroutines", s.tokenUnder16Goroutines},
		{"Token_IncreasesAfterReleaseAndExpiry", s.tokenAfterReleaseAndExpiry},
		{"Names_Independent", s.namesIndependent},
		{"Owner_OnlyHolderRenewsOrReleases", s.ownerOnly},
		{"Expiry_NotGrantedBeforeGrantedAfter", s.expiryExclusive},
		{"Renew_ExtendsLease", s.renewExtends},
		{"Release_ThenRenewAndReleaseGiveErrNotHeld", s.releaseThenRenew},
		{"Release_Retried_NeverReleasesNextHolder", s.releaseRetried},
		{"ExpiredLease_CannotRenewOrReleaseNextHolder", s.expiredCannotTouchNext},
		{"Wait_WokenByRelease", s.waitWokenByRelease},
		{"Wait_BoundedByWait", s.waitBounded},
		{"Wait_ContextCancelReturnsPromptly", s.waitCtxCancel},
		{"Wait_ContextDeadlineReturnsPromptly", s.waitCtxDeadline},
		{"Done_ClosesAtExpiryWithoutRenewal", s.doneAtExpiry},
		{"AutoRenew_KeepsLeaseAcrossSeveralTTLs", s.autoRenew},
		{"BadNames_Rejected", s.badNames},
		{"Names_EdgeValuesAccepted", s.edgeNames},
		{"BadTTLs_Rejected", s.badTTLs},
		{"BadLeaseIDs_Rejected", s.badLeaseIDs},
		{"Inspector_ReportsState", s.inspector},
		{"Inspector_ListHeldByDefault_AllListsFree_LimitCountsHeld", s.inspectorList},
		{"Healer_NextTokenAboveSeen", s.healer},
		{"Healer_OneNameDoesNotMoveAnothersToken", s.healerOneName},
		{"Healer_BeyondMaxHealAhead_Refused", s.healerBound},
		{"Owner_ReportedWhileHeldNeverTheLeaseID", s.owner},
		{"BadOwners_Rejected", s.badOwners},
		{"Revoker_EndsLeaseWakesWaiterNextTokenHigher", s.revoker},
		{"Watcher_YieldsEveryChangeInOrder", s.watcherChanges},
		{"Watcher_SlowReceiverGetsLatest", s.watcherFallsBehind},
		{"Watcher_BadNameAndCancelEnd", s.watcherEnds},
		{"Election_OneLeaderPerEpoch_EpochsIncrease", s.electionOneLeader},
		{"Election_ObserversSeeEveryChangeInOrder", s.electionObservers},
		{"Election_ResignHandsOffAtOnce", s.electionResignHandoff},
		{"Election_CancelledCampaignLeavesNothing", s.electionCancelledCampaign},
	}
	cases = append(cases, s.semaphoreCases()...)
	cases = append(cases, s.requestCases()...)
	runCases(t, "Locker", newLocker, append(cases, s.sharedCases()...))
}

type lockerSuite struct {
	cfg       config
	newLocker func(*testing.T) fence.Locker
}

// acquire takes name for ttl or fails the test, and releases the lease at cleanup
// (which also stops auto-renewal).
func acquire(t *testing.T, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(testContext(t), name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v) = %v; want a lease", name, ttl, err)
	}
	if lease == nil {
		t.Fatalf("Acquire(%q, %v) returned a nil lease and a nil error", name, ttl)
	}
	releaseAtCleanup(t, lease)
	return lease
}

func releaseAtCleanup(t *testing.T, lease *fence.Lease) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lease.Release(ctx) // ErrNotHeld is expected for leases a test ended
	})
}

// wantHeld fails unless a try-once Acquire of name (with opts) reports the lock
// held.
func wantHeld(t *testing.T, l fence.Locker, name, why string, opts ...fence.AcquireOption) {
	t.Helper()
	lease, err := fence.TryAcquire(testContext(t), l, name, longTTL, opts...)
	if err == nil {
		releaseAtCleanup(t, lease)
		t.Fatalf("%s: TryAcquire(%q) granted token %d; want ErrNotAcquired, the lock should be held", why, name, lease.Token())
	}
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire(%q) = %v; want an error matching ErrNotAcquired", why, name, err)
	}
}

// probe returns l as the optional capability C (an interface such as
// fence.Healer), and skips t if l does not implement it: optional features are
// probed, not required.
func probe[C any](t *testing.T, l fence.Locker) C {
	t.Helper()
	c, ok := l.(C)
	if !ok {
		t.Skipf("%T does not implement %v", l, reflect.TypeFor[C]())
	}
	return c
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s = %v; want an error matching %v", what, err, target)
	}
}

// wantInvalid is wantErrIs(err, fence.ErrInvalid) plus a clear message: it must
// name what is wrong (field is "name", "ttl", "lease", ...).
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	wantErrIs(t, what, err, fence.ErrInvalid)
	if !strings.Contains(strings.ToLower(err.Error()), field) {
		t.Fatalf("%s = %q; want a message that names the %s", what, err, field)
	}
}

func wantDone(t *testing.T, lease *fence.Lease, within time.Duration, why string) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(within):
		t.Fatalf("%s: lease Done still open after %v; want it closed", why, within)
	}
}

func wantOpen(t *testing.T, lease *fence.Lease, why string) {
	t.Helper()
	select {
	case <-lease.Done():
		t.Fatalf("%s: lease Done closed with %v; want it open", why, lease.Err())
	default:
	}
}

func (s *lockerSuite) acquireWellFormed(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	start := time.Now()
	lease := acquire(t, l, name, longTTL)
	end := time.Now()
	if lease.Name() != name {
		t.Errorf("lease.Name() = %q; want %q", lease.Name(), name)
	}
	if err := fence.ValidateToken(lease.Token()); err != nil {
		t.Errorf("lease.Token() = %d: %v; want a token in [1, MaxToken]", lease.Token(), err)
	}
	if err := fence.ValidateLeaseID(lease.ID()); err != nil {
		t.Errorf("lease.ID() = %q: %v; want a valid lease id", lease.ID(), err)
	}
	if got, want := lease.Fence(), (fence.Fence{Name: name, Token: lease.Token(), LeaseID: lease.ID()}); got != want {
		t.Errorf("lease.Fence() = %+v; want %+v", got, want)
	}
	if lease.TTL() != longTTL {
		t.Errorf("lease.TTL() = %v; want %v", lease.TTL(), longTTL)
	}
	// The local deadline counts from when the request was sent: not before the
	// call started, not after it returned.
	if d := lease.Deadline(); d.Before(start.Add(longTTL)) || d.After(end.Add(longTTL)) {
		t.Errorf("lease.Deadline() = %v; want within [%v, %v] (call start/end + TTL)", d, start.Add(longTTL), end.Add(longTTL))
	}
	wantOpen(t, lease, "fresh lease")
	if lease.Err() != nil {
		t.Errorf("lease.Err() = %v on a fresh lease; want nil", lease.Err())
	}
}

func (s *lockerSuite) leaseIDsDistinct(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	seen := make(map[string]bool)
	for i := 0; i < 20; i++ {
		lease := acquire(t, l, uniqueName(t, ""), longTTL)
		id := lease.ID()
		if len(id) < 16 {
			t.Fatalf("lease id %q is %d bytes; want at least 16 (128 random bits)", id, len(id))
		}
		if seen[id] {
			t.Fatalf("lease id %q issued twice", id)
		}
		seen[id] = true
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release = %v; want nil", err)
		}
	}
	// Reacquiring one name gives fresh ids too.
	name := uniqueName(t, "")
	for i := 0; i < 5; i++ {
		lease := acquire(t, l, name, longTTL)
		if seen[lease.ID()] {
			t.Fatalf("lease id %q reissued on reacquisition of %q", lease.ID(), name)
		}
		seen[lease.ID()] = true
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release = %v; want nil", err)
		}
	}
}

func (s *lockerSuite) acquireHeld(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	start := time.Now()
	wantHeld(t, l, name, "second Acquire without wait")
	if d := time.Since(start); d > promptly {
		t.Errorf("Acquire without wait on a held lock took %v; want it to try once and return within %v", d, promptly)
	}
}

func (s *lockerSuite) tokenUnder16Goroutines(t *testing.T, l fence.Locker) {
	const workers, rounds = 16, 4
	ctx := testContext(t)
	name := uniqueName(t, "")
	var (
		mu      sync.Mutex
		tokens  []fence.Token // in grant order: appended while holding the lock
		inside  atomic.Int32
		overlap atomic.Int32
	)
	inParallel(t, workers, func(int) error {
		for r := 0; r < rounds; r++ {
			lease, err := l.Acquire(ctx, name, longTTL, fence.WithWait(fence.WaitForever))
			if err != nil {
				return fmt.Errorf("Acquire with wait: %w", err)
			}
			if inside.Add(1) != 1 {
				overlap.Add(1)
			}
			mu.Lock()
			tokens = append(tokens, lease.Token())
			mu.Unlock()
			inside.Add(-1)
			if err := lease.Release(ctx); err != nil {
				return fmt.Errorf("Release of token %d: %w", lease.Token(), err)
			}
		}
		return nil
	})
	if n := overlap.Load(); n > 0 {
		t.Errorf("%d grants overlapped another unexpired, unreleased lease (P6)", n)
	}
	if len(tokens) != workers*rounds {
		t.Fatalf("got %d grants; want %d", len(tokens), workers*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d got token %d after token %d; want strictly increasing tokens (P1); all: %v", i, tokens[i], tokens[i-1], tokens)
		}
	}
}

// inParallel runs fn(0) to fn(n-1) in n goroutines, waits for them all, and
// fails t with an error one of them returned.
func inParallel(t *testing.T, n int, fn func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(w); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func (s *lockerSuite) tokenAfterReleaseAndExpiry(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	b := acquire(t, l, name, s.cfg.shortTTL)
	if b.Token() <= a.Token() {
		t.Fatalf("token after release = %d; want > %d", b.Token(), a.Token())
	}
	// Let b expire without release; the next token is still higher.
	c, err := l.Acquire(ctx, name, longTTL, fence.WithWait(longWait))
	if err != nil {
		t.Fatalf("Acquire with wait after a %v lease = %v; want a lease once it expired", s.cfg.shortTTL, err)
	}
	releaseAtCleanup(t, c)
	if c.Token() <= b.Token() {
		t.Fatalf("token after expiry = %d; want > %d (tokens are never reused after expiry)", c.Token(), b.Token())
	}
}

func (s *lockerSuite) namesIndependent(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	nameA, nameB := uniqueName(t, "a"), uniqueName(t, "b")
	a := acquire(t, l, nameA, longTTL)
	b := acquire(t, l, nameB, longTTL) // must not be blocked by nameA
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release(%q) = %v", nameB, err)
	}
	wantHeld(t, l, nameA, "after releasing another name")
	if err := l.Renew(ctx, nameA, a.ID(), longTTL); err != nil {
		t.Fatalf("Renew(%q) after releasing %q = %v; want nil", nameA, nameB, err)
	}
	b2 := acquire(t, l, nameB, longTTL)
	if b2.Token() <= b.Token() {
		t.Fatalf("second token of %q = %d; want > %d", nameB, b2.Token(), b.Token())
	}
	// A lease id is only good for its own name.
	wantErrIs(t, fmt.Sprintf("Release(%q, lease id of %q)", nameA, nameB), l.Release(ctx, nameA, b2.ID()), fence.ErrNotHeld)
	wantHeld(t, l, nameA, "after a Release with another name's lease id")
}

func (s *lockerSuite) ownerOnly(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	forged := driver.NewLeaseID()
	wantErrIs(t, "Renew with a forged lease id", l.Renew(ctx, name, forged, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release with a forged lease id", l.Release(ctx, name, forged), fence.ErrNotHeld)
	wantHeld(t, l, name, "after Renew and Release with a forged lease id (P5)")
	if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
		t.Fatalf("Renew by the holder = %v; want nil", err)
	}
	if err := l.Release(ctx, name, a.ID()); err != nil {
		t.Fatalf("Release by the holder = %v; want nil", err)
	}
	never := uniqueName(t, "never")
	wantErrIs(t, "Renew of a lock never acquired", l.Renew(ctx, never, forged, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of a lock never acquired", l.Release(ctx, never, forged), fence.ErrNotHeld)
}

func (s *lockerSuite) expiryExclusive(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	ttl := s.cfg.shortTTL
	name := uniqueName(t, "")
	start := time.Now() // the backend's expiry is at least start+ttl
	a := acquire(t, l, name, ttl)

	// Not granted before expiry: any grant observed before start+ttl is a violation.
	lease, err := fence.TryAcquire(ctx, l, name, longTTL)
	if err == nil {
		releaseAtCleanup(t, lease)
		if el := time.Since(start); el < ttl {
			t.Fatalf("lock granted again %v after a %v lease was requested, before it expired (P6)", el, ttl)
		}
		t.Logf("inconclusive: immediate retry ran after %v, past the %v TTL (slow machine)", time.Since(start), ttl)
		return
	}
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock = %v; want ErrNotAcquired", err)
	}

	// Granted after expiry, without a release: a waiter gets it, not before start+ttl.
	b, err := l.Acquire(ctx, name, longTTL, fence.WithWait(longWait))
	got := time.Since(start)
	if err != nil {
		t.Fatalf("Acquire with wait %v on a lease of %v = %v; want a lease after it expires", longWait, ttl, err)
	}
	releaseAtCleanup(t, b)
	if got < ttl {
		t.Fatalf("waiter granted %v after a %v lease was requested, before it expired (P6)", got, ttl)
	}
	if got > ttl+promptly {
		t.Errorf("waiter granted %v after a %v lease was requested; want within %v of its expiry", got, ttl, promptly)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token after expiry = %d; want > %d", b.Token(), a.Token())
	}
}

func (s *lockerSuite) renewExtends(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	ttl := s.cfg.shortTTL
	name := uniqueName(t, "")
	start := time.Now()
	a := acquire(t, l, name, ttl)
	if err := a.Renew(ctx, longTTL); err != nil {
		if errors.Is(err, fence.ErrNotHeld) && time.Since(start) >= ttl {
			t.Skipf("inconclusive: Renew ran %v after a %v lease was requested (slow machine)", time.Since(start), ttl)
		}
		t.Fatalf("Renew(%v) right after Acquire(%v) = %v; want nil", longTTL, ttl, err)
	}
	if a.TTL() != longTTL {
		t.Errorf("lease.TTL() after Renew = %v; want %v", a.TTL(), longTTL)
	}
	if d := a.Deadline(); d.Before(start.Add(longTTL)) {
		t.Errorf("lease.Deadline() after Renew = %v; want at least %v", d, start.Add(longTTL))
	}
	// Wait well past the original expiry: the renewed lease still holds the lock.
	<-time.After(time.Until(start.Add(2*ttl + 50*time.Millisecond)))
	wantHeld(t, l, name, fmt.Sprintf("%v after Acquire(%v) and Renew(%v)", time.Since(start).Round(time.Millisecond), ttl, longTTL))
	wantOpen(t, a, "renewed lease past its original TTL")
	if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
		t.Fatalf("second Renew = %v; want nil", err)
	}
}

func (s *lockerSuite) releaseThenRenew(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	wantDone(t, a, promptly, "after Release")
	wantErrIs(t, "lease.Err() after Release", a.Err(), fence.ErrReleased)
	wantErrIs(t, "Locker.Renew after Release", l.Renew(ctx, name, a.ID(), longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Lease.Renew after Release", a.Renew(ctx, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "second Release", l.Release(ctx, name, a.ID()), fence.ErrNotHeld)
	// Release frees the lock at once.
	b, err := fence.TryAcquire(ctx, l, name, longTTL)
	if err != nil {
		t.Fatalf("TryAcquire after Release = %v; want a lease", err)
	}
	releaseAtCleanup(t, b)
	if b.Token() <= a.Token() {
		t.Fatalf("token after Release = %d; want > %d", b.Token(), a.Token())
	}
}

func (s *lockerSuite) releaseRetried(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	if err := l.Release(ctx, name, a.ID()); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	b := acquire(t, l, name, longTTL)
	// A retried Release of a (say, its response was lost) must not end b.
	wantErrIs(t, "retried Release of the previous lease", l.Release(ctx, name, a.ID()), fence.ErrNotHeld)
	wantErrIs(t, "Renew of the previous lease", l.Renew(ctx, name, a.ID(), longTTL), fence.ErrNotHeld)
	wantHeld(t, l, name, "after a retried Release of the previous holder's lease")
	if err := l.Renew(ctx, name, b.ID(), longTTL); err != nil {
		t.Fatalf("Renew by the new holder = %v; want nil", err)
	}
	wantOpen(t, b, "new holder after the old holder's retried Release")
}

func (s *lockerSuite) expiredCannotTouchNext(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, s.cfg.shortTTL)
	b, err := l.Acquire(ctx, name, longTTL, fence.WithWait(longWait))
	if err != nil {
		t.Fatalf("Acquire with wait after a %v lease = %v; want a lease", s.cfg.shortTTL, err)
	}
	releaseAtCleanup(t, b)
	wantErrIs(t, "Renew of the expired lease", l.Renew(ctx, name, a.ID(), longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of the expired lease", l.Release(ctx, name, a.ID()), fence.ErrNotHeld)
	wantHeld(t, l, name, "after the expired holder's Renew and Release")
	if err := l.Renew(ctx, name, b.ID(), longTTL); err != nil {
		t.Fatalf("Renew by the new holder = %v; want nil", err)
	}
}

// acquireResult is what a goAcquire call returned.
type acquireResult struct {
	lease *fence.Lease
	err   error
}

// goAcquire runs Acquire in a goroutine and returns its result channel.
func goAcquire(ctx context.Context, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, ttl, opts...)
		ch <- acquireResult{lease, err}
	}()
	return ch
}

// wantGranted fails t unless the waiting acquire behind ch is granted within
// promptly of since (when what happened), with a token above every one of
// earlier; it returns the lease.
func wantGranted(t *testing.T, ch <-chan acquireResult, what string, since time.Time, earlier ...*fence.Lease) *fence.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("waiter after %s = %v; want a lease", what, r.err)
		}
		releaseAtCleanup(t, r.lease)
		for _, e := range earlier {
			if r.lease.Token() <= e.Token() {
				t.Fatalf("waiter after %s has token %d; want above every earlier grant's (%d)", what, r.lease.Token(), e.Token())
			}
		}
		return r.lease
	case <-time.After(promptly):
		t.Fatalf("waiter not granted within %v of %s (leases of %v, wait %v); waiting must be woken by release, not only by expiry", time.Since(since).Round(time.Millisecond), what, longTTL, longWait)
	}
	return nil
}

// settle gives a goroutine time to start waiting: no backend can tell us that it
// registered a waiter, so a short pause is the only way. It is not a correctness
// bound: a test passes whether or not the waiter was already waiting.
func (s *lockerSuite) settle(t *testing.T, ch <-chan acquireResult, why string) {
	t.Helper()
	select {
	case r := <-ch:
		if r.lease != nil {
			releaseAtCleanup(t, r.lease)
			t.Fatalf("%s: waiter granted token %d while the lock was held (P6)", why, r.lease.Token())
		}
		t.Fatalf("%s: waiter returned early with %v; want it to keep waiting", why, r.err)
	case <-time.After(s.cfg.shortTTL):
	}
}

func (s *lockerSuite) waitWokenByRelease(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	s.settle(t, ch, "waiting on a held lock")
	released := time.Now()
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("waiter after Release = %v; want a lease", r.err)
		}
		releaseAtCleanup(t, r.lease)
		if r.lease.Token() <= a.Token() {
			t.Fatalf("waiter's token = %d; want > %d", r.lease.Token(), a.Token())
		}
	case <-time.After(promptly):
		t.Fatalf("waiter not granted within %v of Release (lease TTL %v, wait %v); waiting must be woken by release, not only by expiry", time.Since(released).Round(time.Millisecond), longTTL, longWait)
	}
}

func (s *lockerSuite) waitBounded(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	wait := s.cfg.shortTTL
	start := time.Now()
	var r acquireResult
	select {
	case r = <-goAcquire(ctx, l, name, longTTL, fence.WithWait(wait)):
	case <-time.After(wait + promptly):
		t.Fatalf("Acquire with wait %v on a held lock still waiting after %v; want it to give up after the wait", wait, time.Since(start).Round(time.Millisecond))
	}
	if r.err == nil {
		releaseAtCleanup(t, r.lease)
		t.Fatalf("Acquire with wait %v on a lock held for %v granted token %d (P6)", wait, longTTL, r.lease.Token())
	}
	wantErrIs(t, fmt.Sprintf("Acquire with wait %v on a held lock", wait), r.err, fence.ErrNotAcquired)
	if errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose wait ran out = %v; want no context error, the context was not done", r.err)
	}
}

func (s *lockerSuite) waitCtxCancel(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(fence.WaitForever))
	s.settle(t, ch, "waiting forever on a held lock")
	cancelled := time.Now()
	cancel()
	wantGaveUp(t, ch, context.Canceled, "was cancelled", cancelled)
}

func (s *lockerSuite) waitCtxDeadline(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	ctx, cancel := context.WithTimeout(testContext(t), s.cfg.shortTTL)
	defer cancel()
	deadline, _ := ctx.Deadline()
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	wantGaveUp(t, ch, context.DeadlineExceeded, fmt.Sprintf("passed its %v deadline (wait %v)", s.cfg.shortTTL, longWait), deadline)
}

// wantGaveUp fails t unless the waiting Acquire behind ch returns, within
// promptly of ended (when its context ended, as how says), an error matching both
// fence.ErrNotAcquired and cause, and no lease on the held lock.
func wantGaveUp(t *testing.T, ch <-chan acquireResult, cause error, how string, ended time.Time) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err == nil {
			releaseAtCleanup(t, r.lease)
			t.Fatalf("Acquire whose context %s granted token %d on a held lock (P6)", how, r.lease.Token())
		}
		if !errors.Is(r.err, fence.ErrNotAcquired) || !errors.Is(r.err, cause) {
			t.Fatalf("Acquire whose context %s = %v; want an error matching both ErrNotAcquired and %v", how, r.err, cause)
		}
	case <-time.After(time.Until(ended) + promptly):
		t.Fatalf("Acquire still waiting %v after its context %s; want it to return within %v", time.Since(ended).Round(time.Millisecond), how, promptly)
	}
}

func (s *lockerSuite) doneAtExpiry(t *testing.T, l fence.Locker) {
	ttl := s.cfg.shortTTL
	name := uniqueName(t, "")
	start := time.Now()
	a := acquire(t, l, name, ttl)
	wantDone(t, a, ttl+promptly, fmt.Sprintf("lease of %v without renewal", ttl))
	if el := time.Since(start); el < ttl {
		t.Fatalf("Done closed %v after the acquire started; want not before the %v TTL", el, ttl)
	}
	wantErrIs(t, "lease.Err() after expiry", a.Err(), fence.ErrNotHeld)
	if err := a.Context().Err(); err == nil {
		t.Fatal("lease.Context() not cancelled after Done closed")
	}
	if got := context.Cause(a.Context()); got != a.Err() {
		t.Fatalf("context.Cause(lease.Context()) = %v; want lease.Err() = %v", got, a.Err())
	}
}

func (s *lockerSuite) autoRenew(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	// Not the short TTL itself: a renewal every TTL/3 must survive scheduling
	// stalls of a loaded machine (here 2/3 of 2s).
	ttl := max(4*s.cfg.shortTTL, 2*time.Second)
	observe := 5 * ttl / 2
	name := uniqueName(t, "")
	a := acquire(t, l, name, ttl, fence.WithAutoRenew())
	<-time.After(observe)
	wantOpen(t, a, fmt.Sprintf("auto-renewed lease of %v after %v", ttl, observe))
	wantHeld(t, l, name, fmt.Sprintf("auto-renewed lease of %v after %v", ttl, observe))
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of an auto-renewed lease = %v; want nil", err)
	}
	wantDone(t, a, promptly, "after Release of an auto-renewed lease")
	wantErrIs(t, "lease.Err() after Release", a.Err(), fence.ErrReleased)
	b, err := fence.TryAcquire(ctx, l, name, longTTL)
	if err != nil {
		t.Fatalf("TryAcquire after releasing the auto-renewed lease = %v; want a lease (renewal must stop)", err)
	}
	releaseAtCleanup(t, b)
}

var badNames = []struct{ desc, name string }{
	{"empty", ""},
	{"longer than 255 bytes", strings.Repeat("n", fence.MaxNameLen+1)},
	{"invalid UTF-8", "ft-\xff\xfe"},
	{"newline", "ft-a\nb"},
	{"NUL", "ft-a\x00b"},
	{"DEL", "ft-a\x7fb"},
}

func (s *lockerSuite) badNames(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	id := driver.NewLeaseID()
	for _, bn := range badNames {
		lease, err := l.Acquire(ctx, bn.name, longTTL)
		if lease != nil {
			releaseAtCleanup(t, lease)
		}
		wantInvalid(t, fmt.Sprintf("Acquire with a name %s (%q)", bn.desc, bn.name), err, "name")
		if lease != nil {
			t.Fatalf("Acquire with a name %s returned a lease with its error", bn.desc)
		}
		wantInvalid(t, fmt.Sprintf("Renew with a name %s", bn.desc), l.Renew(ctx, bn.name, id, longTTL), "name")
		wantInvalid(t, fmt.Sprintf("Release with a name %s", bn.desc), l.Release(ctx, bn.name, id), "name")
	}
}

func (s *lockerSuite) edgeNames(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	base := uniqueName(t, "")
	names := []string{
		base + strings.Repeat("x", fence.MaxNameLen-len(base)), // exactly 255 bytes
		base + "-ünïcødé-锁",
		base + " with spaces/slashes:colons?&%#{tag}",
	}
	for _, name := range names {
		a := acquire(t, l, name, longTTL)
		if a.Name() != name {
			t.Fatalf("lease.Name() = %q; want %q", a.Name(), name)
		}
		wantHeld(t, l, name, fmt.Sprintf("name %q", name))
		if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
			t.Fatalf("Renew(%q) = %v; want nil", name, err)
		}
		if err := l.Release(ctx, name, a.ID()); err != nil {
			t.Fatalf("Release(%q) = %v; want nil", name, err)
		}
	}
}

var badTTLs = []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond, fence.MaxTTL + time.Millisecond}

func (s *lockerSuite) badTTLs(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	for _, ttl := range badTTLs {
		lease, err := l.Acquire(ctx, name, ttl)
		if lease != nil {
			releaseAtCleanup(t, lease)
		}
		wantInvalid(t, fmt.Sprintf("Acquire with TTL %v", ttl), err, "ttl")
	}
	a := acquire(t, l, name, longTTL)
	for _, ttl := range badTTLs {
		wantInvalid(t, fmt.Sprintf("Renew with TTL %v", ttl), l.Renew(ctx, name, a.ID(), ttl), "ttl")
	}
	if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
		t.Fatalf("Renew with a good TTL after bad ones = %v; want nil (bad input changes nothing)", err)
	}
}

func (s *lockerSuite) badLeaseIDs(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	for _, id := range []string{"", "has space", "tab\tid", strings.Repeat("a", fence.MaxLeaseIDLen+1), "nul\x00", "ünï"} {
		wantInvalid(t, fmt.Sprintf("Renew with lease id %q", id), l.Renew(ctx, name, id, longTTL), "lease")
		wantInvalid(t, fmt.Sprintf("Release with lease id %q", id), l.Release(ctx, name, id), "lease")
	}
	wantHeld(t, l, name, "after Renew and Release with bad lease ids")
}

func (s *lockerSuite) inspector(t *testing.T, l fence.Locker) {
	in := probe[fence.Inspector](t, l)
	ctx := testContext(t)
	prefix := uniqueName(t, "")
	names := []string{prefix + "-c", prefix + "-a", prefix + "-b"}
	leases := map[string]*fence.Lease{}
	for _, n := range names {
		leases[n] = acquire(t, l, n, longTTL)
	}
	if err := leases[prefix+"-b"].Release(ctx); err != nil {
		t.Fatal(err)
	}

	a := leases[prefix+"-a"]
	info, err := in.Inspect(ctx, a.Name())
	if err != nil {
		t.Fatalf("Inspect(held) = %v", err)
	}
	if !info.Held || info.Name != a.Name() || info.Token != a.Token() || info.LastToken < a.Token() || info.ExpiresIn <= 0 || info.ExpiresIn > longTTL {
		t.Fatalf("Inspect(held) = %+v; want Name %q, Held, Token %d, LastToken >= %d, ExpiresIn in (0, %v]", info, a.Name(), a.Token(), a.Token(), longTTL)
	}
	b := leases[prefix+"-b"]
	info, err = in.Inspect(ctx, b.Name())
	if err != nil || info.Held || info.LastToken < b.Token() {
		t.Fatalf("Inspect(released) = %+v, %v; want not Held, LastToken >= %d, nil", info, err, b.Token())
	}
	info, err = in.Inspect(ctx, prefix+"-never")
	if err != nil || info.Held || info.LastToken != 0 {
		t.Fatalf("Inspect(never acquired) = %+v, %v; want not Held, LastToken 0, nil error", info, err)
	}
	_, err = in.Inspect(ctx, "")
	wantErrIs(t, "Inspect(\"\")", err, fence.ErrInvalid)

	all := fence.ListOptions{Prefix: prefix, All: true}
	list, err := in.List(ctx, all)
	if err != nil {
		t.Fatalf("List(%+v) = %v", all, err)
	}
	want := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
	if got := listedNames(list); !slices.Equal(got, want) {
		t.Fatalf("List(%+v) names = %q; want %q (held or not, in name order)", all, got, want)
	}
	if !list[0].Held || list[1].Held || !list[2].Held {
		t.Fatalf("List(%+v) = %+v; want a and c held, b not", all, list)
	}
	all.Limit = 2
	list, err = in.List(ctx, all)
	if got := listedNames(list); err != nil || !slices.Equal(got, want[:2]) {
		t.Fatalf("List(%+v) = %q, %v; want the first two, %q", all, got, err, want[:2])
	}
}

// inspectorList checks which locks List selects: by default only those with a
// lease unexpired by the backend's clock (a released lease, an expired one and
// a free semaphore are left out; a semaphore or shared lock with several
// holders is listed once, with every holder), with All every name the store
// knows, in name order. Limit counts the locks returned, so the free names that
// sort before the held ones here (more of them than the limit) never shorten a
// held-only listing.
func (s *lockerSuite) inspectorList(t *testing.T, l fence.Locker) {
	in := probe[fence.Inspector](t, l)
	ctx := testContext(t)
	p := uniqueName(t, "")
	features := fence.FeaturesOf(l)

	// Free names first: three released, one left to expire.
	var names, held []string
	for _, n := range []string{p + "-0a", p + "-0b", p + "-0c"} {
		if err := acquire(t, l, n, longTTL).Release(ctx); err != nil {
			t.Fatalf("Release(%q) = %v", n, err)
		}
		names = append(names, n)
	}
	expiring := p + "-0d"
	acquire(t, l, expiring, s.cfg.shortTTL)
	names = append(names, expiring)
	// Then the held ones.
	for _, n := range []string{p + "-1a", p + "-1b"} {
		acquire(t, l, n, longTTL, fence.WithOwner("owner of "+n))
		names, held = append(names, n), append(held, n)
	}
	multi := map[string][]fence.AcquireOption{}
	if features.Semaphores {
		multi[p+"-1c"] = []fence.AcquireOption{fence.WithLimit(semN)}
	}
	if features.Shared {
		multi[p+"-1d"] = []fence.AcquireOption{fence.WithShared()}
	}
	for _, n := range slices.Sorted(maps.Keys(multi)) {
		for _, who := range []string{"first", "second"} {
			acquire(t, l, n, longTTL, append(multi[n], fence.WithOwner(who+" holder of "+n))...)
		}
		names, held = append(names, n), append(held, n)
	}
	// And a free name after them.
	last := p + "-2z"
	if err := acquire(t, l, last, longTTL).Release(ctx); err != nil {
		t.Fatalf("Release(%q) = %v", last, err)
	}
	names = append(names, last)

	// The expiring lease ends by the backend's clock, without a release.
	deadline := time.Now().Add(s.cfg.shortTTL + promptly)
	for {
		info, err := in.Inspect(ctx, expiring)
		if err != nil {
			t.Fatalf("Inspect(%q) = %v", expiring, err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) = %+v more than %v after a %v lease was granted; want it expired", expiring, info, s.cfg.shortTTL+promptly, s.cfg.shortTTL)
		}
		time.Sleep(s.cfg.shortTTL / 4)
	}

	opts := fence.ListOptions{Prefix: p}
	list, err := in.List(ctx, opts)
	if err != nil {
		t.Fatalf("List(%+v) = %v", opts, err)
	}
	if got := listedNames(list); !slices.Equal(got, held) {
		t.Fatalf("List(%+v) names = %q; want the held ones only, in name order, %q (free, released and expired names are left out)", opts, got, held)
	}
	for _, info := range list {
		if !info.Held || info.Token == 0 || info.ExpiresIn <= 0 && len(info.Holders) == 0 {
			t.Fatalf("List(%+v) has %+v; want it held, with its holder's token and time left", opts, info)
		}
		if _, ok := multi[info.Name]; !ok {
			if want := "owner of " + info.Name; info.Owner != want || len(info.Holders) != 0 {
				t.Fatalf("List(%+v) has %+v; want it held by owner %q alone", opts, info, want)
			}
			continue
		}
		var owners []string
		for _, h := range info.Holders {
			owners = append(owners, h.Owner)
		}
		slices.Sort(owners)
		if want := []string{"first holder of " + info.Name, "second holder of " + info.Name}; !slices.Equal(owners, want) {
			t.Fatalf("List(%+v) has %+v with holders' owners %q; want every holder, %q", opts, info, owners, want)
		}
	}

	opts.Limit = 2
	list, err = in.List(ctx, opts)
	if got := listedNames(list); err != nil || !slices.Equal(got, held[:2]) {
		t.Fatalf("List(%+v) = %q, %v; want the first two held locks, %q: the limit counts held locks, however many free names come first", opts, got, err, held[:2])
	}

	opts = fence.ListOptions{Prefix: p + "-0"}
	if list, err = in.List(ctx, opts); err != nil || len(list) != 0 {
		t.Fatalf("List(%+v) = %q, %v; want no locks (every name with that prefix is free)", opts, listedNames(list), err)
	}

	opts = fence.ListOptions{Prefix: p, All: true}
	list, err = in.List(ctx, opts)
	if got := listedNames(list); err != nil || !slices.Equal(got, names) {
		t.Fatalf("List(%+v) = %q, %v; want every name, held or not, in name order, %q", opts, got, err, names)
	}
	for _, info := range list {
		if want := slices.Contains(held, info.Name); info.Held != want || info.LastToken == 0 {
			t.Fatalf("List(%+v) has %+v; want Held %v and its last token", opts, info, want)
		}
	}
	opts.Limit = 2
	list, err = in.List(ctx, opts)
	if got := listedNames(list); err != nil || !slices.Equal(got, names[:2]) {
		t.Fatalf("List(%+v) = %q, %v; want the first two names, %q", opts, got, err, names[:2])
	}
}

// listedNames returns the names of a listing, in its order.
func listedNames(list []fence.LockInfo) []string {
	names := make([]string, 0, len(list))
	for _, i := range list {
		names = append(names, i.Name)
	}
	return names
}

func (s *lockerSuite) healer(t *testing.T, l fence.Locker) {
	h := probe[fence.Healer](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL)
	seen := a.Token() + 1000
	if err := h.Heal(ctx, name, seen); err != nil {
		t.Fatalf("Heal(%d) while held = %v; want nil", seen, err)
	}
	wantHeld(t, l, name, "after Heal (it must not touch the lease)")
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release after Heal = %v; want nil", err)
	}
	b := acquire(t, l, name, longTTL)
	if b.Token() <= seen {
		t.Fatalf("token after Heal(%d) = %d; want > %d (P4)", seen, b.Token(), seen)
	}
	if err := h.Heal(ctx, name, 1); err != nil {
		t.Fatalf("Heal(1) = %v; want nil (healing below the counter is a no-op)", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, l, name, longTTL)
	if c.Token() <= b.Token() {
		t.Fatalf("token after Heal(1) = %d; want > %d (Heal never lowers the counter)", c.Token(), b.Token())
	}
	wantErrIs(t, "Heal with a bad name", h.Heal(ctx, "", 5), fence.ErrInvalid)
	wantErrIs(t, "Heal above MaxToken", h.Heal(ctx, name, fence.MaxToken+1), fence.ErrInvalid)
}

// grantOnce acquires name and releases it, and returns its token.
func grantOnce(t *testing.T, l fence.Locker, name string) fence.Token {
	t.Helper()
	lease := acquire(t, l, name, longTTL)
	if err := lease.Release(testContext(t)); err != nil {
		t.Fatalf("Release(%q) = %v; want nil", name, err)
	}
	return lease.Token()
}

// healerOneName checks P9's "a heal raises only its own name's tokens": healing
// one name as far as the bound allows leaves another name's tokens where they
// were (a store with one counter for every name would hand the other name a
// token above seen too, and a heal near fence.MaxToken would exhaust every name).
func (s *lockerSuite) healerOneName(t *testing.T, l fence.Locker) {
	h := probe[fence.Healer](t, l)
	ctx := testContext(t)
	healed, other := uniqueName(t, "-healed"), uniqueName(t, "-other")
	b1 := grantOnce(t, l, other)
	a1 := grantOnce(t, l, healed)
	// The name's last token is at least a1 on every backend, so this is within
	// the bound.
	seen := a1 + fence.MaxHealAhead
	if err := h.Heal(ctx, healed, seen); err != nil {
		t.Fatalf("Heal(%q, its token + MaxHealAhead = %d) = %v; want nil", healed, seen, err)
	}
	if a2 := grantOnce(t, l, healed); a2 <= seen {
		t.Fatalf("token of %q after Heal(%d) = %d; want > %d (P4)", healed, seen, a2, seen)
	}
	b2 := grantOnce(t, l, other)
	if b2 <= b1 || b2 >= seen {
		t.Fatalf("token of %q after %q was healed to %d = %d; want above its previous %d and below %d: a heal must not move another name's token (P9)",
			other, healed, seen, b2, b1, seen)
	}
}

// healerBound checks the heal bound: a seen more than fence.MaxHealAhead above
// the name's last token is refused with a *fence.HealBoundError matching
// fence.ErrInvalid and changes nothing; the bound itself is accepted.
func (s *lockerSuite) healerBound(t *testing.T, l fence.Locker) {
	h := probe[fence.Healer](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	a1 := grantOnce(t, l, name)
	err := h.Heal(ctx, name, fence.MaxToken)
	var hb *fence.HealBoundError
	if !errors.As(err, &hb) || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Heal(%q, MaxToken) with last token %d = %v; want a *fence.HealBoundError matching ErrInvalid", name, a1, err)
	}
	if hb.Name != name || hb.Seen != fence.MaxToken || hb.Last < a1 || hb.Last >= fence.MaxToken-fence.MaxHealAhead {
		t.Fatalf("Heal(%q, MaxToken) refused with %+v; want Name %q, Seen %d and the name's last token (at least %d)", name, *hb, name, fence.MaxToken, a1)
	}
	last := hb.Last
	wantErrIs(t, "Heal one above the bound", h.Heal(ctx, name, last+fence.MaxHealAhead+1), fence.ErrInvalid)
	a2 := grantOnce(t, l, name)
	if a2 <= a1 || a2 > last+fence.MaxHealAhead/2 {
		t.Fatalf("token after the refused heals = %d; want above %d and not moved by them (last token %d)", a2, a1, last)
	}
	seen := max(last, a2) + fence.MaxHealAhead
	if err := h.Heal(ctx, name, seen); err != nil {
		t.Fatalf("Heal(%q, last token + MaxHealAhead = %d) = %v; want nil (the bound is allowed)", name, seen, err)
	}
	if a3 := grantOnce(t, l, name); a3 <= seen {
		t.Fatalf("token after Heal(%d) = %d; want > %d (P4)", seen, a3, seen)
	}
}

// acquireErrorsWording checks that every acquire error reads the way the one
// acquire engine (package driver) words it, whatever the backend: the backend's
// name, then "lock NAME not acquired" with what the last try saw and what ended
// the wait, or "acquire NAME:" and the cause. The prefix must be the same word in
// every case.
func (s *lockerSuite) acquireErrorsWording(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	acquire(t, l, name, longTTL)
	q := regexp.QuoteMeta(strconv.Quote(name))
	held := `held(, expires in [0-9][0-9a-zµ.]*)?`
	var prefixes []string
	check := func(what string, err error, pattern string, is ...error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: got no error", what)
		}
		re := regexp.MustCompile(`^([a-z0-9]+): ` + pattern + `$`)
		m := re.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("%s = %q; want it to read like %q", what, err.Error(), "BACKEND: "+pattern)
		}
		prefixes = append(prefixes, m[1])
		for _, target := range is {
			if !errors.Is(err, target) {
				t.Errorf("%s = %v; want it to match %v too", what, err, target)
			}
		}
	}

	_, err := fence.TryAcquire(testContext(t), l, name, longTTL)
	check("TryAcquire of a held lock", err, `lock `+q+` not acquired: `+held, fence.ErrNotAcquired)
	var he *fence.HeldError
	if !errors.As(err, &he) || he.Name != name {
		t.Errorf("TryAcquire of a held lock = %v; want a *fence.HeldError naming %q", err, name)
	}

	_, err = l.Acquire(testContext(t), name, longTTL, fence.WithWait(s.cfg.shortTTL))
	check("Acquire of a held lock with a bounded wait", err,
		`lock `+q+` not acquired after waiting [0-9][0-9a-zµ.]*: `+held, fence.ErrNotAcquired)

	ctx, cancel := context.WithTimeout(testContext(t), s.cfg.shortTTL)
	_, err = l.Acquire(ctx, name, longTTL, fence.WithWait(fence.WaitForever))
	cancel()
	check("Acquire of a held lock until the context's deadline", err,
		`lock `+q+` not acquired( after waiting [0-9][0-9a-zµ.]*)?: context deadline exceeded(; `+held+`)?`,
		fence.ErrNotAcquired, context.DeadlineExceeded)

	_, err = l.Acquire(testContext(t), name, 0)
	check("Acquire with a zero TTL", err, `acquire `+q+`: fence: invalid ttl "0s": .*`, fence.ErrInvalid)

	_, err = l.Acquire(testContext(t), "", longTTL)
	check("Acquire with an empty name", err, `acquire: fence: invalid name "": is empty`, fence.ErrInvalid)

	for _, p := range prefixes[1:] {
		if p != prefixes[0] {
			t.Errorf("acquire errors begin with %q; want the same backend name in every one", prefixes)
			break
		}
	}
}

// owner checks that the owner an acquire names is reported by Inspect and List
// while the lease is held, and gone once it is released. An Inspector that cannot
// report owners fails: `fence status` and election's Leader show them.
func (s *lockerSuite) owner(t *testing.T, l fence.Locker) {
	in := probe[fence.Inspector](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	const owner = "worker-7.example:4242 ünïcødé job --flag" // printable, with spaces
	lease := acquire(t, l, name, longTTL, fence.WithOwner(owner))
	if lease.Owner() != owner {
		t.Errorf("Lease.Owner() = %q; want %q", lease.Owner(), owner)
	}
	info, err := in.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	if info.Owner != owner || !info.Held {
		t.Fatalf("Inspect = %+v; want it held by owner %q", info, owner)
	}
	if strings.Contains(fmt.Sprintf("%+v", info), lease.ID()) {
		t.Fatalf("Inspect = %+v; it must never carry the lease id", info)
	}
	list, err := in.List(ctx, fence.ListOptions{Prefix: name})
	if err != nil || len(list) != 1 || list[0].Owner != owner {
		t.Fatalf("List(%q) = %+v, %v; want one lock with owner %q", name, list, err, owner)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err = in.Inspect(ctx, name); err != nil || info.Held || info.Owner != "" {
		t.Fatalf("Inspect after release = %+v, %v; want it free, without an owner", info, err)
	}
	// No owner is fine, and reported as none.
	acquire(t, l, name, longTTL)
	if info, err = in.Inspect(ctx, name); err != nil || !info.Held || info.Owner != "" {
		t.Fatalf("Inspect of a lease without owner = %+v, %v; want held, owner \"\"", info, err)
	}
}

func (s *lockerSuite) badOwners(t *testing.T, l fence.Locker) {
	name := uniqueName(t, "")
	for _, owner := range []string{strings.Repeat("o", fence.MaxOwnerLen+1), "tab\there", "new\nline", "\xff\xfe"} {
		lease, err := l.Acquire(testContext(t), name, longTTL, fence.WithOwner(owner))
		if err == nil {
			releaseAtCleanup(t, lease)
			t.Fatalf("Acquire with owner %q granted token %d; want ErrInvalid", owner, lease.Token())
		}
		wantInvalid(t, fmt.Sprintf("Acquire with owner %q", owner), err, "owner")
	}
	acquire(t, l, name, longTTL, fence.WithOwner(strings.Repeat("o", fence.MaxOwnerLen)))
}

// revoker checks a Revoker: Revoke ends the holder's lease at once (its Renew
// and Release then say ErrNotHeld), wakes a waiter promptly, and the next grant's
// token is higher; a free lock gives ErrNotHeld.
func (s *lockerSuite) revoker(t *testing.T, l fence.Locker) {
	rv := probe[fence.Revoker](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	wantErrIs(t, "Revoke of a lock never held", rv.Revoke(ctx, name), fence.ErrNotHeld)
	wantInvalid(t, "Revoke with an empty name", rv.Revoke(ctx, ""), "name")

	old := acquire(t, l, name, longTTL)
	ch := goAcquire(ctx, l, name, longTTL, fence.WithWait(longWait))
	s.settle(t, ch, "waiting on a held lock")
	revoked := time.Now()
	if err := rv.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke of a held lock = %v", err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("waiter after Revoke = %v; want the lock", r.err)
		}
		releaseAtCleanup(t, r.lease)
		if r.lease.Token() <= old.Token() {
			t.Fatalf("grant after Revoke has token %d; want above the revoked %d", r.lease.Token(), old.Token())
		}
	case <-time.After(promptly):
		t.Fatalf("waiter still waiting %v after Revoke; want it woken promptly", time.Since(revoked).Round(time.Millisecond))
	}
	wantErrIs(t, "revoked holder's Renew", old.Renew(ctx, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "revoked holder's Release", old.Release(ctx), fence.ErrNotHeld)
}
