package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// Run both sets in one run, on the same embedded etcd, so the ratios are fair:
//
//	go test -run '^$' -bench . -benchtime 40x ./etcd/
//
// BenchmarkAcquireRelease times one uncontended acquire+release pair (ns/op), also
// while the lock is watched (fence-watched-N, see BenchmarkWatch); -count runs
// the sub-benchmarks interleaved.
// BenchmarkHandoff (see fencetest.BenchmarkHandoff) reports the median and p90 time
// from the holder's release call to the blocked waiter holding the lock
// (handoff-median-ms) and the median of the release call alone (one Raft write for
// fence, release-median-ms: the floor of a handoff is two of them, the release's and
// the waiter's grant); ns/op there includes the setup of each round and is not the
// figure to read.

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("fence", func(b *testing.B) {
		fencetest.BenchmarkAcquireRelease(b, etcd.NewLocker(client(b), nil))
	})
	// The same pairs while the lock is watched: what watchers cost the lock's
	// users. The watchers of a name on one Locker share one etcd watch and their
	// reads ("shared": one server's blocking queries); Lockers of their own
	// ("apart": several servers) each have an etcd watch and read after each change.
	for _, c := range []struct {
		watchers int
		apart    bool
	}{{1, false}, {10, false}, {10, true}} {
		how := "shared"
		if c.apart {
			how = "apart"
		}
		b.Run(fmt.Sprintf("fence-watched-%d-%s", c.watchers, how), func(b *testing.B) {
			fencetest.BenchmarkAcquireRelease(b, &watchedLocker{Locker: etcd.NewLocker(client(b), nil), b: b, watchers: c.watchers, apart: c.apart})
		})
	}
	b.Run("concurrency.Mutex", func(b *testing.B) {
		fencetest.BenchmarkMutexLockUnlock(b, concurrency.NewMutex(session(b), "bench-mutex/"+benchName()))
	})
}

func BenchmarkHandoff(b *testing.B) {
	b.Run("fence", func(b *testing.B) {
		fencetest.BenchmarkHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil))
	})
	// With the options cluster mode turns on: the waiter keeps a waiter key, and
	// the grant writes a beat key and deletes the waiter key.
	b.Run("fence-fast-expiry-fifo", func(b *testing.B) {
		fencetest.BenchmarkHandoff(b, etcd.NewLocker(client(b), clusterOpts), etcd.NewLocker(client(b), clusterOpts))
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		pfx := "bench-mutex/" + benchName()
		fencetest.BenchmarkMutexHandoff(b, concurrency.NewMutex(session(b), pfx), concurrency.NewMutex(session(b), pfx))
	})
}

// session returns a concurrency session (10s TTL) on a client of its own, closed
// when b ends.
func session(b *testing.B) *concurrency.Session {
	b.Helper()
	s, err := concurrency.NewSession(client(b), concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchName() string { return "bench-" + driver.NewLeaseID()[:12] }

// clusterOpts are the options that cluster mode turns on.
var clusterOpts = &etcd.Options{FastExpiry: true, FIFO: true}

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
// gives. The "fast-expiry" rows run with Options.FastExpiry and FIFO (what
// cluster mode turns on): the waiter ends the silent holder's grant its TTL, plus
// 1% and 50ms, after it saw the holder's last renewal (here its grant), by its own
// clock; "-1s" rows use a TTL of 1s (etcd's own expiry then comes 0 to 500ms after
// the deadline on the fast-timing member, 1 to 1.5s with default timing).
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 10x ./etcd/
func BenchmarkExpiryHandoff(b *testing.B) {
	const ttl = 100 * time.Millisecond
	b.Run("fast-timing", func(b *testing.B) {
		fencetest.BenchmarkExpiryHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), ttl)
	})
	b.Run("fast-timing-1s", func(b *testing.B) {
		fencetest.BenchmarkExpiryHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), time.Second)
	})
	b.Run("fast-timing-fast-expiry", func(b *testing.B) {
		fencetest.BenchmarkExpiryHandoff(b, etcd.NewLocker(client(b), clusterOpts), etcd.NewLocker(client(b), clusterOpts), ttl)
	})
	b.Run("fast-timing-fast-expiry-1s", func(b *testing.B) {
		fencetest.BenchmarkExpiryHandoff(b, etcd.NewLocker(client(b), clusterOpts), etcd.NewLocker(client(b), clusterOpts), time.Second)
	})
	b.Run("default-timing", func(b *testing.B) {
		s, err := etcdmember.StartDefaultTiming()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		b.Run("100ms", func(b *testing.B) {
			holder := etcd.NewLocker(newClient(b, s.Endpoints), nil)
			waiter := etcd.NewLocker(newClient(b, s.Endpoints), nil)
			fencetest.BenchmarkExpiryHandoff(b, holder, waiter, ttl)
		})
		b.Run("fast-expiry-1s", func(b *testing.B) {
			holder := etcd.NewLocker(newClient(b, s.Endpoints), clusterOpts)
			waiter := etcd.NewLocker(newClient(b, s.Endpoints), clusterOpts)
			fencetest.BenchmarkExpiryHandoff(b, holder, waiter, time.Second)
		})
	})
}

