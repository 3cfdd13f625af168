package etcd_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
)

// Semaphores and shared locks against locks, in one run on the same embedded etcd:
//
//	go test -run '^$' -bench 'Kinds' -benchtime 100x -count 3 ./etcd/
//
// BenchmarkKinds_AcquireRelease times one uncontended acquire+release pair
// (ns/op) of a lock, of a permit of a semaphore of 3 and of a shared lease, each
// also with a request id (fence.WithRequestID).
// BenchmarkKinds_Handoff reports the median and p90 handoff (handoff-median-ms) of
// a lock, of a permit of a full semaphore of 3 to a waiting permit
// (fencetest.BenchmarkPermitHandoff), and of a shared lease to a waiting writer.

func BenchmarkKinds_AcquireRelease(b *testing.B) {
	pairs := func(opts ...fence.AcquireOption) func(*testing.B) {
		return func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, etcd.NewLocker(client(b), nil), opts...) }
	}
	b.Run("lock", pairs())
	b.Run("semaphore-3", pairs(fence.WithLimit(3)))
	b.Run("shared", pairs(fence.WithShared()))
	// With a request id, as every HTTP client's acquire has: a lock writes and
	// reads one key more in its transactions; a permit or shared lease first
	// reads its holders (serializable). One id for every pair: each pair's
	// acquire comes after the last one's release, so each is a new grant.
	const rid = "bench-request-id"
	b.Run("lock-request-id", pairs(fence.WithRequestID(rid)))
	b.Run("semaphore-3-request-id", pairs(fence.WithLimit(3), fence.WithRequestID(rid)))
	b.Run("shared-request-id", pairs(fence.WithShared(), fence.WithRequestID(rid)))
}

func BenchmarkKinds_Handoff(b *testing.B) {
	b.Run("lock", func(b *testing.B) {
		fencetest.BenchmarkHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil))
	})
	b.Run("permit-3", func(b *testing.B) {
		fencetest.BenchmarkPermitHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), 3)
	})
	b.Run("shared-to-writer", func(b *testing.B) {
		fencetest.BenchmarkHandoff(b, etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), fence.WithShared())
	})
}
