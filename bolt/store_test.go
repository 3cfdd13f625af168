package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
	bbolt "go.etcd.io/bbolt"
)

// mustOpen opens the store at path, failing the test if it cannot.
func mustOpen(t testing.TB, path string, o *Options) *Store {
	t.Helper()
	s, err := Open(path, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// openStore opens a store in a fresh temp dir, closed at cleanup.
func openStore(t *testing.T, o *Options) *Store {
	t.Helper()
	s := mustOpen(t, filepath.Join(t.TempDir(), "fence.db"), o)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustAcquire(t *testing.T, s *Store, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", name, ttl, err)
	}
	return l
}

func TestStore_AcquireRelease_TokensIncreaseAcrossNames(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	var prev fence.Token
	for i := 0; i < 50; i++ {
		name := []string{"a", "b", "a/c"}[i%3]
		l := mustAcquire(t, s, name, time.Minute)
		if l.Token() <= prev {
			t.Fatalf("grant %d on %q: token %d, want > %d", i, name, l.Token(), prev)
		}
		prev = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func TestStore_Acquire_HeldReturnsHeldError(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	mustAcquire(t, s, "job", time.Minute)
	_, err := s.Acquire(context.Background(), "job", time.Minute)
	var he *fence.HeldError
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &he) {
		t.Fatalf("second Acquire: got %v, want a *fence.HeldError matching ErrNotAcquired", err)
	}
	if he.ExpiresIn <= 0 || he.ExpiresIn > time.Minute {
		t.Fatalf("HeldError.ExpiresIn = %v, want in (0, 1m]", he.ExpiresIn)
	}
}

func TestStore_Acquire_WaitWokenByRelease(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	first := mustAcquire(t, s, "job", time.Hour)
	got := make(chan *fence.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, "job", time.Minute, fence.WithWait(fence.WaitForever))
		errc <- err
		got <- l
	}()
	// The waiter cannot be granted before the release: the lease lasts an hour.
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("waiting Acquire: %v", err)
	}
	if l := <-got; l.Token() <= first.Token() {
		t.Fatalf("waiter token %d, want > %d", l.Token(), first.Token())
	}
}

func TestStore_Acquire_WaitWokenByExpiryOnManualClock(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := openStore(t, &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	mustAcquire(t, s, "job", 10*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "job", time.Second, fence.WithWait(time.Minute))
		errc <- err
	}()
	// Advance in small steps until the waiter (which registers asynchronously)
	// has been granted; it must not be granted before the holder's 10s.
	for elapsed := time.Duration(0); ; elapsed += time.Second {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("waiting Acquire: %v", err)
			}
			if elapsed < 10*time.Second {
				t.Fatalf("granted after %v of virtual time, want >= 10s", elapsed)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if elapsed > 30*time.Second {
			t.Fatalf("waiter not granted after %v of virtual time", elapsed)
		}
		clock.Advance(time.Second)
	}
}

// The wait is measured by the store's clock: on a virtual clock it ends when
// that clock has advanced by the wait, however little real time passed, and the
// error is the engine's.
func TestStore_Acquire_WaitEndsByManualClock(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := openStore(t, &Options{NoSync: true, Clock: clock})
	mustAcquire(t, s, "job", time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), "job", time.Second, fence.WithWait(5*time.Second))
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("Acquire returned before the virtual clock moved: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("waiter still waiting after 100s of virtual time")
		}
		clock.Advance(time.Second)
		select {
		case err := <-errc:
			var he *fence.HeldError
			if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &he) {
				t.Fatalf("got %v, want a *fence.HeldError matching ErrNotAcquired", err)
			}
			if want := `bolt: lock "job" not acquired after waiting 5s: held, expires in `; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("got %q, want it to start %q", err, want)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestStore_Acquire_ContextCancelledWhileWaiting(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	mustAcquire(t, s, "job", time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Acquire(ctx, "job", time.Minute, fence.WithWait(fence.WaitForever))
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotAcquired and context.Canceled", err)
	}
}

func TestStore_Renew_AfterExpiryReturnsNotHeld(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := openStore(t, &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	l := mustAcquire(t, s, "job", time.Second)
	if err := s.Renew(ctx, "job", l.ID(), 2*time.Second); err != nil {
		t.Fatalf("Renew while held: %v", err)
	}
	clock.Advance(1500 * time.Millisecond)
	if err := s.Renew(ctx, "job", l.ID(), 2*time.Second); err != nil {
		t.Fatalf("Renew within the renewed TTL: %v", err)
	}
	clock.Advance(3 * time.Second)
	if err := s.Renew(ctx, "job", l.ID(), time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew after expiry: got %v, want ErrNotHeld", err)
	}
}

func TestStore_RenewRelease_OtherLeaseIDNeverTouchesHolder(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	l := mustAcquire(t, s, "job", time.Minute)
	for _, id := range []string{driver.NewLeaseID(), "not-hex-but-valid", l.ID() + "0"} {
		if err := s.Renew(ctx, "job", id, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Renew with %q: got %v, want ErrNotHeld", id, err)
		}
		if err := s.Release(ctx, "job", id); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Release with %q: got %v, want ErrNotHeld", id, err)
		}
	}
	if err := s.Release(ctx, "job", ""); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Release with empty id: got %v, want ErrInvalid", err)
	}
	info, err := s.Inspect(ctx, "job")
	if err != nil || !info.Held || info.Token != l.Token() {
		t.Fatalf("Inspect after foreign renew/release: %+v, %v; want held with token %d", info, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("second Release: got %v, want ErrNotHeld", err)
	}
}

func TestStore_BadInput_ReturnsErrInvalid(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	long := string(bytes.Repeat([]byte("x"), fence.MaxNameLen+1))
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Second}, {long, time.Second}, {"a\x00b", time.Second}, {"\xff", time.Second},
		{"ok", 0}, {"ok", -time.Second}, {"ok", fence.MaxTTL + time.Millisecond}, {"ok", 1500 * time.Microsecond}} {
		if _, err := s.Acquire(ctx, tc.name, tc.ttl); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Acquire(%q, %v): got %v, want ErrInvalid", tc.name, tc.ttl, err)
		}
	}
	if err := s.Heal(ctx, "ok", fence.MaxToken+1); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Heal above MaxToken: got %v, want ErrInvalid", err)
	}
	if _, err := Open("", nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Open(\"\"): got %v, want ErrInvalid", err)
	}
	if _, err := Open(t.TempDir(), nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Open(dir): got %v, want ErrInvalid", err)
	}
}

