package redis

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// A plain lock's acquire runs lock.lua alone; on a name that shared leases hold
// (or a semaphore's) it leaves the decision to acquire.lua, which then refuses or
// reports the name held as before: two scripts, nothing granted.
func TestLocker_LockScript_DefersToAcquireScriptOnMultiLeases(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name, sem := uniqueName(t), uniqueName(t)
	shared := mustAcquire(t, ctx, l, name, time.Hour, fence.WithShared())
	defer shared.Release(ctx)
	permit := mustAcquire(t, ctx, l, sem, time.Hour, fence.WithLimit(2))
	defer permit.Release(ctx)
	warm := mustAcquire(t, ctx, l, uniqueName(t), time.Minute) // lock.lua in the script cache
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	c.AddHook(h)

	_, err := l.Acquire(ctx, name, time.Minute)
	var held *fence.HeldError
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &held) {
		t.Errorf("lock acquire on shared leases = %v; want ErrNotAcquired with a *fence.HeldError", err)
	}
	if got := h.scripts.Load(); got != 2 {
		t.Errorf("lock acquire on shared leases ran %d scripts; want 2 (lock.lua, then acquire.lua)", got)
	}
	_, err = l.Acquire(ctx, sem, time.Minute)
	var limit *fence.LimitError
	if !errors.As(err, &limit) || limit.Held != 2 || limit.Limit != 1 {
		t.Errorf("lock acquire on a semaphore of 2 = %v; want a *fence.LimitError (held with 2, not 1)", err)
	}

	free := uniqueName(t)
	h.scripts.Store(0)
	lease := mustAcquire(t, ctx, l, free, time.Minute)
	if got := h.scripts.Load(); got != 1 {
		t.Errorf("lock acquire on a free name ran %d scripts; want 1", got)
	}
	info, err := l.Inspect(ctx, free)
	if err != nil || !info.Held || info.Token != lease.Token() {
		t.Errorf("Inspect after lock.lua's grant = %+v, %v; want held with token %d", info, err, lease.Token())
	}
}

// lock.lua increments the counter before it tries the lock key: a try that finds
// the name taken undoes it, so the counter stays at the holder's token and the
// next grant's token is the next one.
func TestLocker_LockScript_TakenName_LeavesCounter(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	holder := mustAcquire(t, ctx, l, name, time.Minute)
	for range 3 {
		if _, err := l.Acquire(ctx, name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
			t.Fatalf("Acquire of a held name = %v; want ErrNotAcquired", err)
		}
	}
	if n, err := c.Get(ctx, k.token).Uint64(); err != nil || n != uint64(holder.Token()) {
		t.Errorf("counter after tries on a held name = %d, %v; want the holder's token %d", n, err, holder.Token())
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, ctx, l, name, time.Minute)
	defer next.Release(ctx)
	if next.Token() != holder.Token()+1 {
		t.Errorf("next token = %d; want %d (the tries on the held name issued none)", next.Token(), holder.Token()+1)
	}
}

