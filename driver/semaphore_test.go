package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

func TestEngine_Kind_ValidatedAndNormalisedBeforeAnyTry(t *testing.T) {
	all := fence.Features{Semaphores: true, Shared: true}
	for _, tc := range []struct {
		name     string
		features fence.Features
		opts     []fence.AcquireOption
		want     error // nil: the try sees wantLimit and wantShared
		limit    int
		shared   bool
	}{
		{"lock", fence.Features{}, nil, nil, 0, false},
		{"limit 1 is a lock", fence.Features{}, []fence.AcquireOption{fence.WithLimit(1)}, nil, 0, false},
		{"semaphore", all, []fence.AcquireOption{fence.WithLimit(3)}, nil, 3, false},
		{"shared", all, []fence.AcquireOption{fence.WithShared()}, nil, 0, true},
		{"shared limit 1", all, []fence.AcquireOption{fence.WithShared(), fence.WithLimit(1)}, nil, 0, true},
		{"limit 0", all, []fence.AcquireOption{fence.WithLimit(0)}, fence.ErrInvalid, 0, false},
		{"limit -1", all, []fence.AcquireOption{fence.WithLimit(-1)}, fence.ErrInvalid, 0, false},
		{"limit over max", all, []fence.AcquireOption{fence.WithLimit(fence.MaxLimit + 1)}, fence.ErrInvalid, 0, false},
		{"shared semaphore", all, []fence.AcquireOption{fence.WithLimit(2), fence.WithShared()}, fence.ErrInvalid, 0, false},
		{"no semaphores", fence.Features{Shared: true}, []fence.AcquireOption{fence.WithLimit(2)}, fence.ErrNotImplemented, 0, false},
		{"no shared", fence.Features{Semaphores: true}, []fence.AcquireOption{fence.WithShared()}, fence.ErrNotImplemented, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := engine()
			e.Features = tc.features
			tried := false
			_, err := e.Grant(context.Background(), "job", time.Minute, tc.opts, func(_ context.Context, r *driver.Request) (driver.Result, error) {
				tried = true
				if r.Options.Limit != tc.limit || r.Options.Shared != tc.shared || r.Options.LimitSet {
					t.Errorf("options = %+v; want limit %d, shared %v", r.Options, tc.limit, tc.shared)
				}
				return driver.Result{Token: 1, Slot: max(r.Options.Limit-1, 0)}, nil
			})
			if tc.want == nil {
				if err != nil || !tried {
					t.Fatalf("Grant = %v (tried %v); want a grant", err, tried)
				}
				return
			}
			if !errors.Is(err, tc.want) || tried {
				t.Fatalf("Grant = %v (tried %v); want %v before any try", err, tried, tc.want)
			}
		})
	}
}