func TestStore_Reopen_CleanClose_KeepsLeasesAndTokensWithoutGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	ctx := context.Background()
	s := mustOpen(t, path, &Options{TokenBlock: 8})
	held := mustAcquire(t, s, "held", time.Minute)
	var last fence.Token
	for i := 0; i < 20; i++ {
		l := mustAcquire(t, s, "free", time.Minute)
		last = l.Token()
		_ = l.Release(ctx)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = mustOpen(t, path, &Options{TokenBlock: 8})
	defer s.Close()
	l := mustAcquire(t, s, "free", time.Minute) // no grace after a clean close
	if l.Token() <= last {
		t.Fatalf("token after reopen %d, want > %d", l.Token(), last)
	}
	if _, err := s.Acquire(ctx, "held", time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire of a lease held across a clean close: got %v, want ErrNotAcquired", err)
	}
	if err := s.Release(ctx, "held", held.ID()); err != nil {
		t.Fatalf("Release after reopen by the pre-close holder: %v", err)
	}
	info, err := s.Inspect(ctx, "free")
	if err != nil || info.LastToken != l.Token() {
		t.Fatalf("Inspect(free) = %+v, %v; want LastToken %d", info, err, l.Token())
	}
}

func TestStore_Reopen_AfterCrash_HoldersKeepLeasesFreeNamesGrantedAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	o := &Options{TokenBlock: 4}
	s := mustOpen(t, path, o)
	ctx := context.Background()
	var tokens []fence.Token
	for i := 0; i < 10; i++ {
		l := mustAcquire(t, s, "n", 200*time.Millisecond)
		tokens = append(tokens, l.Token())
		_ = l.Release(ctx)
	}
	// The store's expiry of the held lease is at least heldMin (the call began
	// after heldStart): until then no grant on "h" is allowed.
	heldStart := time.Now()
	held := mustAcquire(t, s, "h", 2*time.Second)
	heldMin := heldStart.Add(2 * time.Second)
	s.abandon() // as kill -9: no final write

	s = mustOpen(t, path, o)
	defer s.Close()
	// Names without a live lease are granted at once, without waiting.
	for _, name := range []string{"n", "never-used"} {
		l, err := s.Acquire(ctx, name, time.Second)
		if err != nil {
			t.Fatalf("Acquire(%q) right after the crash: %v, want granted at once", name, err)
		}
		if l.Token() <= held.Token() || l.Token() <= tokens[len(tokens)-1] {
			t.Fatalf("token after crash %d, want > %d and > %d", l.Token(), held.Token(), tokens[len(tokens)-1])
		}
	}
	_, err := s.Acquire(ctx, "h", time.Second)
	var he *fence.HeldError
	if returned := time.Now(); returned.Before(heldMin) && (!errors.As(err, &he) || he.ExpiresIn <= 0) {
		t.Fatalf("Acquire(h), %v before the pre-crash lease expires: got %v, want a *fence.HeldError", heldMin.Sub(returned), err)
	}
	info, err := s.Inspect(ctx, "h")
	if err != nil || !info.Held || info.Token != held.Token() {
		t.Fatalf("Inspect(h) = %+v, %v; want held by token %d", info, err, held.Token())
	}
	// Its holder renews and releases it with the same lease id.
	if err := s.Renew(ctx, "h", held.ID(), 3*time.Second); err != nil {
		t.Fatalf("Renew by the pre-crash holder: %v", err)
	}
	if err := s.Release(ctx, "h", held.ID()); err != nil {
		t.Fatalf("Release by the pre-crash holder: %v", err)
	}
	if _, err := s.Acquire(ctx, "h", time.Second); err != nil {
		t.Fatalf("Acquire(h) after its holder released it: %v", err)
	}
}

