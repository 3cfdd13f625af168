package inmem_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

func newManual(t *testing.T) (*inmem.Locker, *inmem.ManualClock) {
	t.Helper()
	c := inmem.NewManualClock(t0)
	return inmem.NewLocker(inmem.Options{Clock: c}), c
}

// waitPending waits (at most 5s) until n callbacks are scheduled on c.
func waitPending(t *testing.T, c *inmem.ManualClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitPending(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func mustAcquire(t *testing.T, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(context.Background(), name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v) = %v, want a lease", name, ttl, err)
	}
	return lease
}

// acquired is the outcome of an Acquire run by acquireLater.
type acquired struct {
	lease *fence.Lease
	err   error
}

// acquireLater runs an Acquire of name on l that waits at most wait, in its own
// goroutine; the channel gets its outcome.
func acquireLater(l fence.Locker, name string, ttl, wait time.Duration) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(context.Background(), name, ttl, fence.WithWait(wait))
		got <- acquired{lease, err}
	}()
	return got
}

// await returns the outcome acquireLater sends on got, and fails t with notWoken if
// none comes within 5s (real time: the waits run on a manual clock).
func await(t *testing.T, got <-chan acquired, notWoken string) acquired {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal(notWoken)
		return acquired{}
	}
}

func TestLocker_Expiry_JudgedByInjectedClock(t *testing.T) {
	l, c := newManual(t)
	ctx := context.Background()
	a := mustAcquire(t, l, "job", time.Second)
	c.Advance(999 * time.Millisecond)
	_, err := l.Acquire(ctx, "job", time.Second)
	var held *fence.HeldError
	if !errors.As(err, &held) || held.ExpiresIn != time.Millisecond {
		t.Fatalf("Acquire 1ms before expiry = %v, want *HeldError with ExpiresIn 1ms", err)
	}
	c.Advance(time.Millisecond)
	select {
	case <-a.Done():
	default:
		t.Fatal("lease Done still open at its deadline on the manual clock")
	}
	b := mustAcquire(t, l, "job", time.Second)
	if b.Token() <= a.Token() {
		t.Fatalf("token after expiry = %d, want > %d", b.Token(), a.Token())
	}
	if err := l.Renew(ctx, "job", a.ID(), time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of the expired lease = %v, want ErrNotHeld", err)
	}
}

func TestLocker_Wait_WokenByExpiryOnManualClock(t *testing.T) {
	l, c := newManual(t)
	a := mustAcquire(t, l, "job", time.Second)
	got := acquireLater(l, "job", time.Second, fence.WaitForever)
	waitPending(t, c, 2) // a's expiry and the waiter's timer for it
	c.Advance(time.Second)
	r := await(t, got, "waiting Acquire not woken by the holder's expiry on the manual clock")
	if r.err != nil {
		t.Fatalf("waiting Acquire = %v, want a lease after the holder's expiry", r.err)
	}
	if r.lease.Token() <= a.Token() {
		t.Fatalf("waiter's token %d, want > the expired holder's %d", r.lease.Token(), a.Token())
	}
}

func TestLocker_Wait_BoundedByManualClock(t *testing.T) {
	l, c := newManual(t)
	mustAcquire(t, l, "job", time.Hour)
	got := acquireLater(l, "job", time.Second, 10*time.Second)
	waitPending(t, c, 3) // lease expiry, wait bound, waiter's expiry timer
	c.Advance(10 * time.Second)
	if r := await(t, got, "Acquire did not give up when the manual clock passed its wait"); !errors.Is(r.err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire after its wait = %v, want ErrNotAcquired", r.err)
	}
}

