package etcd_test

import (
	"context"
	"testing"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
)

// The handoff after a leader resigns, on the package's single-member etcd: fence's
// election on the etcd Locker, and etcd's own concurrency.Election, each alone
// (fencetest.BenchmarkResignHandoff and BenchmarkMutexHandoff, handoff-median-ms),
// then interleaved round by round with the same Locker's lock handoff after a
// release (each candidate on a client or session of its own), so the two
// targets are read off one run: lock/election at least 0.5 (the election within 2x
// of the lock) and concurrency.Election/election at least 10.
//
// concurrency.Election's waiter watches the key before it from the revision it
// read, and etcd serves a watch that starts at or below its current revision from
// a catch-up loop that runs every 100ms: a waiter that began waiting less than
// that before the release (30ms here, as in every handoff benchmark) is told of it
// 0 to 100ms late, by the loop's phase. Alone, back-to-back rounds fall in step
// with the loop and nearly every handoff is late; interleaved, the phase varies
// and the median may be a prompt one: read both the median and the p90.
//
//	go test -run '^$' -bench ResignHandoff -benchtime 100x ./etcd/
func BenchmarkResignHandoff(b *testing.B) {
	b.Run("election", func(b *testing.B) {
		fencetest.BenchmarkResignHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil))
	})
	b.Run("concurrency.Election", func(b *testing.B) {
		pfx := "bench-etcd-election/" + benchName()
		fencetest.BenchmarkMutexHandoff(b, etcdElection{concurrency.NewElection(session(b), pfx)}, etcdElection{concurrency.NewElection(session(b), pfx)})
	})
	b.Run("vs-lock-and-concurrency.Election", func(b *testing.B) {
		name := benchName()
		candidate := func() fencetest.Mutex {
			return fencetest.ElectionMutex(etcd.NewLocker(client(b), nil), "bench-election/"+name)
		}
		holder := func() fencetest.Mutex {
			return fencetest.LockerMutex(etcd.NewLocker(client(b), nil), "bench-lock/"+name)
		}
		etcdCandidate := func() fencetest.Mutex {
			return etcdElection{concurrency.NewElection(session(b), "bench-etcd-election/"+name)}
		}
		fencetest.BenchmarkHandoffInterleaved(b,
			fencetest.HandoffSubject{Name: "election", Holder: candidate(), Waiter: candidate()},
			fencetest.HandoffSubject{Name: "lock", Holder: holder(), Waiter: holder()},
			fencetest.HandoffSubject{Name: "concurrency.Election", Holder: etcdCandidate(), Waiter: etcdCandidate()},
		)
	})
}

// etcdElection is a candidate of etcd's concurrency.Election as a
// fencetest.Mutex: Lock campaigns, Unlock resigns.
type etcdElection struct{ e *concurrency.Election }

func (c etcdElection) Lock(ctx context.Context) error   { return c.e.Campaign(ctx, "candidate") }
func (c etcdElection) Unlock(ctx context.Context) error { return c.e.Resign(ctx) }