func TestStore_Reopen_AfterCrash_LongLeaseHonouredReleasedNameFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	long := mustAcquire(t, s, "long", time.Hour)
	mustAcquire(t, s, "short", 50*time.Millisecond)
	released := mustAcquire(t, s, "released", time.Hour)
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.abandon()

	s = mustOpen(t, path, nil)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Acquire(ctx, "short", time.Second, fence.WithWait(5*time.Second)); err != nil {
		t.Fatalf("Acquire(short) once its 50ms are over: %v", err)
	}
	if _, err := s.Acquire(ctx, "released", time.Second); err != nil {
		t.Fatalf("Acquire(released) right after the crash: %v", err)
	}
	_, err := s.Acquire(ctx, "long", time.Second)
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire(long): got %v, want ErrNotAcquired (held for an hour)", err)
	}
	info, err := s.Inspect(ctx, "long")
	if err != nil || !info.Held || info.Token != long.Token() || info.ExpiresIn < 59*time.Minute {
		t.Fatalf("Inspect(long) = %+v, %v; want held by token %d for about an hour", info, err, long.Token())
	}
	if err := s.Renew(ctx, "long", long.ID(), time.Hour); err != nil {
		t.Fatalf("Renew by the pre-crash holder: %v", err)
	}
}

// steppingClock is a manual monotonic clock with a wall clock that can be
// stepped apart from it, as the system's is by settimeofday.
type steppingClock struct {
	*inmem.ManualClock
	mu   sync.Mutex
	step time.Duration
}

func (c *steppingClock) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Now().Add(c.step)
}

func (c *steppingClock) stepWall(d time.Duration) {
	c.mu.Lock()
	c.step += d
	c.mu.Unlock()
}

// crashWithStep grants a 10s lease, steps the wall clock by step while the store
// runs, lets the store see it (another grant), crashes, and reopens with the
// stepped wall clock. It returns the reopened store and the lease.
//
// With unseen, the running store is given a wall clock without the step (the
// reopened one has it): it writes its file as a store that ignored the step
// would, the negative control of the tests that it does not.
func crashWithStep(t *testing.T, step time.Duration, unseen bool) (*Store, *fence.Lease, *steppingClock) {
	t.Helper()
	clock := &steppingClock{ManualClock: inmem.NewManualClock(time.Unix(1_700_000_000, 0))}
	o := &Options{NoSync: true, Clock: clock, Wall: clock.wall}
	path := filepath.Join(t.TempDir(), "fence.db")
	first := *o
	if unseen {
		first.Wall = clock.Now
	}
	s := mustOpen(t, path, &first)
	held := mustAcquire(t, s, "held", 10*time.Second)
	clock.Advance(time.Second)
	clock.stepWall(step)
	mustAcquire(t, s, "other", time.Second) // its commit carries the rewrite
	s.abandon()
	clock.Advance(time.Second)
	s = mustOpen(t, path, o)
	t.Cleanup(func() { _ = s.Close() })
	return s, held, clock
}

