package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// kinds are the kinds of grant the semaphore benchmarks compare: a lock, a
// permit of a semaphore of 4 and a shared lease.
var kinds = []struct {
	name string
	opts []fence.AcquireOption
}{
	{"lock", nil},
	{"semaphore", []fence.AcquireOption{fence.WithLimit(4)}},
	{"shared", []fence.AcquireOption{fence.WithShared()}},
}

func openBench(b *testing.B) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "fence.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkKindAcquireRelease measures acquire+release pairs of a lock, a
// semaphore permit and a shared lease on a durable store (fsync on, default
// options), one name per goroutine, so their ratio can be read off one run
// (the target: a permit within 1.5x of a lock):
//
//	go test -run '^$' -bench KindAcquireRelease ./bolt/
func BenchmarkKindAcquireRelease(b *testing.B) {
	for _, goroutines := range []int{1, 16} {
		for _, k := range kinds {
			b.Run(fmt.Sprintf("goroutines=%d/%s", goroutines, k.name), func(b *testing.B) {
				runPairs(b, openBench(b), goroutines, k.opts...)
			})
		}
	}
}

// BenchmarkReleaseHandoff measures the handoff of a lock and of a permit to a
// waiter already waiting, on a durable store: the time from the holder's
// Release call to the waiter's grant (the release's commit and the grant's),
// median and 90th percentile. The semaphore (limit 2) has both permits held
// and one of them is released. The target: a permit within 2x of a lock.
//
//	go test -run '^$' -bench ReleaseHandoff -benchtime 300x ./bolt/
func BenchmarkReleaseHandoff(b *testing.B) {
	for _, k := range []struct {
		name   string
		opts   []fence.AcquireOption
		others int // permits held beside the one released
	}{{"lock", nil, 0}, {"semaphore", []fence.AcquireOption{fence.WithLimit(2)}, 1}} {
		b.Run(k.name, func(b *testing.B) {
			s := openBench(b)
			ctx := context.Background()
			for range k.others {
				if _, err := s.Acquire(ctx, "h", time.Hour, k.opts...); err != nil {
					b.Fatal(err)
				}
			}
			samples := make([]time.Duration, 0, b.N)
			holder, err := s.Acquire(ctx, "h", time.Hour, k.opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				got := make(chan *fence.Lease, 1)
				go func() {
					l, err := s.Acquire(ctx, "h", time.Hour, append(k.opts, fence.WithWait(time.Minute))...)
					if err != nil {
						b.Error(err)
					}
					got <- l
				}()
				if !waiterWaiting(s, "h") {
					b.Fatal("the waiter did not wait within 10s")
				}
				start := time.Now()
				if err := holder.Release(ctx); err != nil {
					b.Fatal(err)
				}
				holder = <-got
				samples = append(samples, time.Since(start))
				if holder == nil {
					return
				}
			}
			b.StopTimer()
			reportLatency(b, samples)
		})
	}
}

// waiterWaiting reports, within 10s, whether a waiter has the wake channel of
// name.
func waiterWaiting(s *Store, name string) bool {
	for range 10000 {
		s.mu.Lock()
		e := s.locks[name]
		ok := e != nil && e.x != nil && e.x.wake != nil
		s.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
