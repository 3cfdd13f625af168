package zookeeper_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// Run every set in one run, so the figures sit side by side on the same machine:
//
//	go test -run '^$' -bench . -benchtime 200x ./zookeeper/
//
// BenchmarkAcquireRelease times one uncontended acquire+release pair (ns/op) on this
// package's Locker (standalone ZooKeeper), go-zookeeper's own zk.Lock recipe (no
// fencing token, no TTL) on the same server, and the etcd package's Locker on an
// embedded single-member etcd. BenchmarkHandoff (see fencetest.BenchmarkHandoff)
// reports the median and p90 time from the holder's release call to the blocked
// waiter holding the lock (handoff-median-ms) and the median of the release call
// (release-median-ms); its ns/op includes each round's setup and is not the figure to
// read. BenchmarkWatchLatency and BenchmarkAcquireReleaseWatched measure Watch.

var (
	etcdOnce sync.Once
	etcdSrv  *etcdmember.Server
	etcdErr  error
)

// etcdLocker returns an etcd Locker on an embedded etcd started once for the
// benchmarks (and stopped when the test binary exits).
func etcdLocker(b *testing.B) fence.Locker {
	b.Helper()
	etcdOnce.Do(func() { etcdSrv, etcdErr = etcdmember.Start() })
	if etcdErr != nil {
		b.Fatal(etcdErr)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdSrv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return etcd.NewLocker(cli, nil)
}

// benchLockers are the Lockers the benchmarks compare; new makes one with a session of
// its own.
var benchLockers = []struct {
	name string
	new  func(b *testing.B) fence.Locker
}{
	{"zookeeper", func(b *testing.B) fence.Locker { return open(b, nil) }},
	{"etcd", etcdLocker},
}

var warmOnce sync.Once

// warmUp runs a few hundred writes and reads on the ZooKeeper server before the first
// measured set: the JVM compiles its hot paths during the first ones, which would
// otherwise count against whichever set runs first.
func warmUp(b *testing.B) {
	warmOnce.Do(func() {
		c := rawConn(b)
		dir := "/bench-warmup-" + benchName()
		if _, err := c.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 500; i++ {
			p, err := c.Create(dir+"/n-", []byte("h 1"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.Children(dir); err != nil {
				b.Fatal(err)
			}
			if err := c.Delete(p, -1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAcquireRelease(b *testing.B) {
	warmUp(b)
	for _, lk := range benchLockers {
		b.Run(lk.name, func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, lk.new(b)) })
	}
	b.Run("zk.Lock", func(b *testing.B) {
		fencetest.BenchmarkMutexLockUnlock(b, zkMutex(rawConn(b), "/bench-zklock/"+benchName()))
	})
}

func BenchmarkHandoff(b *testing.B) {
	warmUp(b)
	for _, lk := range benchLockers {
		b.Run(lk.name, func(b *testing.B) { fencetest.BenchmarkHandoff(b, lk.new(b), lk.new(b)) })
	}
	b.Run("zk.Lock", func(b *testing.B) {
		path := "/bench-zklock/" + benchName()
		fencetest.BenchmarkMutexHandoff(b, zkMutex(rawConn(b), path), zkMutex(rawConn(b), path))
	})
}

// zkLock is go-zookeeper's lock recipe as a fencetest.Mutex (it takes no context).
type zkLock struct{ l *zk.Lock }

func zkMutex(c *zk.Conn, path string) zkLock {
	return zkLock{zk.NewLock(c, path, zk.WorldACL(zk.PermAll))}
}

func (m zkLock) Lock(context.Context) error   { return m.l.Lock() }
func (m zkLock) Unlock(context.Context) error { return m.l.Unlock() }

func benchName() string { return "bench-" + driver.NewLeaseID()[:12] }

// BenchmarkExpiryHandoff measures the handoff after an expiry (see
// fencetest.BenchmarkExpiryHandoff): a holder never releases a 100ms lease (its
// session stays alive), a waiter in its own session is already waiting, and takes
// the lock over by the leader's clock (mtime + TTL), not by session expiry.
//
//	go test -run '^$' -bench ExpiryHandoff -benchtime 100x ./zookeeper/
func BenchmarkExpiryHandoff(b *testing.B) {
	warmUp(b)
	fencetest.BenchmarkExpiryHandoff(b, open(b, nil), open(b, nil), 100*time.Millisecond)
}

// BenchmarkWatchLatency measures how soon a watcher learns of a release: in each
// round a holder acquires and releases the lock while a watcher in a session of its
// own (as another process would be) follows it with Watch. It reports the median and
// p90 time from Release returning to the watcher receiving the free state
// (watch-median-ms, watch-p90-ms; 0 when it came before Release returned, counted in
// seen-first-%), and the median of the Release call (release-median-ms). ns/op is a
// whole round (acquire, seen held, release, seen free) and is not the figure to read.
//
//	go test -run '^$' -bench WatchLatency -benchtime 200x ./zookeeper/
func BenchmarkWatchLatency(b *testing.B) {
	warmUp(b)
	holder, watcher := open(b, nil), open(b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := benchName()
	type seen struct {
		info fence.LockInfo
		at   time.Time
	}
	states := make(chan seen, 16)
	go func() {
		for info, err := range watcher.Watch(ctx, name) {
			if err != nil {
				continue
			}
			select {
			case states <- seen{info, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	wait := func(ok func(fence.LockInfo) bool) time.Time {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case s := <-states:
				if ok(s.info) {
					return s.at
				}
			case <-timeout:
				b.Fatal("the watcher saw no change within 10s")
			}
		}
	}
	wait(func(fence.LockInfo) bool { return true })
	lags := make([]time.Duration, 0, b.N)
	releases := make([]time.Duration, 0, b.N)
	first := 0
	for b.Loop() {
		lease, err := holder.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		wait(func(i fence.LockInfo) bool { return i.Held && i.Token == lease.Token() })
		start := time.Now()
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		at := wait(func(i fence.LockInfo) bool { return !i.Held })
		releases = append(releases, returned.Sub(start))
		lag := at.Sub(returned)
		if lag < 0 {
			lag, first = 0, first+1
		}
		lags = append(lags, lag)
	}
	slices.Sort(lags)
	slices.Sort(releases)
	b.ReportMetric(ms(lags[len(lags)/2]), "watch-median-ms")
	b.ReportMetric(ms(lags[len(lags)*9/10]), "watch-p90-ms")
	b.ReportMetric(ms(releases[len(releases)/2]), "release-median-ms")
	b.ReportMetric(100*float64(first)/float64(len(lags)), "seen-first-%")
}

// BenchmarkAcquireReleaseWatched measures what watching costs the uncontended
// acquire+release pair, on one server: each of its b.N rounds runs one pair on each
// of three locks, in turn, so that the machine's load falls on all three alike: a
// lock nobody watches, one with a watcher in another session, and one with ten
// watchers on the acquiring Locker itself (as `fence serve` answering blocking
// queries would have). After each pair it waits, untimed, until the lock's watchers
// have seen it free, so that no set's watchers still read while the next set's pair
// is timed. It reports each set's median pair in microseconds (unwatched-us,
// watched-1-other-us, watched-10-own-us) and the two ratios to unwatched
// (x-1-other, x-10-own). ns/op is a whole round and is not the figure to read.
//
//	go test -run '^$' -bench AcquireReleaseWatched -benchtime 2000x ./zookeeper/
func BenchmarkAcquireReleaseWatched(b *testing.B) {
	warmUp(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type set struct {
		name     string
		watchers int
		own      bool // the watchers are on the acquiring Locker
		l        fence.Locker
		lock     string
		pairs    []time.Duration
		freed    []atomic.Uint64 // per watcher: LastToken of the last free state seen
	}
	sets := []*set{{name: "unwatched"}, {name: "watched-1-other", watchers: 1}, {name: "watched-10-own", watchers: 10, own: true}}
	for _, s := range sets {
		l := open(b, nil)
		w := l
		if !s.own {
			w = open(b, nil)
		}
		s.l, s.lock, s.freed = l, benchName(), make([]atomic.Uint64, s.watchers)
		for i := range s.freed {
			started := make(chan struct{})
			go func() {
				first := true
				for info, err := range w.Watch(ctx, s.lock) {
					if err == nil && !info.Held {
						s.freed[i].Store(uint64(info.LastToken))
					}
					if first {
						close(started)
						first = false
					}
				}
			}()
			<-started
		}
	}
	// caughtUp waits until every watcher of s has seen it free after token.
	caughtUp := func(s *set, token fence.Token) {
		deadline := time.Now().Add(10 * time.Second)
		for i := range s.freed {
			for s.freed[i].Load() <= uint64(token) {
				if time.Now().After(deadline) {
					b.Fatalf("%s: a watcher did not see the release within 10s", s.name)
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	for b.Loop() {
		for _, s := range sets {
			start := time.Now()
			lease, err := s.l.Acquire(ctx, s.lock, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
			s.pairs = append(s.pairs, time.Since(start))
			caughtUp(s, lease.Token())
		}
	}
	medians := make([]float64, len(sets))
	for i, s := range sets {
		slices.Sort(s.pairs)
		medians[i] = float64(s.pairs[len(s.pairs)/2]) / float64(time.Microsecond)
		b.ReportMetric(medians[i], s.name+"-us")
	}
	b.ReportMetric(medians[1]/medians[0], "x-1-other")
	b.ReportMetric(medians[2]/medians[0], "x-10-own")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// kindMutex is a Locker's grant of some kind on one name as a fencetest.Mutex:
// Lock waits (at most 30s) with opts and keeps the lease for Unlock.
type kindMutex struct {
	l     fence.Locker
	name  string
	opts  []fence.AcquireOption
	lease *fence.Lease
}

func (m *kindMutex) Lock(ctx context.Context) (err error) {
	m.lease, err = m.l.Acquire(ctx, m.name, 10*time.Second, append(m.opts, fence.WithWait(30*time.Second))...)
	return err
}

func (m *kindMutex) Unlock(ctx context.Context) error { return m.lease.Release(ctx) }

// kindSets are the kinds of grant the semaphore benchmarks compare on one name:
// filler is how many permits another session holds throughout (so that the
// measured permit is not in slot 0, or the semaphore is full for a handoff).
var kindSets = []struct {
	name   string
	opts   []fence.AcquireOption
	filler int
}{
	{"lock", nil, 0},
	{"semaphore", []fence.AcquireOption{fence.WithLimit(2)}, 0},
	{"semaphore-slot1", []fence.AcquireOption{fence.WithLimit(2)}, 1},
	{"shared", []fence.AcquireOption{fence.WithShared()}, 0},
}

// fill holds n grants with opts on name from a session of its own, released at
// cleanup.
func fill(b *testing.B, name string, n int, opts []fence.AcquireOption) {
	b.Helper()
	l := open(b, nil)
	for range n {
		lease, err := l.Acquire(context.Background(), name, time.Minute, append(opts, fence.WithAutoRenew())...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lease.Release(context.Background()) })
	}
}

// BenchmarkKinds compares the kinds of grant on this package's Locker, in one run:
//
//	go test -run '^$' -bench Kinds -benchtime 200x ./zookeeper/
//
// AcquireRelease is one uncontended acquire+release pair (ns/op) of a lock, a
// permit of a semaphore of 2 alone (slot 0), a permit while another session holds
// slot 0 (the acquire then judges that holder's TTL, two round trips more), and a
// shared lease. Handoff (see fencetest.BenchmarkHandoff for the figures) hands a
// lock, or the last permit of a semaphore of 2 whose other permit another session
// holds, from a holder to a waiter in another session.
func BenchmarkKinds(b *testing.B) {
	warmUp(b)
	b.Run("AcquireRelease", func(b *testing.B) {
		for _, k := range kindSets {
			b.Run(k.name, func(b *testing.B) {
				name := benchName()
				fill(b, name, k.filler, k.opts)
				fencetest.BenchmarkMutexLockUnlock(b, &kindMutex{l: open(b, nil), name: name, opts: k.opts})
			})
		}
	})
	b.Run("Handoff", func(b *testing.B) {
		for _, k := range kindSets[:3] {
			if k.name == "semaphore" {
				continue // a permit of a semaphore that is not full is not handed off
			}
			b.Run(k.name, func(b *testing.B) {
				name := benchName()
				fill(b, name, k.filler, k.opts)
				fencetest.BenchmarkMutexHandoff(b,
					&kindMutex{l: open(b, nil), name: name, opts: k.opts},
					&kindMutex{l: open(b, nil), name: name, opts: k.opts})
			})
		}
	})
}