func TestStore_WallStepForward_WhileRunning_LeaseNotShortenedAfterCrash(t *testing.T) {
	s, held, _ := crashWithStep(t, time.Hour, false)
	// 2s of the lease's 10s are gone; the wall clock's hour must not count.
	info, err := s.Inspect(context.Background(), "held")
	if err != nil || !info.Held || info.Token != held.Token() {
		t.Fatalf("Inspect(held) after a forward step and a crash = %+v, %v; want held by token %d", info, err, held.Token())
	}
	if info.ExpiresIn < 8*time.Second-time.Duration(stepTolerance) || info.ExpiresIn > 8*time.Second+2*time.Duration(stepTolerance) {
		t.Fatalf("lease has %v left after the restart, want 8s (not shortened by the step)", info.ExpiresIn)
	}
	if err := s.Renew(context.Background(), "held", held.ID(), 10*time.Second); err != nil {
		t.Fatalf("Renew by the holder: %v", err)
	}
}

func TestStore_WallStepForward_Ignored_LeaseLostAfterCrash(t *testing.T) {
	// The negative control of the test above: a store that ignores the step
	// forgets the lease at the restart (the wall says it ended an hour ago).
	s, _, _ := crashWithStep(t, time.Hour, true)
	if info, err := s.Inspect(context.Background(), "held"); err != nil || info.Held {
		t.Fatalf("Inspect(held) with steps ignored = %+v, %v; want not held (so the test above can fail)", info, err)
	}
}

func TestStore_WallStepBackward_WhileRunning_LeaseLongerNotShorter(t *testing.T) {
	s, held, clock := crashWithStep(t, -time.Minute, false)
	info, err := s.Inspect(context.Background(), "held")
	if err != nil || !info.Held || info.Token != held.Token() || info.ExpiresIn < 8*time.Second {
		t.Fatalf("Inspect(held) after a backward step and a crash = %+v, %v; want held for at least 8s", info, err)
	}
	// Honoured for the step longer: the written expiry is a wall time.
	clock.Advance(info.ExpiresIn)
	if info, err := s.Inspect(context.Background(), "held"); err != nil || info.Held {
		t.Fatalf("Inspect(held) after %v more = %+v, %v; want expired", info.ExpiresIn, info, err)
	}
}

func TestStore_Heal_RaisesNextTokenDurably(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{TokenBlock: 4})
	ctx := context.Background()
	if err := s.Heal(ctx, "job", 1000); err != nil {
		t.Fatalf("Heal: %v", err)
	}
	if err := s.Heal(ctx, "job", 10); err != nil { // never lowers
		t.Fatalf("Heal lower: %v", err)
	}
	s.abandon()
	s = mustOpen(t, path, &Options{TokenBlock: 4})
	defer s.Close()
	l, err := s.Acquire(ctx, "job", time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= 1000 {
		t.Fatalf("token after Heal(1000) and a crash: %d, want > 1000", l.Token())
	}
}