func TestLocker_Heal_RaisesCounterNeverLowers(t *testing.T) {
	l, _ := newManual(t)
	ctx := context.Background()
	a := mustAcquire(t, l, "job", time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Heal(ctx, "job", 100); err != nil {
		t.Fatalf("Heal(100) = %v", err)
	}
	if err := l.Heal(ctx, "job", 5); err != nil {
		t.Fatalf("Heal(5) = %v", err)
	}
	b := mustAcquire(t, l, "job", time.Second)
	if b.Token() != 101 {
		t.Fatalf("token after Heal(100), Heal(5) = %d, want 101", b.Token())
	}
	if err := l.Heal(ctx, "job", 0); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Heal(0) = %v, want ErrInvalid", err)
	}
}

// A counter healed to fence.MaxToken fails closed, for its name only.
func TestLocker_TokenExhausted_FailsClosed(t *testing.T) {
	l, _ := newManual(t)
	ctx := context.Background()
	l.SetCounter("job", fence.MaxToken-fence.MaxHealAhead)
	if err := l.Heal(ctx, "job", fence.MaxToken); err != nil {
		t.Fatal(err)
	}
	_, err := l.Acquire(ctx, "job", time.Second)
	if !errors.Is(err, fence.ErrTokenExhausted) {
		t.Fatalf("Acquire at MaxToken = %v, want ErrTokenExhausted", err)
	}
	if a := mustAcquire(t, l, "other", time.Second); a.Token() != 1 {
		t.Fatalf("Acquire(other) after job's counter reached MaxToken: token %d, want 1", a.Token())
	}
}

// Issue 29 on the reference implementation: a heal as large as the bound allows
// moves its own name's counter and no other's, a heal beyond the bound (the
// issue's 9007199254740991 among them) is refused with a *fence.HealBoundError
// and changes nothing, and the healed name's next grant is above seen.
func TestLocker_Heal_OnlyOwnNameWithinMaxHealAhead(t *testing.T) {
	l, _ := newManual(t)
	ctx := context.Background()
	grant := func(name string) fence.Token {
		t.Helper()
		a := mustAcquire(t, l, name, time.Second)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return a.Token()
	}
	a1, b1 := grant("jobs/x"), grant("other/b")
	for _, seen := range []fence.Token{fence.MaxToken, a1 + fence.MaxHealAhead + 1} {
		err := l.Heal(ctx, "jobs/x", seen)
		var hb *fence.HealBoundError
		if !errors.As(err, &hb) || !errors.Is(err, fence.ErrInvalid) || hb.Name != "jobs/x" || hb.Seen != seen || hb.Last != a1 {
			t.Fatalf("Heal(jobs/x, %d) = %v; want a *fence.HealBoundError{jobs/x, %d, last %d} matching ErrInvalid", seen, err, seen, a1)
		}
	}
	if info, _ := l.Inspect(ctx, "jobs/x"); info.LastToken != a1 {
		t.Fatalf("jobs/x after the refused heals: LastToken %d, want %d (unchanged)", info.LastToken, a1)
	}
	seen := a1 + fence.MaxHealAhead
	if err := l.Heal(ctx, "jobs/x", seen); err != nil {
		t.Fatalf("Heal(jobs/x, last+MaxHealAhead) = %v, want nil", err)
	}
	if a := grant("jobs/x"); a <= seen {
		t.Fatalf("jobs/x after Heal(%d): token %d, want above it", seen, a)
	}
	if b := grant("other/b"); b != b1+1 {
		t.Fatalf("other/b after jobs/x was healed: token %d, want %d, as without the heal", b, b1+1)
	}
	if err := l.Heal(ctx, "never/used", fence.MaxHealAhead); err != nil {
		t.Fatalf("Heal(never/used, MaxHealAhead) = %v, want nil (last token 0)", err)
	}
}

