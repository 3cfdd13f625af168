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