// A Heal below a name's last token leaves it, also when the name's entry was
// reclaimed from memory (its last token then lives in the lease log, or in the
// file after a checkpoint): it used to start from 0 and write the lower value.
func TestStore_Heal_NeverLowersLastTokenOfReclaimedName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	ctx := context.Background()
	for range 10 { // job's tokens are then above the 5 healed below
		if err := mustAcquire(t, s, "other", time.Minute).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, where := range []string{"lease log", "file"} {
		l := mustAcquire(t, s, "job", time.Minute)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if where == "file" { // Close folds the log into the file
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, path, nil)
		}
		s.mu.Lock()
		_, inMemory := s.locks["job"]
		s.mu.Unlock()
		if inMemory {
			t.Fatalf("%s: the released name's entry is still in memory; the test needs it reclaimed", where)
		}
		if err := s.Heal(ctx, "job", 5); err != nil {
			t.Fatal(err)
		}
		if info, err := s.Inspect(ctx, "job"); err != nil || info.LastToken != l.Token() {
			t.Fatalf("%s: Inspect after Heal(5) = %+v, %v; want LastToken %d", where, info, err, l.Token())
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A name healed to fence.MaxToken fails closed, and only that name: the shared
// counter, here as after some 2^53 grants (set directly: no heal may jump that
// far), still grants the others.
func TestStore_TokenExhausted_FailsClosed(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	s.mu.Lock()
	s.next = uint64(fence.MaxToken - fence.MaxHealAhead/2)
	s.mu.Unlock()
	if err := s.Heal(ctx, "x", fence.MaxToken); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "x", time.Second); !errors.Is(err, fence.ErrTokenExhausted) {
		t.Fatalf("Acquire after the counter reached MaxToken: got %v, want ErrTokenExhausted", err)
	}
	if l := mustAcquire(t, s, "y", time.Second); l.Token() >= fence.MaxToken {
		t.Fatalf("Acquire(y) after x was healed to MaxToken: token %d; want one below it, from the shared counter", l.Token())
	}
	s.mu.Lock()
	s.next = uint64(fence.MaxToken) + 1
	s.mu.Unlock()
	if _, err := s.Acquire(ctx, "z", time.Second); !errors.Is(err, fence.ErrTokenExhausted) {
		t.Fatalf("Acquire after the shared counter passed MaxToken: got %v, want ErrTokenExhausted", err)
	}
}

func TestStore_InspectList_ReportHeldAndLastTokens(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	a := mustAcquire(t, s, "p/a", time.Minute)
	b := mustAcquire(t, s, "p/b", time.Minute)
	mustAcquire(t, s, "q", time.Minute)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		got, err := s.List(ctx, fence.ListOptions{Prefix: "p/", All: true})
		if err != nil {
			t.Fatalf("%s: List: %v", stage, err)
		}
		want := []fence.LockInfo{
			{Name: "p/a", Held: true, Token: a.Token(), LastToken: a.Token()},
			{Name: "p/b", LastToken: b.Token()},
		}
		if len(got) != len(want) {
			t.Fatalf("%s: List = %+v, want %+v", stage, got, want)
		}
		for i := range want {
			g := got[i]
			g.ExpiresIn = 0
			if !g.Equal(want[i]) {
				t.Fatalf("%s: List[%d] = %+v, want %+v", stage, i, g, want[i])
			}
		}
		held, err := s.List(ctx, fence.ListOptions{Prefix: "p/"})
		if err != nil || len(held) != 1 || !held[0].Held || held[0].Name != "p/a" {
			t.Fatalf("%s: List held = %+v, %v; want just p/a", stage, held, err)
		}
		info, err := s.Inspect(ctx, "p/b")
		if err != nil || info.Held || info.LastToken != b.Token() {
			t.Fatalf("%s: Inspect(p/b) = %+v, %v; want free with LastToken %d", stage, info, err, b.Token())
		}
	}
	check("before flush")
	s.flushOnce() // p/b is now only on disk
	s.mu.Lock()
	_, inMemory := s.locks["p/b"]
	s.mu.Unlock()
	if inMemory {
		t.Fatalf("released and flushed entry still in memory")
	}
	check("after flush")
	if got, err := s.List(ctx, fence.ListOptions{Prefix: "p/", Limit: 1, All: true}); err != nil || len(got) != 1 || got[0].Name != "p/a" {
		t.Fatalf("List limit 1 = %+v, %v; want just p/a", got, err)
	}
	if info, err := s.Inspect(ctx, "never"); err != nil || info.Held || info.LastToken != 0 {
		t.Fatalf("Inspect(never) = %+v, %v; want zero", info, err)
	}
}

func TestStore_Expiry_ReclaimsMemoryWithoutScanning(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := openStore(t, &Options{NoSync: true, Clock: clock})
	for i := 0; i < 1000; i++ {
		mustAcquire(t, s, "n"+string(rune('a'+i%26))+string(rune('A'+i/26)), time.Duration(1+i%7)*time.Second)
	}
	clock.Advance(8 * time.Second) // fires the expiry timer, which pops the heap
	s.mu.Lock()
	heapLen := len(s.heap)
	s.mu.Unlock()
	if heapLen != 0 {
		t.Fatalf("expiry heap holds %d leases after all expired, want 0", heapLen)
	}
	s.flushOnce()
	s.mu.Lock()
	n := len(s.locks)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d entries in memory after expiry and flush, want 0", n)
	}
}

