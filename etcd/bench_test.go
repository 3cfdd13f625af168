package etcd_test

import (
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

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
	b.Run("concurrency.Mutex", func(b *testing.B) {
		fencetest.BenchmarkMutexLockUnlock(b, concurrency.NewMutex(session(b), "bench-mutex/"+benchName()))
	})
}

func BenchmarkHandoff(b *testing.B) {
	b.Run("fence", func(b *testing.B) {
		fencetest.BenchmarkHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil))
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
