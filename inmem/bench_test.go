package inmem_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

func BenchmarkLocker_AcquireRelease(b *testing.B) {
	fencetest.BenchmarkAcquireRelease(b, inmem.NewLocker(inmem.Options{}))
}

// Each goroutine takes its own names: the cost of the Locker's one mutex.
func BenchmarkLocker_AcquireRelease_ParallelNames(b *testing.B) {
	var id atomic.Int64
	acquireReleaseParallel(b, func() string { return fmt.Sprintf("bench-%d", id.Add(1)) })
}

// All goroutines contend for one name with WithWait: the cost of a handoff.
func BenchmarkLocker_Handoff_OneName(b *testing.B) {
	acquireReleaseParallel(b, func() string { return "bench" }, fence.WithWait(fence.WaitForever))
}

// acquireReleaseParallel runs Acquire (with opts) and Release pairs on one Locker in
// b.RunParallel's goroutines, each on the name that name returns for it.
func acquireReleaseParallel(b *testing.B, name func() string, opts ...fence.AcquireOption) {
	ctx := context.Background()
	l := inmem.NewLocker(inmem.Options{})
	b.RunParallel(func(pb *testing.PB) {
		name := name()
		for pb.Next() {
			lease, err := l.Acquire(ctx, name, time.Minute, opts...)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The handoff after a release (see fencetest.BenchmarkHandoff): one waiter at a
// time, woken by the holder's Release.
func BenchmarkLocker_Handoff(b *testing.B) {
	l := inmem.NewLocker(inmem.Options{})
	fencetest.BenchmarkHandoff(b, l, l)
}

func BenchmarkGuard_Put(b *testing.B) {
	ctx := context.Background()
	g := inmem.NewGuard()
	f := fence.Fence{Name: "bench", Token: 1, LeaseID: driver.NewLeaseID()}
	v := []byte("value")
	for b.Loop() {
		if err := g.Put(ctx, "key", v, f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGuard_Put_ParallelKeys(b *testing.B) {
	ctx := context.Background()
	g := inmem.NewGuard()
	var id atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("key-%d", id.Add(1))
		f := fence.Fence{Name: "bench", Token: 1, LeaseID: driver.NewLeaseID()}
		v := []byte("value")
		for pb.Next() {
			if err := g.Put(ctx, key, v, f); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Advancing through 1000 pending timers: the heap keeps it O(log n) per timer.
func BenchmarkManualClock_Advance1000Timers(b *testing.B) {
	c := inmem.NewManualClock(t0)
	noop := func() {}
	for b.Loop() {
		for i := 0; i < 1000; i++ {
			c.AfterFunc(time.Duration(i%100)*time.Millisecond, noop)
		}
		c.Advance(time.Second)
	}
}

// The handoff after an expiry (see fencetest.BenchmarkExpiryHandoff), by the system
// clock: a holder never releases a 100ms lease, a waiter is already waiting.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./inmem/
func BenchmarkLocker_ExpiryHandoff(b *testing.B) {
	l := inmem.NewLocker(inmem.Options{})
	fencetest.BenchmarkExpiryHandoff(b, l, l, 100*time.Millisecond)
}
