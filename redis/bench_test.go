package redis

// Benchmarks against what users pick instead, in one run against the package's one
// redis-server:
//
//	go test -run '^$' -bench . -benchtime 3s -count 3 -v ./redis/
//
// Each parent benchmark logs the ratios of its sub-benchmarks' last figures (b.Logf,
// shown with -v). On a shared machine separate sub-benchmarks drift with the load;
// AcquireRelease/interleaved runs the libraries side by side in shuffled order and
// reports fence/redislock directly, which is the figure to compare.

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

// benchResults keeps the last figure of each sub-benchmark for the ratio logs.
type benchResults struct {
	mu sync.Mutex
	m  map[string]float64
}

func (r *benchResults) set(k string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]float64{}
	}
	r.m[k] = v
}

func (r *benchResults) ratios(b *testing.B, base string, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.m))
	for k := range r.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if r.m[base] > 0 {
			b.Logf("%-10s %10.1f %s   %s/%s = %.3f   %s/%s = %.1f", k, r.m[k], unit,
				base, k, r.m[base]/r.m[k], k, base, r.m[k]/r.m[base])
		}
	}
}

// BenchmarkAcquireRelease measures an uncontended acquire+release pair, each library
// in its own sub-benchmark, then all of them interleaved (sub-benchmark
// "interleaved": one pair of each per iteration, in a shuffled order, so load from
// other processes hits them alike; it reports each library's mean and the ratio
// fence/redislock).
func BenchmarkAcquireRelease(b *testing.B) {
	s := server(b)
	ctx := context.Background()
	var res benchResults
	run := func(name string, pair func(i int) error) {
		b.Run(name, func(b *testing.B) {
			if err := pair(-1); err != nil { // warm up: connections, script cache
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := pair(i); err != nil {
					b.Fatal(err)
				}
			}
			us := float64(time.Since(start).Microseconds()) / float64(b.N)
			b.ReportMetric(us, "us/pair")
			res.set(name, us)
		})
	}

	fc := newClient(b, s.Addr)
	fl, err := NewLocker(fc, nil)
	if err != nil {
		b.Fatal(err)
	}
	run("fence", func(int) error {
		lease, err := fl.Acquire(ctx, "bench-pair-fence", 10*time.Second)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	})

	rl := redislock.New(newClient(b, s.Addr))
	run("redislock", func(int) error {
		lock, err := rl.Obtain(ctx, "bench-pair-redislock", 10*time.Second, nil)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	})

	rs := redsync.New(redsyncgoredis.NewPool(newClient(b, s.Addr)))
	run("redsync", func(int) error {
		m := rs.NewMutex("bench-pair-redsync", redsync.WithExpiry(10*time.Second))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		_, err := m.UnlockContext(ctx)
		return err
	})

	pc := newClient(b, s.Addr)
	ping := func(int) error { return pc.Ping(ctx).Err() }
	run("ping", ping)
	res.ratios(b, "fence", "us/pair")

	pairs := []struct {
		name string
		f    func(int) error
	}{
		{"fence", func(int) error {
			lease, err := fl.Acquire(ctx, "bench-pair-fence", 10*time.Second)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
		{"redislock", func(int) error {
			lock, err := rl.Obtain(ctx, "bench-pair-redislock", 10*time.Second, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"redsync", func(int) error {
			m := rs.NewMutex("bench-pair-redsync", redsync.WithExpiry(10*time.Second))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
		{"ping", ping},
	}
	b.Run("interleaved", func(b *testing.B) {
		total := make([]time.Duration, len(pairs))
		rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same orders every run
		order := make([]int, len(pairs))
		for i := range order {
			order[i] = i
		}
		for i := 0; i < b.N; i++ {
			// A fresh random order each iteration, so no library always runs right
			// after another's aftermath (redsync's goroutines, a GC).
			rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
			for _, k := range order {
				start := time.Now()
				if err := pairs[k].f(i); err != nil {
					b.Fatal(err)
				}
				total[k] += time.Since(start)
			}
		}
		for k, p := range pairs {
			b.ReportMetric(float64(total[k].Nanoseconds())/1e3/float64(b.N), p.name+"-us")
		}
		b.ReportMetric(float64(total[0])/float64(total[1]), "fence/redislock")
		b.ReportMetric(float64(total[0])/float64(total[2]), "fence/redsync")
	})
}

// handoffPeer is one lock library under the handoff benchmark.
type handoffPeer struct {
	// hold takes the lock uncontended and returns its release.
	hold func(ctx context.Context) (release func() error, err error)
	// wait blocks until the lock is acquired, then releases it.
	wait func(ctx context.Context) (release func() error, err error)
	// blocked returns once the waiter started by wait is blocked on the lock.
	blocked func()
	// idle, if set, returns once the last round's waiter is gone.
	idle func()
}

// BenchmarkHandoff measures contended handoff: a waiter is already blocked when the
// holder releases; the latency is from Release returning to the waiter's acquire
// returning. It reports the median (p50-us) and the 90th percentile (p90-us).
func BenchmarkHandoff(b *testing.B) {
	s := server(b)
	var res benchResults
	run := func(name string, p handoffPeer) {
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			samples := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				release, err := p.hold(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				errc := make(chan error, 1)
				go func() {
					rel, err := p.wait(ctx)
					at := time.Now()
					if err != nil {
						errc <- err
						return
					}
					got <- at
					_ = rel()
				}()
				p.blocked()
				if err := release(); err != nil {
					b.Fatal(err)
				}
				released := time.Now()
				select {
				case at := <-got:
					samples = append(samples, at.Sub(released))
				case err := <-errc:
					b.Fatal(err)
				}
				// Let the waiter's release finish before the next round.
				waitFree(b, p)
				if p.idle != nil {
					p.idle()
				}
			}
			sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
			p50 := float64(samples[len(samples)/2].Nanoseconds()) / 1e3
			p90 := float64(samples[len(samples)*9/10].Nanoseconds()) / 1e3
			b.ReportMetric(p50, "p50-us")
			b.ReportMetric(p90, "p90-us")
			res.set(name, p50)
		})
	}

	// fence: the waiter is blocked once its subscription is confirmed.
	fc := newClient(b, s.Addr)
	fl, err := NewLocker(fc, nil)
	if err != nil {
		b.Fatal(err)
	}
	const fname = "bench-handoff-fence"
	run("fence", handoffPeer{
		hold: func(ctx context.Context) (func() error, error) {
			lease, err := fl.Acquire(ctx, fname, 10*time.Second)
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(ctx) }, nil
		},
		wait: func(ctx context.Context) (func() error, error) {
			lease, err := fl.Acquire(ctx, fname, 10*time.Second, fence.WithWait(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(ctx) }, nil
		},
		blocked: func() { waitSubscribers(b, fc, fl, fname, 1) },
		idle:    func() { waitSubscribers(b, fc, fl, fname, 0) },
	})

	// redislock polls: the waiter is blocked in its backoff after its first try.
	rl := redislock.New(newClient(b, s.Addr))
	const rname = "bench-handoff-redislock"
	run("redislock", handoffPeer{
		hold: func(ctx context.Context) (func() error, error) {
			lock, err := rl.Obtain(ctx, rname, 10*time.Second, nil)
			if err != nil {
				return nil, err
			}
			return func() error { return lock.Release(ctx) }, nil
		},
		wait: func(ctx context.Context) (func() error, error) {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			lock, err := rl.Obtain(wctx, rname, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
			if err != nil {
				return nil, err
			}
			return func() error { return lock.Release(ctx) }, nil
		},
		blocked: func() { time.Sleep(25 * time.Millisecond) }, // past its first tries
	})

	rs := redsync.New(redsyncgoredis.NewPool(newClient(b, s.Addr)))
	const sname = "bench-handoff-redsync"
	run("redsync", handoffPeer{
		hold: func(ctx context.Context) (func() error, error) {
			m := rs.NewMutex(sname, redsync.WithExpiry(10*time.Second))
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error { _, err := m.UnlockContext(ctx); return err }, nil
		},
		wait: func(ctx context.Context) (func() error, error) {
			m := rs.NewMutex(sname, redsync.WithExpiry(10*time.Second)) // default retries
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error { _, err := m.UnlockContext(ctx); return err }, nil
		},
		blocked: func() { time.Sleep(25 * time.Millisecond) },
	})

	res.ratios(b, "fence", "p50-us")
}

// waitFree waits until the peer's lock can be taken again (the waiter released it).
func waitFree(b *testing.B, p handoffPeer) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		rel, err := p.hold(ctx)
		if err == nil {
			if err := rel(); err != nil {
				b.Fatal(err)
			}
			return
		}
		if ctx.Err() != nil {
			b.Fatalf("lock not free after the handoff: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkExpiryHandoff measures the handoff after an expiry (see
// fencetest.BenchmarkExpiryHandoff): a holder never releases a 100ms lease and a
// waiter, on its own client with the default PollInterval, is already waiting. The
// figures are milliseconds after the holder's deadline; a waiter that missed the
// expiry shows as about a PollInterval (1s).
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./redis/
func BenchmarkExpiryHandoff(b *testing.B) {
	holder, _ := newLocker(b, nil)
	waiter, _ := newLocker(b, nil)
	fencetest.BenchmarkExpiryHandoff(b, holder, waiter, 100*time.Millisecond)
}

// BenchmarkWatch measures Watch: "latency" is the time from Release returning to a
// watcher, on its own Locker and client as in another process, receiving the free
// state (the release's message, then one Inspect), as median (p50-us) and 90th
// percentile (p90-us) over b.N rounds; each round first waits for the watcher to
// see the grant.
//
//	go test -run '^$' -bench Watch -benchtime 2000x ./redis/
func BenchmarkWatch(b *testing.B) {
	b.Run("latency", func(b *testing.B) {
		l, _ := newLocker(b, nil)
		w, _ := newLocker(b, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		const name = "bench-watch"
		type seen struct {
			info fence.LockInfo
			at   time.Time
		}
		states := make(chan seen, 16)
		go func() {
			for info, err := range w.Watch(ctx, name) {
				if err != nil {
					continue // yielded only while Redis is unreachable
				}
				select {
				case states <- seen{info, time.Now()}:
				case <-ctx.Done():
					return
				}
			}
		}()
		await := func(ok func(fence.LockInfo) bool) time.Time {
			for {
				select {
				case s := <-states:
					if ok(s.info) {
						return s.at
					}
				case <-time.After(10 * time.Second):
					b.Fatal("the watcher saw no change within 10s")
				}
			}
		}
		await(func(fence.LockInfo) bool { return true })
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lease, err := l.Acquire(ctx, name, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			await(func(i fence.LockInfo) bool { return i.Held && i.Token == lease.Token() })
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
			released := time.Now()
			at := await(func(i fence.LockInfo) bool { return !i.Held })
			samples = append(samples, at.Sub(released))
		}
		b.StopTimer()
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-us")
		b.ReportMetric(float64(samples[len(samples)*9/10].Nanoseconds())/1e3, "p90-us")
	})

	// The cost of the grant's PUBLISH: acquire+release pairs with today's lock
	// script and with the same script less its PUBLISH line, interleaved in a
	// shuffled order on one Locker (one client, one name: only the script differs),
	// nobody watching; "with/without" is the ratio of their totals.
	b.Run("grant-publish-cost", func(b *testing.B) {
		const publish = "redis.call('SPUBLISH', string.sub(KEYS[1], 1, -5) .. 'wake', 'granted')\n"
		if !strings.Contains(lockSrc, publish) {
			b.Fatalf("lock.lua has no line %q", publish)
		}
		l, _ := newLocker(b, nil)
		scripts := []*goredis.Script{lockScripts[0], goredis.NewScript(strings.Replace(lockSrc, publish, "", 1))}
		ctx := context.Background()
		pair := func(k int) {
			l.lock = scripts[k]
			lease, err := l.Acquire(ctx, "bench-publish", 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		pair(0) // warm up: connections, script cache
		pair(1)
		var total [2]time.Duration
		rng := rand.New(rand.NewPCG(3, 4))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			first := rng.IntN(2)
			for _, k := range []int{first, 1 - first} {
				start := time.Now()
				pair(k)
				total[k] += time.Since(start)
			}
		}
		b.ReportMetric(float64(total[0].Nanoseconds())/1e3/float64(b.N), "with-us")
		b.ReportMetric(float64(total[1].Nanoseconds())/1e3/float64(b.N), "without-us")
		b.ReportMetric(float64(total[0])/float64(total[1]), "with/without")
	})
}

// BenchmarkSemaphore compares semaphore and shared leases with locks on one
// Locker and one name each, all interleaved in a shuffled order per iteration
// (one run, so load from other processes hits them alike):
//
//	go test -run '^$' -bench Semaphore -benchtime 5000x -v ./redis/
//
// "acquire-release" reports each pair's mean: lock; lock-v2 (the acquire script
// of the version before semaphores, for the cost they added to locks, which
// lock.lua takes back); sem (a
// semaphore of 4, no other permit held); sem-busy (one other permit held, so
// the pair finds and keeps the leases' keys); shared; and the ratios. "handoff"
// is fencetest.BenchmarkHandoffInterleaved of a lock and of a permit of a
// semaphore of 2 (the other permit held), the waiter on its own Locker woken by
// pub/sub only: read permit/lock.
func BenchmarkSemaphore(b *testing.B) {
	b.Run("acquire-release", func(b *testing.B) {
		l, c := newLocker(b, nil)
		old, err := NewLocker(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer old.Close()
		old.acquire, old.lock = v2Acquire, nil // every acquire runs the old script
		ctx := context.Background()
		pair := func(l *Locker, name string, opts ...fence.AcquireOption) func() {
			return func() {
				lease, err := l.Acquire(ctx, name, 10*time.Second, opts...)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		busy := mustAcquire(b, ctx, l, "bench-sem-busy", time.Hour, fence.WithLimit(4))
		defer busy.Release(ctx)
		pairs := []struct {
			name string
			f    func()
		}{
			{"lock", pair(l, "bench-sem-lock")},
			{"lock-v2", pair(old, "bench-sem-lock-v2")},
			{"sem", pair(l, "bench-sem", fence.WithLimit(4))},
			{"sem-busy", pair(l, "bench-sem-busy", fence.WithLimit(4))},
			{"shared", pair(l, "bench-sem-shared", fence.WithShared())},
		}
		for _, p := range pairs {
			p.f() // warm up: connections, script cache
		}
		total := make([]time.Duration, len(pairs))
		order := make([]int, len(pairs))
		for i := range order {
			order[i] = i
		}
		rng := rand.New(rand.NewPCG(5, 6))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
			for _, k := range order {
				start := time.Now()
				pairs[k].f()
				total[k] += time.Since(start)
			}
		}
		for k, p := range pairs {
			b.ReportMetric(float64(total[k].Nanoseconds())/1e3/float64(b.N), p.name+"-us")
		}
		b.ReportMetric(float64(total[2])/float64(total[0]), "sem/lock")
		b.ReportMetric(float64(total[3])/float64(total[0]), "sem-busy/lock")
		b.ReportMetric(float64(total[4])/float64(total[0]), "shared/lock")
		b.ReportMetric(float64(total[0])/float64(total[1]), "lock/lock-v2")
	})

	b.Run("handoff", func(b *testing.B) {
		holder, _ := newLocker(b, nil)
		waiter, _ := newLocker(b, &Options{PollInterval: time.Hour}) // woken by pub/sub only
		const lock, sem = "bench-handoff-lock", "bench-handoff-sem"
		permit := func(l *Locker) fence.Locker { return withOptions{l, []fence.AcquireOption{fence.WithLimit(2)}} }
		other := mustAcquire(b, context.Background(), holder, sem, time.Hour, fence.WithLimit(2))
		defer other.Release(context.Background())
		fencetest.BenchmarkHandoffInterleaved(b,
			fencetest.HandoffSubject{Name: "lock", Holder: fencetest.LockerMutex(holder, lock), Waiter: fencetest.LockerMutex(waiter, lock)},
			fencetest.HandoffSubject{Name: "permit", Holder: fencetest.LockerMutex(permit(holder), sem), Waiter: fencetest.LockerMutex(permit(waiter), sem)})
	})
}

// withOptions is a Locker whose Acquire adds opts: fencetest.LockerMutex of a
// semaphore's permit.
type withOptions struct {
	fence.Locker
	opts []fence.AcquireOption
}

func (w withOptions) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	return w.Locker.Acquire(ctx, name, ttl, append(opts, w.opts...)...)
}

// BenchmarkKinds runs the shared benchmarks of fencetest on each kind of grant,
// one sub-benchmark each (not interleaved: BenchmarkSemaphore compares them):
//
//	go test -run '^$' -bench Kinds -benchtime 2000x ./redis/
func BenchmarkKinds(b *testing.B) {
	l, _ := newLocker(b, nil)
	waiter, _ := newLocker(b, &Options{PollInterval: time.Hour})
	b.Run("AcquireRelease/lock", func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, l) })
	b.Run("AcquireRelease/permit", func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, l, fence.WithLimit(4)) })
	b.Run("AcquireRelease/shared", func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, l, fence.WithShared()) })
	b.Run("Handoff/lock", func(b *testing.B) { fencetest.BenchmarkHandoff(b, l, waiter) })
	b.Run("Handoff/permit", func(b *testing.B) { fencetest.BenchmarkPermitHandoff(b, l, waiter, 2) })
}
