package fencetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// semaphoreCases are TestLocker's checks of semaphores (fence.WithLimit). Those
// named Semaphore_* run on a Locker whose Features declare Semaphores and skip
// otherwise, except the checks of WithLimit(1) and of bad limits, which hold for
// every Locker, and Semaphore_Undeclared_ErrNotImplemented, which runs only where
// semaphores are not declared.
func (s *lockerSuite) semaphoreCases() []suiteCase[fence.Locker] {
	return []suiteCase[fence.Locker]{
		{"Semaphore_AtMostNUnder16Goroutines", s.semAtMostN},
		{"Semaphore_NPlus1thHeld_LowestFreeSlotReused", s.semLowestFreeSlot},
		{"Semaphore_TokensIncreaseAcrossSlotsAndLocks", s.semTokens},
		{"Semaphore_LimitMismatch_LimitErrorWhileLive", s.semLimitMismatch},
		{"Semaphore_OwnerOnly_RenewReleaseTouchOnePermit", s.semOwnerOnly},
		{"Semaphore_Expiry_FreesOnePermitDoneCloses", s.semExpiry},
		{"Semaphore_Wait_WokenByOneRelease", s.semWaitWoken},
		{"Semaphore_Wait_ContextCancelReturnsPromptly", s.semWaitCancel},
		{"Semaphore_Inspector_HoldersInSlotOrder", s.semInspector},
		{"Semaphore_Revoker_EndsEveryLease", s.semRevoker},
		{"Semaphore_BadLimits_Rejected", s.semBadLimits},
		{"Semaphore_Limit1_IsALock", s.semLimit1},
		{"Semaphore_Undeclared_ErrNotImplemented", s.semUndeclared},
	}
}

// semN is the limit of the semaphores the suite tests.
const semN = 3

// needSemaphores skips t unless l declares Features.Semaphores.
func needSemaphores(t *testing.T, l fence.Locker) {
	t.Helper()
	if !fence.FeaturesOf(l).Semaphores {
		t.Skipf("%T does not declare Features.Semaphores", l)
	}
}

// acquirePermits takes n permits of the semaphore name of limit (longTTL each,
// with opts), checks that they got slots 0 to n-1 in order with increasing
// tokens, and returns them.
func acquirePermits(t *testing.T, l fence.Locker, name string, limit, n int, opts ...fence.AcquireOption) []*fence.Lease {
	t.Helper()
	leases := make([]*fence.Lease, n)
	for i := range leases {
		leases[i] = acquire(t, l, name, longTTL, append([]fence.AcquireOption{fence.WithLimit(limit)}, opts...)...)
		if got := leases[i].Slot(); got != i {
			t.Fatalf("permit %d of %d on a fresh semaphore has slot %d; want %d (the lowest free slot)", i+1, limit, got, i)
		}
		if i > 0 && leases[i].Token() <= leases[i-1].Token() {
			t.Fatalf("permit %d has token %d after token %d; want strictly increasing tokens across slots (P1)", i+1, leases[i].Token(), leases[i-1].Token())
		}
	}
	return leases
}

// wantPermitsFull fails unless a try-once Acquire of one more permit of name
// finds the semaphore held, with a *fence.HeldError.
func wantPermitsFull(t *testing.T, l fence.Locker, name string, limit int, why string) {
	t.Helper()
	lease, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithLimit(limit))
	if err == nil {
		releaseAtCleanup(t, lease)
		t.Fatalf("%s: TryAcquire(%q, WithLimit(%d)) granted slot %d, token %d; want ErrNotAcquired, all %d permits should be held", why, name, limit, lease.Slot(), lease.Token(), limit)
	}
	var he *fence.HeldError
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &he) {
		t.Fatalf("%s: TryAcquire(%q, WithLimit(%d)) = %v; want an error matching ErrNotAcquired with a *fence.HeldError", why, name, limit, err)
	}
	if he.Limit != limit {
		t.Fatalf("%s: TryAcquire(%q, WithLimit(%d)) = %v with HeldError.Limit %d; want %d, the permits all held", why, name, limit, err, he.Limit, limit)
	}
}

// wantLimitError fails unless err is a *fence.LimitError (matching ErrInvalid)
// naming name, the limit asked for and the limit held.
func wantLimitError(t *testing.T, what string, err error, name string, limit, held int) {
	t.Helper()
	var le *fence.LimitError
	if !errors.As(err, &le) || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("%s = %v; want a *fence.LimitError matching ErrInvalid", what, err)
	}
	if le.Name != name || le.Limit != limit || le.Held != held {
		t.Fatalf("%s = %+v; want a LimitError for %q with Limit %d and Held %d", what, *le, name, limit, held)
	}
}

