package redis

import (
	"errors"
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
