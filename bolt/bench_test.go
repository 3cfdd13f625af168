package bolt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/watchtest"
)

// BenchmarkAcquireRelease measures acquire+release pairs on distinct names (one
// name per goroutine), for the inmem reference and for a durable bolt store
// (fsync on, default options) in one run, so their ratio can be read off. For
// bolt it also reports how many grants one commit carried on average (every
// grant and release waits for a group commit):
//
//	go test -run '^$' -bench AcquireRelease ./bolt/
func BenchmarkAcquireRelease(b *testing.B) {
	impls := []struct {
		name string
		open func(b *testing.B) fence.Locker
	}{
		{"inmem", func(b *testing.B) fence.Locker { return inmem.NewLocker(inmem.Options{}) }},
		{"bolt", func(b *testing.B) fence.Locker {
			s, err := Open(filepath.Join(b.TempDir(), "fence.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	for _, impl := range impls {
		for _, goroutines := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", impl.name, goroutines), func(b *testing.B) {
				l := impl.open(b)
				runPairs(b, l, goroutines)
				if s, ok := l.(*Store); ok {
					s.mu.Lock()
					if s.statCommits > 0 {
						b.ReportMetric(float64(s.statGrants)/float64(s.statCommits), "grants/commit")
					}
					s.mu.Unlock()
				}
			})
		}
	}
}

// runPairs runs b.N acquire+release pairs with opts on l, spread over
// goroutines, each on its own name, and reports pairs/s.
func runPairs(b *testing.B, l fence.Locker, goroutines int, opts ...fence.AcquireOption) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		n := b.N / goroutines
		if g < b.N%goroutines {
			n++
		}
		name := fmt.Sprintf("bench-%d", g)
		wg.Go(func() {
			for range n {
				lease, err := l.Acquire(ctx, name, 30*time.Second, opts...)
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
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkHeldLeases holds FENCE_BOLT_HELD_LEASES (default 1,000,000) leases at
// once and reports the heap bytes per held lease: "store" counts what the store
// keeps (map entry, name, expiry heap), "with-lease" adds the *fence.Lease each
// caller holds (its timer, context and channel belong to the root package).
// Leases last an hour, so none expires while the table fills on a slow machine.
//
//	go test -run '^$' -bench HeldLeases -benchtime 1x ./bolt/
func BenchmarkHeldLeases(b *testing.B) {
	n := heldLeases(b, 1_000_000)
	for _, withLease := range []bool{false, true} {
		variant := "store"
		if withLease {
			variant = "with-lease"
		}
		b.Run(variant, func(b *testing.B) {
			for it := 0; it < b.N; it++ {
				s, err := Open(filepath.Join(b.TempDir(), "fence.db"), &Options{NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var leases []*fence.Lease
				if withLease {
					leases = make([]*fence.Lease, 0, n)
				}
				before := heapInUse()
				start := time.Now()
				for i := 0; i < n; i++ {
					name := "lease-" + strconv.Itoa(i)
					if withLease {
						l, err := s.Acquire(ctx, name, time.Hour)
						if err != nil {
							b.Fatal(err)
						}
						leases = append(leases, l)
						continue
					}
					// Grant without waiting for each commit: this measures memory,
					// and the flush below writes them all at once.
					grantUnwritten(b, s, name, time.Hour)
				}
				took := time.Since(start)
				s.flushOnce() // the last tokens are on disk, the dirty list is empty
				after := heapInUse()
				s.mu.Lock()
				held := len(s.heap)
				s.mu.Unlock()
				if held != n {
					b.Fatalf("%d leases held, want %d", held, n)
				}
				b.ReportMetric(float64(after-before)/float64(n), "bytes/lease")
				b.ReportMetric(float64(n)/took.Seconds(), "grants/s")
				runtime.KeepAlive(leases)
				s.abandon() // skip writing a million leases at Close
			}
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkExpiryHandoff measures the handoff after an expiry (see
// fencetest.BenchmarkExpiryHandoff) on a durable store with default options: a
// holder never releases a 100ms lease, a waiter is already waiting.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./bolt/
func BenchmarkExpiryHandoff(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "fence.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	fencetest.BenchmarkExpiryHandoff(b, s, s, 100*time.Millisecond)
}

// BenchmarkReopenAfterCrash measures how long Open takes after a crash of a store
// holding FENCE_BOLT_HELD_LEASES (default 100,000) live leases: the read-only
// consistency walk, the scan of the lock records and restoring every lease. This
// is the time from starting a killed server again to serving every holder.
//
//	go test -run '^$' -bench ReopenAfterCrash -benchtime 3x ./bolt/
func BenchmarkReopenAfterCrash(b *testing.B) {
	n := heldLeases(b, 100_000)
	path := filepath.Join(b.TempDir(), "fence.db")
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		grantUnwritten(b, s, "lease-"+strconv.Itoa(i), time.Hour)
	}
	if err := s.flushOnce(); err != nil {
		b.Fatal(err)
	}
	s.abandon()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Open(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.mu.Lock()
		held := len(s.heap)
		s.mu.Unlock()
		if held != n {
			b.Fatalf("%d leases restored, want %d", held, n)
		}
		s.abandon()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
}

// heldLeases returns FENCE_BOLT_HELD_LEASES, or def if it is not set.
func heldLeases(b *testing.B, def int) int {
	v := os.Getenv("FENCE_BOLT_HELD_LEASES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("FENCE_BOLT_HELD_LEASES=%q: want a positive count", v)
	}
	return n
}

// grantUnwritten grants name without waiting for its commit (it waits only
// when the token ceiling must be raised first), for benchmarks that fill a store.
func grantUnwritten(b *testing.B, s *Store, name string, ttl time.Duration) {
	b.Helper()
	r := &driver.Request{Name: name, TTL: ttl}
	id, _ := parseLeaseID(driver.NewLeaseID())
	for {
		s.mu.Lock()
		res, g, err := s.grantLocked(r, id, s.now())
		s.mu.Unlock()
		if err != nil || (res.Token == 0 && g == nil) {
			b.Fatalf("grant %q: %v (held for %v)", name, err, res.ExpiresIn)
		}
		if res.Token != 0 {
			return
		}
		<-g.done // the ceiling is being raised
	}
}

// BenchmarkWatch measures watch latency in process on a durable store with
// default options: per round, the time from Release returning to a watcher,
// already watching the name in a goroutine of its own, receiving the free
// state. It reports the median and the 90th percentile. The store signals the
// release in memory, before its commit (which Release waits for), so the
// watcher often has the free state before Release returns: those rounds count
// as negative latencies, and before-return-% says how many they were.
//
//	go test -run '^$' -bench 'Watch$' -benchtime 2000x ./bolt/
func BenchmarkWatch(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "fence.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	const name = "watched"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := watchtest.Follow(wctx, s, name)
	f.MustUntil(b, 10*time.Second, "the first state", watchtest.Any)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		l, err := s.Acquire(ctx, name, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		f.MustUntil(b, 10*time.Second, "the lock held", watchtest.Held(true))
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		samples = append(samples, f.MustUntil(b, 10*time.Second, "the lock free", watchtest.Held(false)).At.Sub(returned))
	}
	b.StopTimer()
	reportLatency(b, samples)
}

// reportLatency reports the median and 90th percentile of samples in
// milliseconds, and the share of negative ones.
func reportLatency(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	neg := 0
	for _, d := range samples {
		if d < 0 {
			neg++
		}
	}
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(samples[len(samples)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(100*float64(neg)/float64(len(samples)), "before-return-%")
}