func (s *lockerSuite) semAtMostN(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	const workers, rounds = 16, 4
	ctx := testContext(t)
	name := uniqueName(t, "")
	var (
		mu     sync.Mutex
		live   = map[int]fence.Token{} // slot -> token of the leases granted and not yet released
		tokens = map[fence.Token]bool{}
		most   int
		bad    []string
	)
	inParallel(t, workers, func(int) error {
		for r := 0; r < rounds; r++ {
			lease, err := l.Acquire(ctx, name, longTTL, fence.WithLimit(semN), fence.WithWait(fence.WaitForever))
			if err != nil {
				return fmt.Errorf("Acquire with wait: %w", err)
			}
			slot, tok := lease.Slot(), lease.Token()
			// A lease enters live after its grant and leaves before its release, so
			// live is never more than the store holds: any excess is real.
			mu.Lock()
			switch other, dup := live[slot]; {
			case slot < 0 || slot >= semN:
				bad = append(bad, fmt.Sprintf("token %d got slot %d, outside [0, %d)", tok, slot, semN))
			case dup:
				bad = append(bad, fmt.Sprintf("token %d got slot %d while token %d held it (P6 per slot)", tok, slot, other))
			case len(live) >= semN:
				bad = append(bad, fmt.Sprintf("token %d granted while %d permits were held", tok, len(live)))
			}
			if tokens[tok] {
				bad = append(bad, fmt.Sprintf("token %d granted twice (P1)", tok))
			}
			tokens[tok] = true
			live[slot] = tok
			most = max(most, len(live))
			mu.Unlock()
			time.Sleep(time.Millisecond) // let the permits overlap
			mu.Lock()
			if live[slot] == tok {
				delete(live, slot)
			}
			mu.Unlock()
			if err := lease.Release(ctx); err != nil {
				return fmt.Errorf("Release of slot %d, token %d: %w", slot, tok, err)
			}
		}
		return nil
	})
	if len(bad) > 0 {
		t.Fatalf("semaphore of %d under %d goroutines: %d violations: %s", semN, workers, len(bad), strings.Join(bad, "; "))
	}
	if len(tokens) != workers*rounds {
		t.Fatalf("got %d grants; want %d", len(tokens), workers*rounds)
	}
	t.Logf("at most %d of %d permits were seen held at once", most, semN)
}

func (s *lockerSuite) semLowestFreeSlot(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	p := acquirePermits(t, l, name, semN, semN)
	wantPermitsFull(t, l, name, semN, fmt.Sprintf("with %d of %d permits held", semN, semN))

	if err := p[1].Release(ctx); err != nil {
		t.Fatalf("Release of slot 1 = %v", err)
	}
	q := acquire(t, l, name, longTTL, fence.WithLimit(semN))
	if q.Slot() != 1 {
		t.Fatalf("permit after releasing slot 1 has slot %d; want 1 (the lowest free slot)", q.Slot())
	}
	if q.Token() <= p[2].Token() {
		t.Fatalf("permit after a release has token %d; want above every earlier grant's (%d)", q.Token(), p[2].Token())
	}
	wantPermitsFull(t, l, name, semN, "after slot 1 was released and taken again")

	for _, lease := range []*fence.Lease{p[2], p[0]} {
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release of slot %d = %v", lease.Slot(), err)
		}
	}
	for _, want := range []int{0, 2} {
		r := acquire(t, l, name, longTTL, fence.WithLimit(semN))
		if r.Slot() != want {
			t.Fatalf("permit with slots 0 and 2 free (then only 2) has slot %d; want %d (the lowest free slot)", r.Slot(), want)
		}
	}
	wantPermitsFull(t, l, name, semN, "after slots 0 and 2 were released and taken again")
}