// A release runs release.lua alone for a lock, and lease.lua alone for a
// semaphore or shared lease its Locker granted; a Locker that did not grant the
// lease (another process: `fence release`) learns from release.lua that the name
// holds such leases, and lease.lua then ends it: two scripts, the lease released.
func TestLocker_Release_ScriptsByKind(t *testing.T) {
	l, lc := newLocker(t, nil)
	other, oc := newLocker(t, nil)
	ctx := ctxT(t)
	for _, w := range []*Locker{l, other} { // every script in the cache
		release(t, ctx, mustAcquire(t, ctx, w, uniqueName(t), time.Minute, fence.WithLimit(2)))
		release(t, ctx, mustAcquire(t, ctx, w, uniqueName(t), time.Minute))
	}
	mine, others := &countHook{}, &countHook{}
	lc.AddHook(mine)
	oc.AddHook(others)
	for _, tc := range []struct {
		kind   string
		opts   []fence.AcquireOption
		others int64 // scripts of a release by a Locker that did not grant the lease
	}{
		{"lock", nil, 1},
		{"permit", []fence.AcquireOption{fence.WithLimit(2)}, 2},
		{"shared", []fence.AcquireOption{fence.WithShared()}, 2},
	} {
		name := uniqueName(t)
		own := mustAcquire(t, ctx, l, name, time.Minute, tc.opts...)
		mine.scripts.Store(0)
		release(t, ctx, own)
		if got := mine.scripts.Load(); got != 1 {
			t.Errorf("%s: release by the granting Locker ran %d scripts; want 1", tc.kind, got)
		}
		lease := mustAcquire(t, ctx, l, name, time.Minute, tc.opts...)
		others.scripts.Store(0)
		if err := other.Release(ctx, name, lease.ID()); err != nil {
			t.Fatalf("%s: Release by another Locker = %v; want nil", tc.kind, err)
		}
		if got := others.scripts.Load(); got != tc.others {
			t.Errorf("%s: release by another Locker ran %d scripts; want %d", tc.kind, got, tc.others)
		}
		if info, err := l.Inspect(ctx, name); err != nil || info.Held {
			t.Errorf("%s: Inspect after the release = %+v, %v; want free", tc.kind, info, err)
		}
		if err := lease.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("%s: release of the released lease = %v; want ErrNotHeld", tc.kind, err)
		}
	}
}

// multiLeases forgets leases past their deadline once it has grown past
// minPrune entries, and keeps the live ones.
func TestMultiLeases_DropsExpiredAsItGrows(t *testing.T) {
	var s multiLeases
	now := time.Now()
	for i := range minPrune - 1 {
		s.add(fmt.Sprint("old", i), now.Add(-time.Second), now.Add(-2*time.Second))
	}
	s.add("live", now.Add(time.Minute), now)
	if got := s.n.Load(); got != minPrune {
		t.Fatalf("entries = %d; want %d (no pruning below minPrune)", got, minPrune)
	}
	s.add("new", now.Add(time.Minute), now)
	if got := s.n.Load(); got != 2 {
		t.Errorf("entries after growing past minPrune = %d; want 2 (the expired ones dropped)", got)
	}
	if !s.take("live") || !s.take("new") || s.take("old0") || s.take("live") {
		t.Errorf("take after pruning: want live and new found once, old0 gone")
	}
	if got := s.n.Load(); got != 0 {
		t.Errorf("entries after taking all = %d; want 0", got)
	}
}

// lock.lua has fence.MaxToken written in: it grants the last token itself, in
// one script, and leaves the refusal past it to acquire.lua.
func TestLocker_LockScript_GrantsMaxTokenItself(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	release(t, ctx, mustAcquire(t, ctx, l, uniqueName(t), time.Minute)) // lock.lua in the script cache
	if err := c.Set(ctx, l.keysFor(name).token, uint64(fence.MaxToken-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	c.AddHook(h)
	lease := mustAcquire(t, ctx, l, name, time.Minute)
	if lease.Token() != fence.MaxToken || h.scripts.Load() != 1 {
		t.Errorf("acquire at MaxToken-1: token %d in %d scripts; want %d in 1", lease.Token(), h.scripts.Load(), fence.MaxToken)
	}
	release(t, ctx, lease)
}

// lock.lua and release.lua publish on the lock key with "wake" for its last four
// bytes: the wake channel of keysFor, for every kind of name.
func TestKeys_WakeIsLockKeyWithWakeSuffix(t *testing.T) {
	l, _ := newLocker(t, nil)
	for _, name := range []string{"a", "x{y}z", "%", "ünï"} {
		k := l.keysFor(name)
		if got := k.lock[:len(k.lock)-4] + "wake"; got != k.wake {
			t.Errorf("keys of %q: lock key %q with wake = %q; want the wake channel %q", name, k.lock, got, k.wake)
		}
	}
}