// BenchmarkRenew times one renewal of a held lock (ns/op): a read-only
// transaction and a keep-alive by default, a transaction that writes the beat (a
// Raft write) and a keep-alive with FastExpiry.
//
//	go test -run '^$' -bench Renew -benchtime 2s ./etcd/
func BenchmarkRenew(b *testing.B) {
	for _, c := range []struct {
		what string
		opts *etcd.Options
	}{{"default", nil}, {"fast-expiry", clusterOpts}} {
		b.Run(c.what, func(b *testing.B) {
			ctx := context.Background()
			l := etcd.NewLocker(client(b), c.opts)
			lease, err := l.Acquire(ctx, benchName(), 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer lease.Release(ctx)
			for b.Loop() {
				if err := lease.Renew(ctx, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// watchedLocker is a Locker whose first Acquire starts watchers watches of the
// name, on one Locker of another client or (apart) each on a Locker of a client of
// its own, and returns once each has read the lock: fencetest.BenchmarkAcquireRelease
// then runs its pairs on a watched lock. The watches end with b.
type watchedLocker struct {
	fence.Locker
	b        *testing.B
	watchers int
	apart    bool
	once     sync.Once
}

func (w *watchedLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	w.once.Do(func() {
		wctx, cancel := context.WithCancel(context.Background())
		w.b.Cleanup(cancel)
		l := etcd.NewLocker(client(w.b), nil)
		for range w.watchers {
			if w.apart {
				l = etcd.NewLocker(client(w.b), nil)
			}
			ready := make(chan struct{})
			go func() {
				first := true
				for _, err := range l.Watch(wctx, name) {
					if first && err == nil {
						first = false
						close(ready)
					}
				}
			}()
			select {
			case <-ready:
			case <-time.After(5 * time.Second):
				w.b.Fatal("watcher read nothing within 5s")
			}
		}
	})
	return w.Locker.Acquire(ctx, name, ttl, opts...)
}

// BenchmarkWatch measures how soon a watcher learns of a change: in each of b.N
// rounds, a Locker acquires the benchmark's lock (10s TTL) and releases it once a
// watcher on a client of its own has yielded the held state. It reports the median
// and 90th percentile, in milliseconds, of the time from Release returning to the
// watcher yielding the free state (watch-median-ms, watch-p90-ms; the etcd event
// may reach the watcher before the release's reply reaches the releaser, so a
// round can be negative), the median from the Release call (from-call-median-ms)
// and from Acquire returning to the held state (grant-median-ms). ns/op is a
// round and is not the figure to read.
//
//	go test -run '^$' -bench Watch -benchtime 400x ./etcd/
func BenchmarkWatch(b *testing.B) {
	ctx := context.Background()
	name := benchName()
	changer := etcd.NewLocker(client(b), nil)
	watcher := etcd.NewLocker(client(b), nil)
	type seen struct {
		info fence.LockInfo
		at   time.Time
	}
	states := make(chan seen, 1024)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for info, err := range watcher.Watch(wctx, name) {
			if err == nil {
				states <- seen{info, time.Now()}
			}
		}
	}()
	// until returns when the watcher yielded a state that satisfies ok.
	until := func(what string, ok func(fence.LockInfo) bool) time.Time {
		timeout := time.After(5 * time.Second)
		for {
			select {
			case s := <-states:
				if ok(s.info) {
					return s.at
				}
			case <-timeout:
				b.Fatalf("watcher yielded no state with %s within 5s", what)
			}
		}
	}
	until("the first state", func(fence.LockInfo) bool { return true })
	var watch, fromCall, grant []time.Duration
	for b.Loop() {
		lease, err := changer.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		acquired := time.Now()
		grant = append(grant, until("the grant", func(i fence.LockInfo) bool { return i.Held && i.Token == lease.Token() }).Sub(acquired))
		call := time.Now()
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		at := until("the release", func(i fence.LockInfo) bool { return !i.Held })
		watch = append(watch, at.Sub(released))
		fromCall = append(fromCall, at.Sub(call))
	}
	b.ReportMetric(ms(median(watch)), "watch-median-ms")
	b.ReportMetric(ms(percentile(watch, 90)), "watch-p90-ms")
	b.ReportMetric(ms(median(fromCall)), "from-call-median-ms")
	b.ReportMetric(ms(median(grant)), "grant-median-ms")
}

// percentile returns the p-th percentile of ds (nearest rank below), 0 if empty.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)*p/100]
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

// ms returns d in (fractional) milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