func TestStore_Close_WakesWaitersAndLaterCallsReturnErrClosed(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "fence.db"), &Options{NoSync: true})
	ctx := context.Background()
	l := mustAcquire(t, s, "job", time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "job", time.Second, fence.WithWait(fence.WaitForever))
		errc <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("waiter after Close: got %v, want ErrClosed", err)
	}
	f := fence.Fence{Name: "job", Token: 1}
	for what, err := range map[string]error{
		"Acquire":  func() error { _, err := s.Acquire(ctx, "x", time.Second); return err }(),
		"Renew":    s.Renew(ctx, "job", l.ID(), time.Second),
		"Release":  s.Release(ctx, "job", l.ID()),
		"Heal":     s.Heal(ctx, "job", 5),
		"Inspect":  func() error { _, err := s.Inspect(ctx, "job"); return err }(),
		"List":     func() error { _, err := s.List(ctx, fence.ListOptions{}); return err }(),
		"List all": func() error { _, err := s.List(ctx, fence.ListOptions{All: true}); return err }(),
		"Put":      s.Put(ctx, "k", []byte("v"), f),
		"Get":      func() error { _, err := s.Get(ctx, "k"); return err }(),
		"Fence":    s.Fence(ctx, "k", f),
		"Delete":   s.Delete(ctx, "k", f),
		"Purge":    s.Purge(ctx, "k"),
	} {
		if !errors.Is(err, fence.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", what, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func TestOpen_SecondOpenOfSameFile_FailsAfterTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	defer s.Close()
	_, err := Open(path, &Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("second Open: got %v, want ErrUnavailable", err)
	}
}

// readFile returns the bytes of the file at path.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// damage changes the bytes of the file at path with f.
func damage(t *testing.T, path string, f func(data []byte)) {
	t.Helper()
	data := readFile(t, path)
	f(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// refusedUntouched opens a file that must be refused with want and checks that
// its bytes did not change.
func refusedUntouched(t *testing.T, path string, want error) {
	t.Helper()
	before := readFile(t, path)
	s, openErr := Open(path, &Options{Timeout: 100 * time.Millisecond})
	if openErr == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want %v", filepath.Base(path), want)
	}
	if !errors.Is(openErr, want) {
		t.Fatalf("Open(%s): got %v, want %v", filepath.Base(path), openErr, want)
	}
	if after := readFile(t, path); !bytes.Equal(before, after) {
		t.Fatalf("Open(%s) changed the refused file (%d -> %d bytes)", filepath.Base(path), len(before), len(after))
	}
	t.Logf("refused as expected: %v", openErr)
}

func TestOpen_NotABoltFile_RefusedAndUntouched(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"text":  []byte("hello, I am a text file\n"),
		"big":   bytes.Repeat([]byte("garbage!"), 4096),
		"zeros": make([]byte, 16384),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { refusedUntouched(t, path, ErrNotStore) })
	}
}

func TestOpen_ForeignBoltFile_RefusedAndUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("admin"))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	refusedUntouched(t, path, ErrNotStore)
}

func TestOpen_OtherSchemaVersion_RefusedAndUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("99")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	refusedUntouched(t, path, ErrNotStore)
}

func TestOpen_CorruptFile_RefusedAndUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	f := grant(t, s, "job")
	if err := s.Put(context.Background(), "k", []byte("precious"), f); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Damage both meta pages (pages 0 and 1 of 4 KiB): their checksums fail.
	damage(t, path, func(data []byte) {
		for _, off := range []int{64, 4096 + 64} {
			data[off] ^= 0xff
		}
	})
	refusedUntouched(t, path, ErrCorrupt)
}

