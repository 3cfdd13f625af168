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
	"github.com/fencelock/fence/internal/watchtest"
)

// watchWithin bounds how soon a watcher must see a change in these tests: well
// under driver.DefaultWatchPoll, so a change found only by the fallback poll fails.
const watchWithin = 2 * time.Second

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
		name string
		*watchtest.Follower
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
			ws = append(ws, watcher{name, watchtest.Follow(wctx, s, name)})
		}
	}
	for _, w := range ws {
		w.MustUntil(t, watchWithin, "the lock held", watchtest.Held(true))
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		w.MustUntil(t, watchWithin, "the release of "+w.name, watchtest.Held(false))
	}
	cancel()
	for _, w := range ws {
		select {
		case <-w.Done():
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
	f := watchtest.Follow(wctx, s, name)
	f.MustUntil(t, watchWithin, "the first state", watchtest.Any)

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
	info := f.MustUntil(t, watchWithin, "the lock free after the failed grant", func(i fence.LockInfo) bool { return !i.Held && i.LastToken > 0 }).Info
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
	f := watchtest.Follow(wctx, s, "restored")
	f.MustUntil(t, watchWithin, "the restored lease", func(i fence.LockInfo) bool { return i.Held && i.Token == l.Token() })
	f.MustUntil(t, watchWithin, "its expiry", func(i fence.LockInfo) bool { return !i.Held && i.LastToken == l.Token() })
}

// Close ends every watch with an error matching fence.ErrClosed, at once.
func TestStore_Watch_Close_EndsWatchesWithErrClosed(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "fence.db"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	ends := make(chan error, 3)
	for range 3 {
		f := watchtest.Follow(ctx, s, "closing")
		f.MustUntil(t, watchWithin, "the first state", watchtest.Any)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-f.Done():
				select {
				case err := <-f.Errs():
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
