package fencetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// BenchmarkAcquireRelease measures an uncontended Acquire (10s TTL, no wait) and
// Release of one lock on l, the same way on every backend: ns/op is one pair.
func BenchmarkAcquireRelease(b *testing.B, l fence.Locker) {
	b.Helper()
	ctx := context.Background()
	name := uniqueName(b, "")
	for b.Loop() {
		lease, err := l.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExpiryHandoff measures the handoff after an expiry, the same way on
// every backend: in each of b.N rounds, holder acquires the benchmark's lock for ttl
// and never releases it, a waiter on waiter (already waiting: it asks at once, with
// fence.WithWait) gets the lock once the holder's lease expires, and the sample is
// the waiter's grant time minus the holder's deadline (Lease.Deadline: when the
// holder must stop trusting its lease, never later than the backend's expiry).
//
// It reports, in milliseconds after the holder's deadline, the median (late-p50-ms),
// the 99th percentile by nearest rank (late-p99-ms; with fewer than 100 rounds that
// is the maximum) and the maximum (late-max-ms), and late-p99/ttl. As a control for
// a loaded machine it also reports how late a plain local timer set for the holder's
// deadline fired in the same rounds (timer-p99-ms, timer-max-ms): scheduling delay
// that no backend can beat. A negative sample
// would be a grant before the holder's deadline; it fails the benchmark. ns/op is a
// whole round (about ttl) and is not the figure to read. holder and waiter may be
// the same Locker; two (two connections, two sessions) are closer to real use.
func BenchmarkExpiryHandoff(b *testing.B, holder, waiter fence.Locker, ttl time.Duration) {
	b.Helper()
	if err := driver.ValidateTTL(ttl); err != nil {
		b.Fatal(err)
	}
	late := make([]time.Duration, 0, b.N)
	sleeps := make([]time.Duration, 0, b.N) // the same wake-up by a local timer
	startedLate := 0
	// One name for all rounds, free again at the end of each: a lock in steady use
	// (a first use can cost more, as ZooKeeper's lock directory is created then).
	name := uniqueName(b, "")
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), ttl+time.Minute)
		h, err := holder.Acquire(ctx, name, ttl)
		if err != nil {
			cancel()
			b.Fatalf("holder: %v", err)
		}
		type grant struct {
			lease  *fence.Lease
			called time.Time
			at     time.Time
			err    error
		}
		got := make(chan grant, 1)
		timer := make(chan time.Duration, 1)
		go func() {
			time.Sleep(time.Until(h.Deadline()))
			timer <- time.Since(h.Deadline())
		}()
		go func() {
			called := time.Now()
			l, err := waiter.Acquire(ctx, name, longTTL, fence.WithWait(ttl+longWait))
			got <- grant{l, called, time.Now(), err}
		}()
		g := <-got
		cancel()
		if g.err != nil {
			b.Fatalf("waiter: %v", g.err)
		}
		if g.lease.Token() <= h.Token() {
			b.Fatalf("waiter's token %d; want > holder's %d", g.lease.Token(), h.Token())
		}
		d := g.at.Sub(h.Deadline())
		if d < 0 {
			b.Fatalf("granted %v before the holder's deadline", -d)
		}
		if g.called.After(h.Deadline()) {
			startedLate++ // the waiter was not waiting yet: a slow machine
		}
		late = append(late, d)
		sleeps = append(sleeps, <-timer)
		rctx, rcancel := context.WithTimeout(context.Background(), promptly)
		if err := g.lease.Release(rctx); err != nil {
			b.Errorf("release: %v", err)
		}
		rcancel()
	}
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	slices.Sort(sleeps)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p99 := func(ds []time.Duration) time.Duration { return ds[(len(ds)*99+99)/100-1] }
	b.ReportMetric(ms(late[len(late)/2]), "late-p50-ms")
	b.ReportMetric(ms(p99(late)), "late-p99-ms")
	b.ReportMetric(ms(late[len(late)-1]), "late-max-ms")
	b.ReportMetric(float64(p99(late))/float64(ttl), "late-p99/ttl")
	b.ReportMetric(ms(p99(sleeps)), "timer-p99-ms")
	b.ReportMetric(ms(sleeps[len(sleeps)-1]), "timer-max-ms")
	if startedLate > 0 {
		b.Logf("%d of %d rounds: the waiter called Acquire after the holder's deadline (machine too slow for ttl %v)", startedLate, len(late), ttl)
	}
}
