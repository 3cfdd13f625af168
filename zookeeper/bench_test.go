package zookeeper_test

import (
	"context"
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
	"github.com/fencelock/fence/internal/testserv/etcdserv"
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
