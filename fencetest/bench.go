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

// A Mutex is a lock without fencing tokens that a backend's benchmarks compare its
// Locker with (etcd's concurrency.Mutex, ZooKeeper's lock recipe), by
// BenchmarkMutexLockUnlock and BenchmarkMutexHandoff. Lock blocks until the lock is
// held or ctx ends; Unlock gives it up. Either returns what went wrong.
type Mutex interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// BenchmarkMutexLockUnlock is BenchmarkAcquireRelease for a Mutex: ns/op is one
// uncontended Lock and Unlock pair.
func BenchmarkMutexLockUnlock(b *testing.B, m Mutex) {
	b.Helper()
	ctx := context.Background()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// waiterBlockDelay is how long a handoff round gives the waiter to make its failed
// try and start waiting before the holder releases. No Locker says "now waiting",
// so this is a delay, outside the measured interval; it only has to be long enough.
const waiterBlockDelay = 30 * time.Millisecond

// BenchmarkHandoff measures the handoff after a release, the same way on every
// backend: in each of b.N rounds, holder acquires the benchmark's lock (10s TTL), a
// waiter on waiter asks for it with fence.WithWait and is given waiterBlockDelay
// (30ms) to start waiting, and the holder releases it. The waiter's token must be
// above the holder's.
//
// It reports the median and 90th percentile, in milliseconds, of the time from the
// holder's Release call to the waiter holding the lock (handoff-median-ms,
// handoff-p90-ms) and the median of the Release call alone (release-median-ms). ns/op
// includes each round's delay and is not the figure to read. holder and waiter may
// be the same Locker; two (two connections, two sessions) are closer to real use.
func BenchmarkHandoff(b *testing.B, holder, waiter fence.Locker) {
	b.Helper()
	name := uniqueName(b, "")
	h, w := &lockerMutex{l: holder, name: name}, &lockerMutex{l: waiter, name: name}
	benchmarkHandoff(b, h, w, func() {
		if w.lease.Token() <= h.lease.Token() {
			b.Fatalf("waiter's token %d; want > holder's %d", w.lease.Token(), h.lease.Token())
		}
	})
}

// BenchmarkMutexHandoff is BenchmarkHandoff for two Mutexes on one lock (two
// sessions), with the same rounds and figures.
func BenchmarkMutexHandoff(b *testing.B, holder, waiter Mutex) {
	b.Helper()
	benchmarkHandoff(b, holder, waiter, nil)
}

// lockerMutex is a Locker's lock on one name as a Mutex: Lock waits (at most 30s)
// and keeps the lease for Unlock.
type lockerMutex struct {
	l     fence.Locker
	name  string
	lease *fence.Lease
}

func (m *lockerMutex) Lock(ctx context.Context) (err error) {
	m.lease, err = m.l.Acquire(ctx, m.name, 10*time.Second, fence.WithWait(longWait))
	return err
}

func (m *lockerMutex) Unlock(ctx context.Context) error { return m.lease.Release(ctx) }

// benchmarkHandoff runs BenchmarkHandoff's rounds on holder and waiter, calling
// check (if not nil) once the waiter holds the lock, and reports the figures.
func benchmarkHandoff(b *testing.B, holder, waiter Mutex, check func()) {
	ctx := context.Background()
	handoffs := make([]time.Duration, 0, b.N)
	releases := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		if err := holder.Lock(ctx); err != nil {
			b.Fatalf("holder: %v", err)
		}
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		time.Sleep(waiterBlockDelay)
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			b.Fatalf("holder's release: %v", err)
		}
		releases = append(releases, time.Since(start))
		if err := <-got; err != nil {
			b.Fatalf("waiter: %v", err)
		}
		handoffs = append(handoffs, time.Since(start))
		if check != nil {
			check()
		}
		if err := waiter.Unlock(ctx); err != nil {
			b.Fatalf("waiter's release: %v", err)
		}
	}
	if len(handoffs) == 0 {
		return
	}
	slices.Sort(handoffs)
	slices.Sort(releases)
	b.ReportMetric(ms(handoffs[len(handoffs)/2]), "handoff-median-ms")
	b.ReportMetric(ms(handoffs[len(handoffs)*9/10]), "handoff-p90-ms")
	b.ReportMetric(ms(releases[len(releases)/2]), "release-median-ms")
}

// ms returns d in (fractional) milliseconds, the unit of the benchmarks' figures.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

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