func TestOpen_DamagedDataPage_RefusedAndUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true})
	ctx := context.Background()
	f := grant(t, s, "job")
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ { // concurrent Puts share commits
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := s.Put(ctx, fmt.Sprintf("key-%02d-%03d", g, i), bytes.Repeat([]byte("v"), 100), f); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s.Close()
	// Overwrite the middle of the file, past the meta pages, with garbage: the
	// meta checksums still pass, the pages below them do not make sense.
	damage(t, path, func(data []byte) {
		for i := len(data) / 3; i < len(data)/3+3*4096 && i < len(data); i++ {
			data[i] = byte(i*7 + 3)
		}
	})
	refusedUntouched(t, path, ErrCorrupt)
}

func TestKV_Put_DurableAcrossCrashAndValueLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	ctx := context.Background()
	f := grant(t, s, "job")
	if err := s.Put(ctx, "k", []byte("v1"), f); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", make([]byte, MaxValueLen+1), fence.Fence{Name: "job", Token: f.Token + 1}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put of MaxValueLen+1 bytes: got %v, want ErrInvalid", err)
	}
	if err := s.Put(ctx, "max", make([]byte, MaxValueLen), f); err != nil {
		t.Fatalf("Put of MaxValueLen bytes: %v", err)
	}
	higher := grant(t, s, "job")
	if err := s.Fence(ctx, "k", higher); err != nil { // advances the fence, keeps v1
		t.Fatal(err)
	}
	s.abandon() // acknowledged writes must survive kill -9

	s = mustOpen(t, path, nil)
	defer s.Close()
	it, err := s.Get(ctx, "k")
	if err != nil || string(it.Value) != "v1" || it.Fence != higher {
		t.Fatalf("Get after crash = %q %+v, %v; want \"v1\" fenced by %+v", it.Value, it.Fence, err, higher)
	}
	err = s.Put(ctx, "k", []byte("stale"), f)
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Highest != higher.Token {
		t.Fatalf("stale Put after crash: got %v, want a *StaleTokenError with Highest %d", err, higher.Token)
	}
	if it, err := s.Get(ctx, "max"); err != nil || len(it.Value) != MaxValueLen {
		t.Fatalf("Get(max) = %d bytes, %v; want %d", len(it.Value), err, MaxValueLen)
	}
}

// TestStore_Concurrent_ExclusiveAndIncreasingWhileFlushing hammers a few names
// from several goroutines while the flusher runs constantly (tiny token block
// and flush interval), and checks that no two holders overlap and that each
// name's tokens increase in grant order.
func TestStore_Concurrent_ExclusiveAndIncreasingWhileFlushing(t *testing.T) {
	s := openStore(t, &Options{TokenBlock: 2, FlushInterval: time.Millisecond})
	ctx := context.Background()
	var mu sync.Mutex
	holder := map[string]fence.Token{}
	last := map[string]fence.Token{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 80; i++ {
				name := fmt.Sprintf("c%d", (g+i)%5)
				// TTLs far above how long a lease is held here, even on a loaded
				// machine, so no lease expires and exclusivity is exact.
				ttl := 10 * time.Second
				if i%3 != 0 {
					ttl = 4 * time.Second
				}
				l, err := s.Acquire(ctx, name, ttl, fence.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if h := holder[name]; h != 0 {
					t.Errorf("%q granted token %d while token %d holds it", name, l.Token(), h)
				}
				if l.Token() <= last[name] {
					t.Errorf("%q granted token %d after %d", name, l.Token(), last[name])
				}
				holder[name], last[name] = l.Token(), l.Token()
				mu.Unlock()
				if i%4 == 0 {
					if err := l.Renew(ctx, ttl); err != nil {
						t.Errorf("Renew: %v", err)
					}
				}
				if i%7 == 0 {
					if _, err := s.List(ctx, fence.ListOptions{Prefix: "c", All: i%14 == 0}); err != nil {
						t.Errorf("List: %v", err)
					}
				}
				mu.Lock()
				holder[name] = 0
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestOpen_FileOfEarlierRelease_WithLeaseHorizon_GraceOnceThenGrants opens a file
// as an earlier release of the store left it after a crash: short leases not
// written, only a lease horizon ahead. The grace it promised is kept (every name
// refused until the horizon), and then names are granted.
func TestOpen_FileOfEarlierRelease_WithLeaseHorizon_GraceOnceThenGrants(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true})
	last := mustAcquire(t, s, "n", time.Minute).Token()
	if err := mustAcquire(t, s, "m", time.Minute).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.abandon()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	horizon := time.Now().Add(300 * time.Millisecond)
	err = db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyHorizon, u64(uint64(horizon.UnixNano())))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, &Options{NoSync: true})
	defer s.Close()
	// During the grace every name is held, those only in the file too: the
	// held-only listing reads the file, as Inspect does.
	list, err := s.List(context.Background(), fence.ListOptions{})
	if info, ierr := s.Inspect(context.Background(), "m"); time.Now().Before(horizon) {
		if err != nil || len(list) != 2 || list[0].Name != "m" || !list[0].Held || list[1].Name != "n" || ierr != nil || !info.Held {
			t.Fatalf("List of held locks during the grace = %+v, %v (Inspect(m) = %+v, %v); want m and n, held", list, err, info, ierr)
		}
	}
	_, err = s.Acquire(context.Background(), "fresh", time.Second)
	var he *fence.HeldError
	if time.Now().Before(horizon) && !errors.As(err, &he) {
		t.Fatalf("Acquire before the old horizon: got %v, want a *fence.HeldError", err)
	}
	l, err := s.Acquire(context.Background(), "fresh", time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire waiting past the old horizon: %v", err)
	}
	if time.Now().Before(horizon) {
		t.Fatalf("granted %v before the old horizon", time.Until(horizon))
	}
	if l.Token() <= last {
		t.Fatalf("token %d, want above %d", l.Token(), last)
	}
}

