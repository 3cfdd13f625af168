package etcd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/testserv/etcdserv"
)

// Run both sets in one run, on the same embedded etcd, so the ratios are fair:
//
//	go test -run '^$' -bench . -benchtime 40x ./etcd/
//
// BenchmarkAcquireRelease times one uncontended acquire+release pair (ns/op).
// BenchmarkHandoff reports the median time from the holder's release call to the
// blocked waiter holding the lock (handoff-median-ms), and for fence the median of the
// release call alone (one Raft write, release-median-ms); ns/op there includes the
// setup of each round and is not the figure to read.

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("fence", func(b *testing.B) {
		l := etcd.NewLocker(client(b), nil)
		name := benchName(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lease, err := l.Acquire(ctx, name, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		s, err := concurrency.NewSession(client(b), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "bench-mutex/"+benchName(b))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// waiterBlockDelay is how long a round gives the waiter to make its failed attempt and
// start watching before the holder releases. Neither locker exposes "now waiting", so
// this is a delay, outside the measured interval; it only has to be long enough.
const waiterBlockDelay = 30 * time.Millisecond

func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	b.Run("fence", func(b *testing.B) {
		holder := etcd.NewLocker(client(b), nil)
		waiter := etcd.NewLocker(client(b), nil)
		name := benchName(b)
		handoffs := make([]time.Duration, 0, b.N)
		releases := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			a, err := holder.Acquire(ctx, name, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan *fence.Lease, 1)
			go func() {
				l, err := waiter.Acquire(ctx, name, 10*time.Second, fence.WithWait(30*time.Second))
				if err != nil {
					b.Error(err)
				}
				got <- l
			}()
			time.Sleep(waiterBlockDelay)
			start := time.Now()
			if err := a.Release(ctx); err != nil {
				b.Fatal(err)
			}
			releases = append(releases, time.Since(start))
			l := <-got
			handoffs = append(handoffs, time.Since(start))
			if l == nil {
				b.FailNow()
			}
			if l.Token() <= a.Token() {
				b.Fatalf("waiter's token %d; want > holder's %d", l.Token(), a.Token())
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportMedian(b, handoffs)
		// The release is one Raft write: the floor of a handoff is two of them
		// (the release's and the waiter's grant).
		slices.Sort(releases)
		b.ReportMetric(float64(releases[len(releases)/2])/float64(time.Millisecond), "release-median-ms")
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		s1, err := concurrency.NewSession(client(b), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s1.Close()
		s2, err := concurrency.NewSession(client(b), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s2.Close()
		pfx := "bench-mutex/" + benchName(b)
		handoffs := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			m1, m2 := concurrency.NewMutex(s1, pfx), concurrency.NewMutex(s2, pfx)
			if err := m1.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- m2.Lock(ctx) }()
			time.Sleep(waiterBlockDelay)
			start := time.Now()
			if err := m1.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-got; err != nil {
				b.Fatal(err)
			}
			handoffs = append(handoffs, time.Since(start))
			if err := m2.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportMedian(b, handoffs)
	})
}

func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/float64(time.Millisecond), "handoff-median-ms")
	b.ReportMetric(float64(d[len(d)*9/10])/float64(time.Millisecond), "handoff-p90-ms")
}

func benchName(b *testing.B) string { return "bench-" + driver.NewLeaseID()[:12] }

// BenchmarkExpiryHandoff measures the handoff after an expiry (see
// fencetest.BenchmarkExpiryHandoff): a holder never releases a 100ms lease, a waiter
// on its own client is already waiting. etcd cannot expire that precisely: it raises
// the lease to its minimum TTL (1.5 election timeouts in whole seconds) and checks
// for expired leases every 500ms, so the handoff comes the minimum TTL less the TTL,
// plus up to half a second, after the holder's deadline. Rounds run back to back, so
// they fall in step with etcd's 500ms check and each shows about the worst case
// (minimum - ttl + 500ms); by chance a lone holder is replaced 0 to 500ms sooner.
// "fast-timing" is the package's
// test member (500ms election timeout: 1s minimum); "default-timing" a member with
// etcd's defaults (1s election timeout: 2s minimum), what an unconfigured cluster
// gives.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 10x ./etcd/
func BenchmarkExpiryHandoff(b *testing.B) {
	const ttl = 100 * time.Millisecond
	b.Run("fast-timing", func(b *testing.B) {
		fencetest.BenchmarkExpiryHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), ttl)
	})
	b.Run("default-timing", func(b *testing.B) {
		s, err := etcdserv.StartDefaultTiming()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		holder := etcd.NewLocker(newClient(b, s.Endpoints), nil)
		waiter := etcd.NewLocker(newClient(b, s.Endpoints), nil)
		fencetest.BenchmarkExpiryHandoff(b, holder, waiter, ttl)
	})
}
