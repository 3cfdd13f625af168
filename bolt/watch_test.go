package bolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
)

// watchWithin bounds how soon a watcher must see a change in these tests: well
// under driver.DefaultWatchPoll, so a change found only by the fallback poll fails.
const watchWithin = 2 * time.Second

// watchStates runs s.Watch(ctx, name) in a goroutine and returns what it yields,
// and a channel closed when the watch has ended.
func watchStates(ctx context.Context, s *Store, name string) (<-chan fence.LockInfo, <-chan error, <-chan struct{}) {
	states := make(chan fence.LockInfo, 64)
	errs := make(chan error, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info, err := range s.Watch(ctx, name) {
			if err != nil {
				errs <- err
				continue
			}
			select {
			case states <- info:
			case <-ctx.Done():
				return
			}
		}
	}()
	return states, errs, done
}

// waitState reads states until one satisfies ok, failing t after watchWithin.
func waitState(t *testing.T, states <-chan fence.LockInfo, what string, ok func(fence.LockInfo) bool) fence.LockInfo {
	t.Helper()
	deadline := time.After(watchWithin)
	for {
		select {
		case info := <-states:
			if ok(info) {
				return info
			}
		case <-deadline:
			t.Fatalf("no state with %s within %v", what, watchWithin)
			return fence.LockInfo{}
		}
	}
}

// settleGoroutines waits (at most 2s) until at most want goroutines run, and
// returns how many run then.
func settleGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// Many watchers of one name, and watchers of many names: each sees the release
// promptly, and once their contexts end no subscription or goroutine is left.
func TestStore_Watch_ManyWatchersAndNames_NothingLeftAfterCancel(t *testing.T) {
	s := openStore(t, nil)
	ctx := context.Background()
	base := runtime.NumGoroutine()
	const perName, names = 50, 20
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type watcher struct {
		name   string
		states <-chan fence.LockInfo
		done   <-chan struct{}
	}
	var ws []watcher
	leases := make([]*fence.Lease, names)
	for i := range names {
		name := fmt.Sprintf("many-%d", i)
		leases[i] = mustAcquire(t, s, name, time.Minute)
		n := 1
		if i == 0 {
			n = perName // one name with many watchers
		}
		for range n {
			states, _, done := watchStates(wctx, s, name)
			ws = append(ws, watcher{name, states, done})
		}
	}
	for _, w := range ws {
		waitState(t, w.states, "the lock held", func(i fence.LockInfo) bool { return i.Held })
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		waitState(t, w.states, "the release of "+w.name, func(i fence.LockInfo) bool { return !i.Held })
	}
	cancel()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-time.After(watchWithin):
			t.Fatalf("a watch of %s still runs %v after its context ended", w.name, watchWithin)
		}
	}
	for i := range names {
		name := fmt.Sprintf("many-%d", i)
		// The subscription is removed by a context.AfterFunc, which may run just
		// after the watch has returned: give it a moment.
		for deadline := time.Now().Add(2 * time.Second); s.watchers.Active(name) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if s.watchers.Active(name) {
			t.Errorf("%s still has watch subscriptions after every watch ended", name)
		}
	}
	if n := settleGoroutines(base); n > base {
		t.Errorf("%d goroutines run after the %d watches ended; %d did before they started", n, len(ws), base)
	}
}

// A grant is reported held while its write is in flight; when the write fails
// the grant is taken back, and a watcher that may have seen it held sees the
// lock free again, without waiting for the fallback poll.
func TestStore_Watch_GrantTakenBackAfterFailedWrite_WatcherSeesItFree(t *testing.T) {
	s := openStore(t, nil)
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const name = "taken-back"
	states, _, _ := watchStates(wctx, s, name)
	waitState(t, states, "the first state", func(fence.LockInfo) bool { return true })

	// A first grant reserves tokens ahead, so that the next one needs no write
	// but its own.
	if err := mustAcquire(t, s, "warm-up", time.Minute).Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Make the lease log refuse writes: a read-only descriptor of the same file,
	// swapped in while no flush runs.
	ro, err := os.Open(s.wal.path)
	if err != nil {
		t.Fatal(err)
	}
	s.fmu.Lock()
	rw := s.wal.f
	s.wal.f = ro
	s.fmu.Unlock()
	_, aerr := s.Acquire(ctx, name, time.Minute)
	s.fmu.Lock()
	s.wal.f = rw
	s.fmu.Unlock()
	ro.Close()
	if !errors.Is(aerr, fence.ErrUnavailable) {
		t.Fatalf("Acquire while the lease log refuses writes = %v; want ErrUnavailable", aerr)
	}
	info := waitState(t, states, "the lock free after the failed grant", func(i fence.LockInfo) bool { return !i.Held && i.LastToken > 0 })
	if now, err := s.Inspect(ctx, name); err != nil || now.Held || now.Index() != info.Index() {
		t.Fatalf("watched %+v after the failed grant; Inspect says %+v, %v", info, now, err)
	}
}

// A lease restored after a crash is watched as any other: held with its
// token, then free at its expiry, which no message announces.
func TestStore_Watch_RestoredLeaseAfterCrash_SeenHeldThenExpired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	l := mustAcquire(t, s, "restored", 300*time.Millisecond)
	s.abandon()
	s = mustOpen(t, path, nil)
	t.Cleanup(func() { _ = s.Close() })
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states, _, _ := watchStates(wctx, s, "restored")
	waitState(t, states, "the restored lease", func(i fence.LockInfo) bool { return i.Held && i.Token == l.Token() })
	waitState(t, states, "its expiry", func(i fence.LockInfo) bool { return !i.Held && i.LastToken == l.Token() })
}

// Close ends every watch with an error matching fence.ErrClosed, at once.
func TestStore_Watch_Close_EndsWatchesWithErrClosed(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "fence.db"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	ends := make(chan error, 3)
	for range 3 {
		states, errs, done := watchStates(ctx, s, "closing")
		waitState(t, states, "the first state", func(fence.LockInfo) bool { return true })
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-done:
				select {
				case err := <-errs:
					ends <- err
				default:
					ends <- errors.New("the watch ended without an error")
				}
			case <-time.After(watchWithin):
				ends <- fmt.Errorf("the watch still runs %v after Close", watchWithin)
			}
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(ends)
	for err := range ends {
		if !errors.Is(err, fence.ErrClosed) {
			t.Errorf("watch at Close: got %v, want an error matching fence.ErrClosed", err)
		}
	}
}