func TestLocker_SnapshotRestore_EmulatesLossyFailover(t *testing.T) {
	l, _ := newManual(t)
	ctx := context.Background()
	a := mustAcquire(t, l, "job", time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	snap := l.Snapshot() // the replica saw token 1, released
	b := mustAcquire(t, l, "job", time.Second)
	if b.Token() != 2 {
		t.Fatalf("second token = %d, want 2", b.Token())
	}
	l.Restore(snap)

	// The lock key of b is lost, and its counter increment with it.
	if err := l.Renew(ctx, "job", b.ID(), time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of a lease granted after the snapshot = %v, want ErrNotHeld", err)
	}
	c := mustAcquire(t, l, "job", time.Second)
	if c.Token() != 2 {
		t.Fatalf("token after restore = %d, want 2 again (the regression a guard must catch)", c.Token())
	}
	g := inmem.NewGuard()
	if err := g.Put(ctx, "k", []byte("b"), b.Fence()); err != nil {
		t.Fatal(err)
	}
	err := g.Put(ctx, "k", []byte("c"), c.Fence())
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || !st.SameToken {
		t.Fatalf("guard Put of the reissued token = %v, want *StaleTokenError with SameToken", err)
	}
	if err := fence.Heal(ctx, l, "job", err); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d := mustAcquire(t, l, "job", time.Second)
	if d.Token() != 3 {
		t.Fatalf("token after heal = %d, want 3", d.Token())
	}
}

func TestLocker_Restore_WakesWaiters(t *testing.T) {
	l, c := newManual(t)
	snap := l.Snapshot() // empty
	mustAcquire(t, l, "job", time.Hour)
	got := acquireLater(l, "job", time.Second, fence.WaitForever)
	waitPending(t, c, 2) // lease expiry + the waiter's expiry timer
	l.Restore(snap)
	if r := await(t, got, "waiter not woken by Restore"); r.err != nil {
		t.Fatalf("waiter after Restore(empty) = %v, want a lease", r.err)
	}
}

func TestLocker_InspectList(t *testing.T) {
	l, c := newManual(t)
	ctx := context.Background()
	mustAcquire(t, l, "b/1", time.Second)
	mustAcquire(t, l, "a/1", time.Minute)
	mustAcquire(t, l, "a/2", 2*time.Second)
	c.Advance(1500 * time.Millisecond)

	info, err := l.Inspect(ctx, "a/2")
	if err != nil {
		t.Fatal(err)
	}
	want := fence.LockInfo{Name: "a/2", Held: true, Token: 1, LastToken: 1, ExpiresIn: 500 * time.Millisecond}
	if !reflect.DeepEqual(info, want) {
		t.Fatalf("Inspect(a/2) = %+v, want %+v", info, want)
	}
	list, err := l.List(ctx, fence.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name)
	}
	if len(list) != 3 || names[0] != "a/1" || names[1] != "a/2" || names[2] != "b/1" || list[2].Held {
		t.Fatalf("List(All) = %+v, want a/1, a/2 held and b/1 expired, in order", list)
	}
	// Held only, by the Locker's clock: b/1's lease expired, unreleased.
	list, err = l.List(ctx, fence.ListOptions{})
	if err != nil || len(list) != 2 || list[0].Name != "a/1" || list[1].Name != "a/2" {
		t.Fatalf("List(held) = %+v, %v; want a/1 and a/2, not the expired b/1", list, err)
	}
	list, _ = l.List(ctx, fence.ListOptions{Prefix: "a/", Limit: 1})
	if len(list) != 1 || list[0].Name != "a/1" {
		t.Fatalf("List(a/, 1) = %+v, want only a/1", list)
	}
	info, err = l.Inspect(ctx, "never")
	if err != nil || !reflect.DeepEqual(info, fence.LockInfo{Name: "never"}) {
		t.Fatalf("Inspect(never) = %+v, %v; want zero info and nil", info, err)
	}
}

func TestLocker_Release_ExpiredOwnLease_NotHeld(t *testing.T) {
	l, c := newManual(t)
	a := mustAcquire(t, l, "job", time.Second)
	c.Advance(time.Second)
	err := l.Release(context.Background(), "job", a.ID())
	if !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
	}
}