func (s *lockerSuite) semTokens(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	var last fence.Token
	next := func(what string, lease *fence.Lease) {
		t.Helper()
		if lease.Token() <= last {
			t.Fatalf("%s has token %d; want above every earlier grant's on the name (%d): one counter for locks and every slot (P1, P8)", what, lease.Token(), last)
		}
		last = lease.Token()
	}
	release := func(leases ...*fence.Lease) {
		t.Helper()
		for _, lease := range leases {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release of token %d = %v", lease.Token(), err)
			}
		}
	}
	for round := 0; round < 2; round++ {
		lock := acquire(t, l, name, longTTL)
		next("a lock's grant", lock)
		if lock.Slot() != 0 {
			t.Fatalf("a lock's lease has slot %d; want 0", lock.Slot())
		}
		release(lock)
		p := acquirePermits(t, l, name, semN, semN)
		for _, lease := range p {
			next(fmt.Sprintf("the permit of slot %d", lease.Slot()), lease)
		}
		release(p[1], p[0])
		q := acquire(t, l, name, longTTL, fence.WithLimit(semN))
		next("a permit reusing a slot", q)
		release(q, p[2])
	}
}

func (s *lockerSuite) semLimitMismatch(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL, fence.WithLimit(semN))
	for _, c := range []struct {
		desc  string
		opts  []fence.AcquireOption
		limit int
	}{
		{"WithLimit(2)", []fence.AcquireOption{fence.WithLimit(2)}, 2},
		{"WithLimit(4)", []fence.AcquireOption{fence.WithLimit(4)}, 4},
		{"a lock's acquire", nil, 1},
		{"WithLimit(1)", []fence.AcquireOption{fence.WithLimit(1)}, 1},
		{"WithLimit(2) and a wait", []fence.AcquireOption{fence.WithLimit(2), fence.WithWait(longWait)}, 2},
	} {
		what := fmt.Sprintf("%s while a permit of limit %d is live", c.desc, semN)
		start := time.Now()
		lease, err := l.Acquire(ctx, name, longTTL, c.opts...)
		if err == nil {
			releaseAtCleanup(t, lease)
			t.Fatalf("%s granted slot %d, token %d; want a *fence.LimitError", what, lease.Slot(), lease.Token())
		}
		wantLimitError(t, what, err, name, c.limit, semN)
		if d := time.Since(start); d > promptly {
			t.Fatalf("%s took %v; want the refusal within %v, not after a wait", what, d, promptly)
		}
	}
	if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
		t.Fatalf("Renew of the permit after refused acquires = %v; want nil (a refusal changes nothing)", err)
	}
	// Once every lease is released, any limit will do.
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	b := acquire(t, l, name, s.cfg.shortTTL, fence.WithLimit(2))
	// ... and once every lease has expired. The store's expiry may come a little
	// after the holder's deadline (etcd rounds TTLs up), so look again, boundedly.
	wantDone(t, b, s.cfg.shortTTL+promptly, "a permit without renewal")
	deadline := time.Now().Add(promptly)
	for {
		c, err := fence.TryAcquire(ctx, l, name, longTTL, fence.WithLimit(5))
		if err == nil {
			releaseAtCleanup(t, c)
			break
		}
		var le *fence.LimitError
		if !errors.As(err, &le) {
			t.Fatalf("TryAcquire(WithLimit(5)) after the limit-2 permit expired = %v; want a permit", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("TryAcquire(WithLimit(5)) still refused %v after the limit-2 permit's deadline: %v; want any limit accepted once no lease is live", promptly, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *lockerSuite) semOwnerOnly(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	p := acquirePermits(t, l, name, semN, semN)
	forged := driver.NewLeaseID()
	wantErrIs(t, "Renew of a permit with a forged lease id", l.Renew(ctx, name, forged, longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of a permit with a forged lease id", l.Release(ctx, name, forged), fence.ErrNotHeld)
	wantPermitsFull(t, l, name, semN, "after Renew and Release with a forged lease id (P5)")

	if err := l.Release(ctx, name, p[1].ID()); err != nil {
		t.Fatalf("Release of slot 1 by its lease id = %v; want nil", err)
	}
	wantErrIs(t, "Renew of the released permit", l.Renew(ctx, name, p[1].ID(), longTTL), fence.ErrNotHeld)
	for _, i := range []int{0, 2} {
		if err := l.Renew(ctx, name, p[i].ID(), longTTL); err != nil {
			t.Fatalf("Renew of slot %d after slot 1's Release = %v; want nil (a release ends only its own permit)", i, err)
		}
	}
	q := acquire(t, l, name, longTTL, fence.WithLimit(semN))
	if q.Slot() != 1 {
		t.Fatalf("permit after slot 1's Release has slot %d; want 1: exactly one permit was freed", q.Slot())
	}
	wantPermitsFull(t, l, name, semN, "after slot 1 was released and taken again")
	// A retried Release of the old slot-1 lease must not end its new holder's.
	wantErrIs(t, "retried Release of the released permit", l.Release(ctx, name, p[1].ID()), fence.ErrNotHeld)
	wantPermitsFull(t, l, name, semN, "after a retried Release of the previous slot-1 lease")
	if err := l.Renew(ctx, name, q.ID(), longTTL); err != nil {
		t.Fatalf("Renew by slot 1's new holder = %v; want nil", err)
	}
}

func (s *lockerSuite) semExpiry(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	ttl := s.cfg.shortTTL
	name := uniqueName(t, "")
	start := time.Now() // the store's expiry of both is at least start+ttl
	a := acquire(t, l, name, ttl, fence.WithLimit(2))
	b := acquire(t, l, name, ttl, fence.WithLimit(2))
	// Renewing a must not renew b: b alone expires.
	if err := a.Renew(ctx, longTTL); err != nil {
		if errors.Is(err, fence.ErrNotHeld) && time.Since(start) >= ttl {
			t.Skipf("inconclusive: Renew ran %v after a %v permit was requested (slow machine)", time.Since(start), ttl)
		}
		t.Fatalf("Renew(%v) of slot 0 right after its Acquire(%v) = %v; want nil", longTTL, ttl, err)
	}
	c, err := l.Acquire(ctx, name, longTTL, fence.WithLimit(2), fence.WithWait(longWait))
	got := time.Since(start)
	if err != nil {
		t.Fatalf("Acquire with wait of a permit held until %v leases expire = %v; want slot 1 once it expires", ttl, err)
	}
	releaseAtCleanup(t, c)
	if got < ttl {
		t.Fatalf("permit granted %v after two %v permits were requested, before either expired", got, ttl)
	}
	if got > ttl+promptly {
		t.Errorf("permit granted %v after a %v permit was requested; want within %v of its expiry", got, ttl, promptly)
	}
	if c.Slot() != b.Slot() || c.Token() <= b.Token() {
		t.Fatalf("permit after slot %d expired has slot %d, token %d; want slot %d and a token above %d", b.Slot(), c.Slot(), c.Token(), b.Slot(), b.Token())
	}
	wantPermitsFull(t, l, name, 2, "after the expired permit was taken again (the renewed one is live)")
	if err := l.Renew(ctx, name, a.ID(), longTTL); err != nil {
		t.Fatalf("Renew of the renewed permit after the other expired = %v; want nil", err)
	}
	wantErrIs(t, "Renew of the expired permit", l.Renew(ctx, name, b.ID(), longTTL), fence.ErrNotHeld)
	wantErrIs(t, "Release of the expired permit", l.Release(ctx, name, b.ID()), fence.ErrNotHeld)
	// P7: the expired permit's Done closed at its deadline, as a lock's does.
	wantDone(t, b, promptly, "expired permit")
	wantErrIs(t, "Err() of the expired permit", b.Err(), fence.ErrNotHeld)
	if got := context.Cause(b.Context()); got != b.Err() {
		t.Fatalf("context.Cause(Context()) of the expired permit = %v; want Err() = %v", got, b.Err())
	}
	wantOpen(t, a, "renewed permit")
}

func (s *lockerSuite) semWaitWoken(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	p := acquirePermits(t, l, name, 2, 2)
	ch := goAcquire(ctx, l, name, longTTL, fence.WithLimit(2), fence.WithWait(longWait))
	s.settle(t, ch, "waiting for a permit while all are held")
	released := time.Now()
	if err := p[0].Release(ctx); err != nil {
		t.Fatalf("Release of slot 0 = %v", err)
	}
	if w := wantGranted(t, ch, "one permit's Release", released, p...); w.Slot() != 0 {
		t.Fatalf("waiter got slot %d; want the released slot 0", w.Slot())
	}
	wantPermitsFull(t, l, name, 2, "after the waiter took the released permit")
}

func (s *lockerSuite) semWaitCancel(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	name := uniqueName(t, "")
	acquirePermits(t, l, name, 2, 2)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	ch := goAcquire(ctx, l, name, longTTL, fence.WithLimit(2), fence.WithWait(fence.WaitForever))
	s.settle(t, ch, "waiting forever for a permit while all are held")
	cancelled := time.Now()
	cancel()
	wantGaveUp(t, ch, context.Canceled, "was cancelled", cancelled)
}

// wantHolders fails unless info reports name held, with holders being the live
// leases in the order given (with their owners in owners, by lease), and
// Token, Owner and ExpiresIn those of the holder with the highest token.
func wantHolders(t *testing.T, info fence.LockInfo, holders []*fence.Lease, owners map[*fence.Lease]string, limit int, shared bool) {
	t.Helper()
	top := holders[0]
	for _, h := range holders {
		if h.Token() > top.Token() {
			top = h
		}
		if strings.Contains(fmt.Sprintf("%+v", info), h.ID()) {
			t.Fatalf("Inspect = %+v; it must never carry a lease id", info)
		}
	}
	if !info.Held || info.Limit != limit || info.Shared != shared || info.Token != top.Token() || info.Owner != owners[top] ||
		info.LastToken < top.Token() || info.ExpiresIn <= 0 || info.ExpiresIn > longTTL {
		t.Fatalf("Inspect = %+v; want Held, Limit %d, Shared %v, Token %d and Owner %q (the highest token's), LastToken >= %d, ExpiresIn in (0, %v]",
			info, limit, shared, top.Token(), owners[top], top.Token(), longTTL)
	}
	if len(info.Holders) != len(holders) {
		t.Fatalf("Inspect reports %d holders, %+v; want %d", len(info.Holders), info.Holders, len(holders))
	}
	for i, h := range holders {
		got := info.Holders[i]
		if got.Slot != h.Slot() || got.Token != h.Token() || got.Owner != owners[h] || got.ExpiresIn <= 0 || got.ExpiresIn > longTTL {
			t.Fatalf("Inspect's holder %d = %+v; want slot %d, token %d, owner %q, ExpiresIn in (0, %v] (holders: %+v)", i, got, h.Slot(), h.Token(), owners[h], longTTL, info.Holders)
		}
	}
}

func (s *lockerSuite) semInspector(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	in := probe[fence.Inspector](t, l)
	ctx := testContext(t)
	name := uniqueName(t, "")
	owners := map[*fence.Lease]string{}
	var p []*fence.Lease
	for i := range semN {
		owner := fmt.Sprintf("worker-%d", i)
		if i == semN-1 {
			owner = "" // no owner is reported as none
		}
		lease := acquire(t, l, name, longTTL, fence.WithLimit(semN), fence.WithOwner(owner))
		owners[lease] = owner
		p = append(p, lease)
	}
	info, err := in.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	wantHolders(t, info, p, owners, semN, false)
	// Slot 1 released, and slot 0 taken last: holders are listed by slot.
	for _, i := range []int{1, 0} {
		if err := p[i].Release(ctx); err != nil {
			t.Fatalf("Release of slot %d = %v", i, err)
		}
	}
	q := acquire(t, l, name, longTTL, fence.WithLimit(semN), fence.WithOwner("late"))
	owners[q] = "late"
	if info, err = in.Inspect(ctx, name); err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	wantHolders(t, info, []*fence.Lease{q, p[2]}, owners, semN, false)
	for _, lease := range []*fence.Lease{q, p[2]} {
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
	}
	if info, err = in.Inspect(ctx, name); err != nil || info.Held || len(info.Holders) != 0 || info.Limit != 0 || info.LastToken < q.Token() {
		t.Fatalf("Inspect after every permit's release = %+v, %v; want not Held, no Holders, Limit 0, LastToken >= %d", info, err, q.Token())
	}
}

// revokeEndsEvery checks Revoke of name, whose live leases are held: a waiter
// (an acquire with waiterOpts and a wait) is woken promptly with a token above
// every held one, and every held lease's Renew and Release then say ErrNotHeld.
// It returns the waiter's lease.
func (s *lockerSuite) revokeEndsEvery(t *testing.T, l fence.Locker, name string, held []*fence.Lease, waiterOpts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	rv := probe[fence.Revoker](t, l)
	ctx := testContext(t)
	ch := goAcquire(ctx, l, name, longTTL, append(waiterOpts, fence.WithWait(longWait))...)
	s.settle(t, ch, "waiting while the name is held")
	revoked := time.Now()
	if err := rv.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke with %d live leases = %v; want nil", len(held), err)
	}
	w := wantGranted(t, ch, "Revoke", revoked, held...)
	for _, h := range held {
		wantErrIs(t, fmt.Sprintf("Renew of revoked token %d", h.Token()), l.Renew(ctx, name, h.ID(), longTTL), fence.ErrNotHeld)
		wantErrIs(t, fmt.Sprintf("Release of revoked token %d", h.Token()), l.Release(ctx, name, h.ID()), fence.ErrNotHeld)
	}
	return w
}

func (s *lockerSuite) semRevoker(t *testing.T, l fence.Locker) {
	needSemaphores(t, l)
	name := uniqueName(t, "")
	p := acquirePermits(t, l, name, semN, semN)
	w := s.revokeEndsEvery(t, l, name, p, fence.WithLimit(semN))
	if w.Slot() != 0 {
		t.Fatalf("waiter after Revoke of every permit has slot %d; want 0", w.Slot())
	}
	// Every permit was freed: the other slots are free too.
	for _, want := range []int{1, 2} {
		lease, err := fence.TryAcquire(testContext(t), l, name, longTTL, fence.WithLimit(semN))
		if err != nil {
			t.Fatalf("TryAcquire after Revoke = %v; want slot %d (Revoke ends every permit)", err, want)
		}
		releaseAtCleanup(t, lease)
		if lease.Slot() != want {
			t.Fatalf("TryAcquire after Revoke got slot %d; want %d", lease.Slot(), want)
		}
	}
}

func (s *lockerSuite) semBadLimits(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	for _, n := range []int{0, -1, fence.MaxLimit + 1} {
		lease, err := l.Acquire(ctx, name, longTTL, fence.WithLimit(n))
		if lease != nil {
			releaseAtCleanup(t, lease)
		}
		wantInvalid(t, fmt.Sprintf("Acquire with WithLimit(%d)", n), err, "limit")
	}
	lease, err := l.Acquire(ctx, name, longTTL, fence.WithLimit(semN), fence.WithShared())
	if lease != nil {
		releaseAtCleanup(t, lease)
	}
	wantInvalid(t, fmt.Sprintf("Acquire with WithLimit(%d) and WithShared", semN), err, "limit")
	if fence.FeaturesOf(l).Semaphores {
		if lease := acquire(t, l, name, longTTL, fence.WithLimit(fence.MaxLimit)); lease.Slot() != 0 {
			t.Fatalf("the first permit of WithLimit(MaxLimit) has slot %d; want 0", lease.Slot())
		}
		return
	}
	acquire(t, l, name, longTTL) // bad limits changed nothing
}

func (s *lockerSuite) semLimit1(t *testing.T, l fence.Locker) {
	ctx := testContext(t)
	name := uniqueName(t, "")
	a := acquire(t, l, name, longTTL, fence.WithLimit(1))
	if a.Slot() != 0 {
		t.Fatalf("WithLimit(1) lease has slot %d; want 0", a.Slot())
	}
	wantHeld(t, l, name, "a lock's acquire while a WithLimit(1) lease is live")
	wantHeld(t, l, name, "a WithLimit(1) acquire while a WithLimit(1) lease is live", fence.WithLimit(1))
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of the WithLimit(1) lease = %v", err)
	}
	b := acquire(t, l, name, longTTL)
	if b.Token() <= a.Token() {
		t.Fatalf("lock's token after a WithLimit(1) lease = %d; want > %d", b.Token(), a.Token())
	}
	wantHeld(t, l, name, "a WithLimit(1) acquire while a lock's lease is live", fence.WithLimit(1))
}

// wantNotImplemented checks that an acquire of name with opts (what describes
// them) is refused with ErrNotImplemented, promptly even with a wait, and that
// it changed nothing: a lock on name is then granted.
func wantNotImplemented(t *testing.T, l fence.Locker, what string, opts ...fence.AcquireOption) {
	t.Helper()
	ctx := testContext(t)
	name := uniqueName(t, "")
	for _, wait := range []time.Duration{0, longWait} {
		start := time.Now()
		lease, err := l.Acquire(ctx, name, longTTL, append(opts, fence.WithWait(wait))...)
		if err == nil {
			releaseAtCleanup(t, lease)
			t.Fatalf("Acquire with %s on %T, which does not declare it, granted token %d; want ErrNotImplemented", what, l, lease.Token())
		}
		wantErrIs(t, fmt.Sprintf("Acquire with %s and wait %v on %T, which does not declare it", what, wait, l), err, fence.ErrNotImplemented)
		if d := time.Since(start); d > promptly {
			t.Fatalf("Acquire with %s and wait %v took %v; want ErrNotImplemented within %v", what, wait, d, promptly)
		}
	}
	acquire(t, l, name, longTTL)
}

func (s *lockerSuite) semUndeclared(t *testing.T, l fence.Locker) {
	if fence.FeaturesOf(l).Semaphores {
		t.Skipf("%T declares Features.Semaphores", l)
	}
	wantNotImplemented(t, l, fmt.Sprintf("WithLimit(%d)", semN), fence.WithLimit(semN))
}