func TestEngine_Slot_CarriedToTheLease(t *testing.T) {
	e := engine()
	e.Features.Semaphores = true
	lease, err := e.Acquire(context.Background(), "job", time.Minute, []fence.AcquireOption{fence.WithLimit(4)}, func(context.Context, *driver.Request) (driver.Result, error) {
		return driver.Result{Token: 9, Slot: 3}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if lease.Slot() != 3 || lease.Token() != 9 {
		t.Fatalf("slot %d token %d; want 3 and 9", lease.Slot(), lease.Token())
	}
}

func TestDecide(t *testing.T) {
	now := time.Unix(1000, 0)
	in := func(d time.Duration) time.Time { return now.Add(d) }
	permit := func(slot int, exp time.Duration) driver.Holding {
		return driver.Holding{ID: "p", Token: fence.Token(slot + 1), Slot: slot, Limit: 3, Expires: in(exp)}
	}
	shared := func(exp time.Duration) driver.Holding {
		return driver.Holding{ID: "s", Token: 1, Shared: true, Expires: in(exp)}
	}
	lock := driver.Holding{ID: "l", Token: 1, Expires: in(time.Second)}
	req := func(limit int, sh, waiting bool) *driver.Request {
		return &driver.Request{Name: "n", TTL: 10 * time.Second, Options: driver.AcquireOptions{Limit: limit, Shared: sh}, Waiting: waiting, WaitLeft: fence.WaitForever}
	}
	for _, tc := range []struct {
		name   string
		r      *driver.Request
		live   []driver.Holding
		waiter time.Time
		want   driver.Decision
		limit  *fence.LimitError
	}{
		{"free lock", req(0, false, false), nil, time.Time{}, driver.Decision{Grant: true}, nil},
		{"held lock", req(0, false, false), []driver.Holding{lock}, time.Time{}, driver.Decision{ExpiresIn: time.Second}, nil},
		{"expired lock is free", req(0, false, false), []driver.Holding{{ID: "l", Token: 1, Expires: now}}, time.Time{}, driver.Decision{Grant: true}, nil},
		{"lowest free slot", req(3, false, false), []driver.Holding{permit(0, time.Second), permit(2, time.Second)}, time.Time{}, driver.Decision{Grant: true, Slot: 1}, nil},
		{"expired slot reused", req(3, false, false), []driver.Holding{permit(0, 0), permit(1, time.Second), permit(2, time.Second)}, time.Time{}, driver.Decision{Grant: true, Slot: 0}, nil},
		{"all permits held", req(3, false, false), []driver.Holding{permit(0, 3*time.Second), permit(1, time.Second), permit(2, 2*time.Second)}, time.Time{}, driver.Decision{ExpiresIn: time.Second}, nil},
		{"other limit", req(5, false, false), []driver.Holding{permit(1, time.Second)}, time.Time{}, driver.Decision{}, &fence.LimitError{Name: "n", Limit: 5, Held: 3}},
		{"semaphore on a lock", req(3, false, false), []driver.Holding{lock}, time.Time{}, driver.Decision{}, &fence.LimitError{Name: "n", Limit: 3, Held: 1}},
		{"lock on a semaphore", req(0, false, false), []driver.Holding{permit(0, time.Second)}, time.Time{}, driver.Decision{}, &fence.LimitError{Name: "n", Limit: 1, Held: 3}},
		{"shared joins shared", req(0, true, false), []driver.Holding{shared(time.Second)}, time.Time{}, driver.Decision{Grant: true}, nil},
		{"shared waits for exclusive", req(0, true, true), []driver.Holding{lock}, time.Time{}, driver.Decision{ExpiresIn: time.Second}, nil},
		{"shared held off by a waiting writer", req(0, true, false), []driver.Holding{shared(time.Second)}, in(4 * time.Second), driver.Decision{ExpiresIn: 4 * time.Second}, nil},
		{"writer record over", req(0, true, false), []driver.Holding{shared(time.Second)}, now, driver.Decision{Grant: true}, nil},
		{"exclusive waits for the last reader and marks", req(0, false, true), []driver.Holding{shared(time.Second), shared(3 * time.Second)}, time.Time{}, driver.Decision{ExpiresIn: 3 * time.Second, MarkWaiter: true, Retry: 3 * time.Second}, nil},
		{"a short-lived waiter retries within its record", &driver.Request{Name: "n", TTL: 2 * time.Second, Waiting: true, WaitLeft: fence.WaitForever}, []driver.Holding{shared(time.Minute)}, time.Time{}, driver.Decision{ExpiresIn: time.Minute, MarkWaiter: true, Retry: time.Second}, nil},
		{"exclusive try does not mark", req(0, false, false), []driver.Holding{shared(time.Second)}, time.Time{}, driver.Decision{ExpiresIn: time.Second}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := driver.Decide(tc.r, tc.live, now, tc.waiter)
			if tc.limit != nil {
				var le *fence.LimitError
				if !errors.As(err, &le) || *le != *tc.limit || !errors.Is(err, fence.ErrInvalid) {
					t.Fatalf("Decide = %+v, %v; want %+v", got, err, tc.limit)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Decide = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestDecide_SharedAtMaxLimitIsHeld(t *testing.T) {
	now := time.Unix(1000, 0)
	live := make([]driver.Holding, fence.MaxLimit)
	for i := range live {
		live[i] = driver.Holding{ID: "s", Token: fence.Token(i + 1), Shared: true, Expires: now.Add(time.Second)}
	}
	r := &driver.Request{Name: "n", TTL: time.Second, Options: driver.AcquireOptions{Shared: true}}
	if d, err := driver.Decide(r, live, now, time.Time{}); err != nil || d.Grant {
		t.Fatalf("Decide with MaxLimit shared holders = %+v, %v; want held", d, err)
	}
}

func TestWaiterFor(t *testing.T) {
	r := &driver.Request{TTL: 10 * time.Second, Waiting: true, WaitLeft: fence.WaitForever}
	if got := driver.WaiterFor(r); got != 10*time.Second {
		t.Fatalf("WaiterFor(forever) = %v; want the TTL", got)
	}
	r.WaitLeft = 2 * time.Second
	if got := driver.WaiterFor(r); got != 2*time.Second {
		t.Fatalf("WaiterFor(2s left) = %v; want 2s", got)
	}
	r.WaitLeft = 0 // the last try of a wait that is over
	if got := driver.WaiterFor(r); got != 0 {
		t.Fatalf("WaiterFor(nothing left) = %v; want 0, not the TTL", got)
	}
}

func TestInfo_HoldersInSlotOrderHighestTokenOnTop(t *testing.T) {
	now := time.Unix(1000, 0)
	live := []driver.Holding{
		{ID: "a", Token: 7, Owner: "x", Slot: 2, Limit: 3, Expires: now.Add(2 * time.Second)},
		{ID: "b", Token: 9, Owner: "y", Slot: 0, Limit: 3, Expires: now.Add(time.Second)},
		{ID: "c", Token: 8, Slot: 1, Limit: 3, Expires: now},
	}
	info := driver.Info("n", live, 9, now)
	if !info.Held || info.Token != 9 || info.Owner != "y" || info.ExpiresIn != time.Second || info.Limit != 3 || info.LastToken != 9 {
		t.Fatalf("Info = %+v", info)
	}
	if len(info.Holders) != 2 || info.Holders[0].Slot != 0 || info.Holders[1].Slot != 2 || info.Holders[1].Owner != "x" {
		t.Fatalf("Holders = %+v; want slots 0 and 2 (the expired slot 1 left out)", info.Holders)
	}
	lock := driver.Info("n", []driver.Holding{{ID: "l", Token: 3, Expires: now.Add(time.Second)}}, 3, now)
	if lock.Holders != nil || lock.Limit != 0 || !lock.Held || lock.Token != 3 {
		t.Fatalf("Info of a lock = %+v; want no Holders", lock)
	}
}