// Callers write commits themselves when none is running (Store.lead), so Close
// and a crash can meet a caller's commit. Every call returns (nil or
// ErrClosed, never a hang), and after the reopen every grant acknowledged and
// not released since is held with its token, a name whose last release was
// acknowledged is not held by that grant, and tokens go on above every
// acknowledged one. (A crash right after one acknowledged release is pinned
// down by TestStore_Reopen_AfterCrash_LongLeaseHonouredReleasedNameFree; here
// the commits in flight at the crash still complete, so that window is rare.)
func TestStore_CloseOrCrashDuringCallersCommits_AcknowledgedIsOnDisk(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "close", true: "crash"}[crash], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.db")
			s := mustOpen(t, path, nil)
			ctx := context.Background()
			const workers = 8
			held := make([]*fence.Lease, workers) // each worker's acknowledged, unreleased grant
			top := make([]fence.Token, workers)   // each worker's highest acknowledged token
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					name := fmt.Sprintf("w%d", w)
					for i := 0; i < 10000; i++ { // bounded; Close ends it long before
						l, err := s.Acquire(ctx, name, time.Hour)
						if err != nil {
							if !errors.Is(err, fence.ErrClosed) {
								t.Errorf("Acquire: %v, want nil or ErrClosed", err)
							}
							return
						}
						held[w], top[w] = l, l.Token()
						if err := l.Release(ctx); err != nil {
							if !errors.Is(err, fence.ErrClosed) {
								t.Errorf("Release: %v, want nil or ErrClosed", err)
							}
							return
						}
						held[w] = nil
					}
				})
			}
			time.Sleep(30 * time.Millisecond)
			if crash {
				s.abandon()
			} else if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("calls still running 30s after the store stopped")
			}

			s = mustOpen(t, path, nil)
			defer s.Close()
			for w := range workers {
				name := fmt.Sprintf("w%d", w)
				info, err := s.Inspect(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if l := held[w]; l != nil {
					if !info.Held || info.Token != l.Token() {
						t.Errorf("%s after the reopen: %+v; want held with the acknowledged token %d", name, info, l.Token())
					}
				} else if info.Held && info.Token <= top[w] {
					// A grant whose answer never came may be on disk (honoured until
					// its expiry); the released one must not be.
					t.Errorf("%s after the reopen: %+v; want its acknowledged release (token %d) on disk", name, info, top[w])
				}
				if info.LastToken < top[w] {
					t.Errorf("%s: last token %d after the reopen, below the acknowledged %d", name, info.LastToken, top[w])
				}
				if held[w] == nil && !info.Held {
					if l, err := s.Acquire(ctx, name, time.Minute); err != nil || l.Token() <= top[w] {
						t.Errorf("%s: Acquire after the reopen = %v, %v; want a token above %d", name, l, err, top[w])
					}
				}
			}
		})
	}
}
