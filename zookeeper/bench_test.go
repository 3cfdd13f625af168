package zookeeper_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/testserv"
	"github.com/fencelock/fence/internal/testserv/etcdserv"
)

// Run every set in one run, so the figures sit side by side on the same machine:
//
//	go test -run '^$' -bench . -benchtime 200x ./zookeeper/
//
// BenchmarkAcquireRelease times one uncontended acquire+release pair (ns/op) on this
// package's Locker (standalone ZooKeeper), go-zookeeper's own zk.Lock recipe (no
// fencing token, no TTL) on the same server, and the etcd package's Locker on an
// embedded single-member etcd. BenchmarkHandoff reports the median and p90 time from
// the holder's release call to the blocked waiter holding the lock
// (handoff-median-ms); its ns/op includes each round's setup and is not the figure to
// read.

var (
	etcdOnce sync.Once
	etcdSrv  *etcdserv.Server
	etcdErr  error
)

// etcdLocker returns an etcd Locker on an embedded etcd started once for the
// benchmarks (and stopped when the test binary exits).
func etcdLocker(b *testing.B) fence.Locker {
	b.Helper()
	etcdOnce.Do(func() { etcdSrv, etcdErr = etcdserv.Start() })
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

// zkConn returns a raw go-zookeeper connection to the shared server.
func zkConn(b *testing.B) *zk.Conn {
	b.Helper()
	testserv.SkipIfShort(b)
	c, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

var warmOnce sync.Once

// warmUp runs a few hundred writes and reads on the ZooKeeper server before the first
// measured set: the JVM compiles its hot paths during the first ones, which would
// otherwise count against whichever set runs first.
func warmUp(b *testing.B) {
	warmOnce.Do(func() {
		c := zkConn(b)
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
	ctx := context.Background()
	warmUp(b)
	lockers := []struct {
		name string
		new  func(b *testing.B) fence.Locker
	}{
		{"zookeeper", func(b *testing.B) fence.Locker { return open(b, nil) }},
		{"etcd", etcdLocker},
	}
	for _, lk := range lockers {
		b.Run(lk.name, func(b *testing.B) {
			l := lk.new(b)
			name := benchName()
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
	}
	b.Run("zk.Lock", func(b *testing.B) {
		m := zk.NewLock(zkConn(b), "/bench-zklock/"+benchName(), zk.WorldACL(zk.PermAll))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := m.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// waiterBlockDelay is how long a round gives the waiter to start watching before the
// holder releases. No locker exposes "now waiting", so this is a delay outside the
// measured interval; it only has to be long enough.
const waiterBlockDelay = 30 * time.Millisecond

func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	warmUp(b)
	lockers := []struct {
		name string
		new  func(b *testing.B) fence.Locker
	}{
		{"zookeeper", func(b *testing.B) fence.Locker { return open(b, nil) }},
		{"etcd", etcdLocker},
	}
	for _, lk := range lockers {
		b.Run(lk.name, func(b *testing.B) {
			holder, waiter := lk.new(b), lk.new(b)
			name := benchName()
			handoffs := make([]time.Duration, 0, b.N)
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
		})
	}
	b.Run("zk.Lock", func(b *testing.B) {
		c1, c2 := zkConn(b), zkConn(b)
		path := "/bench-zklock/" + benchName()
		handoffs := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			m1, m2 := zk.NewLock(c1, path, zk.WorldACL(zk.PermAll)), zk.NewLock(c2, path, zk.WorldACL(zk.PermAll))
			if err := m1.Lock(); err != nil {
				b.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- m2.Lock() }()
			time.Sleep(waiterBlockDelay)
			start := time.Now()
			if err := m1.Unlock(); err != nil {
				b.Fatal(err)
			}
			if err := <-got; err != nil {
				b.Fatal(err)
			}
			handoffs = append(handoffs, time.Since(start))
			if err := m2.Unlock(); err != nil {
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
