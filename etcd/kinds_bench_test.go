package etcd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencetest"
)

// Semaphores and shared locks against locks, in one run on the same embedded etcd:
//
//	go test -run '^$' -bench 'Kinds' -benchtime 200x ./etcd/
//
// BenchmarkKinds_AcquireRelease interleaves, in each iteration, one uncontended
// acquire+release pair of a lock, of a permit of a semaphore of 3 and of a shared
// lease, each on a name of its own, and reports each kind's median pair in
// microseconds (KIND-median-us) and its median over the lock's (KIND/lock).
// BenchmarkKinds_Handoff is fencetest.BenchmarkHandoffInterleaved over a lock and a
// permit: the permit's semaphore of 2 has its other permit held by a third Locker,
// so the waiter waits for the holder's permit, and is granted its slot.

func BenchmarkKinds_AcquireRelease(b *testing.B) {
	ctx := context.Background()
	l := etcd.NewLocker(client(b), nil)
	kinds := []struct {
		name string
		opts []fence.AcquireOption
	}{{"lock", nil}, {"semaphore-3", []fence.AcquireOption{fence.WithLimit(3)}}, {"shared", []fence.AcquireOption{fence.WithShared()}}}
	times := make([][]time.Duration, len(kinds))
	names := make([]string, len(kinds))
	for i := range kinds {
		names[i] = benchName()
	}
	for b.Loop() {
		for i, k := range kinds {
			start := time.Now()
			a, err := l.Acquire(ctx, names[i], 10*time.Second, k.opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Release(ctx); err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	var lock time.Duration
	for i, k := range kinds {
		slices.Sort(times[i])
		med := times[i][len(times[i])/2]
		b.ReportMetric(float64(med)/float64(time.Microsecond), k.name+"-median-us")
		if i == 0 {
			lock = med
		} else {
			b.ReportMetric(float64(med)/float64(lock), k.name+"/lock")
		}
	}
}

func BenchmarkKinds_Handoff(b *testing.B) {
	ctx := context.Background()
	holder, waiter, filler := etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil), etcd.NewLocker(client(b), nil)
	lock, sem := benchName(), benchName()
	other, err := filler.Acquire(ctx, sem, time.Minute, fence.WithLimit(2), fence.WithAutoRenew())
	if err != nil {
		b.Fatal(err)
	}
	defer other.Release(ctx)
	fencetest.BenchmarkHandoffInterleaved(b,
		fencetest.HandoffSubject{Name: "lock", Holder: fencetest.LockerMutex(holder, lock), Waiter: fencetest.LockerMutex(waiter, lock)},
		fencetest.HandoffSubject{Name: "permit", Holder: &permitMutex{l: holder, name: sem, limit: 2}, Waiter: &permitMutex{l: waiter, name: sem, limit: 2}},
	)
}

// permitMutex is a permit of a semaphore as a fencetest.Mutex: Lock waits (at
// most 30s) for a permit and keeps its lease for Unlock.
type permitMutex struct {
	l     fence.Locker
	name  string
	limit int
	lease *fence.Lease
}

func (m *permitMutex) Lock(ctx context.Context) (err error) {
	m.lease, err = m.l.Acquire(ctx, m.name, 10*time.Second, fence.WithLimit(m.limit), fence.WithWait(30*time.Second))
	return err
}

func (m *permitMutex) Unlock(ctx context.Context) error { return m.lease.Release(ctx) }
