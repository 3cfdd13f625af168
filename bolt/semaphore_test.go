package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

// wantHolders checks the holders Inspect reports for name: their slots and
// tokens, in the order driver.Info gives (slot, then token).
func wantHolders(t *testing.T, s *Store, name string, limit int, shared bool, leases ...*fence.Lease) fence.LockInfo {
	t.Helper()
	info, err := s.Inspect(context.Background(), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	if len(leases) == 0 {
		if info.Held || info.Holders != nil {
			t.Fatalf("Inspect(%q) = %+v; want free", name, info)
		}
		return info
	}
	if !info.Held || info.Limit != limit || info.Shared != shared || len(info.Holders) != len(leases) {
		t.Fatalf("Inspect(%q) = %+v; want %d holders, limit %d, shared %v", name, info, len(leases), limit, shared)
	}
	for i, l := range leases {
		h := info.Holders[i]
		if h.Slot != l.Slot() || h.Token != l.Token() || h.Owner != l.Owner() || h.ExpiresIn <= 0 {
			t.Fatalf("Inspect(%q).Holders[%d] = %+v; want slot %d, token %d, owner %q", name, i, h, l.Slot(), l.Token(), l.Owner())
		}
	}
	return info
}

func TestSemaphore_SlotsLowestFreeFirst_LimitHeldAndAgreed(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	var ls []*fence.Lease
	for i := range 3 {
		l := mustAcquire(t, s, "pool", time.Minute, fence.WithLimit(3), fence.WithOwner("w"))
		if l.Slot() != i {
			t.Fatalf("permit %d: slot %d, want %d", i, l.Slot(), i)
		}
		if i > 0 && l.Token() <= ls[i-1].Token() {
			t.Fatalf("permit %d: token %d, want above %d", i, l.Token(), ls[i-1].Token())
		}
		ls = append(ls, l)
	}
	wantHolders(t, s, "pool", 3, false, ls...)
	var he *fence.HeldError
	if _, err := s.Acquire(ctx, "pool", time.Minute, fence.WithLimit(3)); !errors.As(err, &he) || he.ExpiresIn <= 0 {
		t.Fatalf("fourth permit of 3: %v; want a *fence.HeldError with time left", err)
	}
	for _, opts := range [][]fence.AcquireOption{{fence.WithLimit(4)}, {}, {fence.WithShared()}} {
		_, err := s.Acquire(ctx, "pool", time.Minute, opts...)
		var le *fence.LimitError
		if !errors.Is(err, fence.ErrInvalid) || !errors.As(err, &le) || le.Held != 3 {
			t.Fatalf("acquire with another limit while 3 permits are live: %v; want a *fence.LimitError naming 3", err)
		}
	}
	if err := ls[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := mustAcquire(t, s, "pool", time.Minute, fence.WithLimit(3))
	if again.Slot() != 1 || again.Token() <= ls[2].Token() {
		t.Fatalf("permit after slot 1 was released: slot %d token %d; want slot 1, token above %d", again.Slot(), again.Token(), ls[2].Token())
	}
	// A stranger's lease id never ends a permit; each holder renews and releases its own.
	if err := s.Release(ctx, "pool", ls[1].ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("second release of slot 1's old lease: %v; want ErrNotHeld", err)
	}
	if err := ls[0].Renew(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, "pool"); err != nil {
		t.Fatal(err)
	}
	wantHolders(t, s, "pool", 0, false)
	for _, l := range []*fence.Lease{ls[0], ls[2], again} {
		if err := s.Renew(ctx, "pool", l.ID(), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("renew after Revoke: %v; want ErrNotHeld", err)
		}
	}
	// Free again, the name takes any limit, and a lock.
	lock := mustAcquire(t, s, "pool", time.Minute)
	if info, _ := s.Inspect(ctx, "pool"); info.Holders != nil || info.Limit != 0 || info.Token != lock.Token() {
		t.Fatalf("Inspect of a lock after the semaphore = %+v; want the lock of token %d, no holders", info, lock.Token())
	}
}

func TestSemaphore_ExpiryFreesSlotAndWakesWaiter(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := openStore(t, &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	mustAcquire(t, s, "pool", 10*time.Second, fence.WithLimit(2))
	short := mustAcquire(t, s, "pool", 5*time.Second, fence.WithLimit(2))
	pending := clock.Pending()
	got := make(chan *fence.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, "pool", time.Minute, fence.WithLimit(2), fence.WithWait(fence.WaitForever))
		errc <- err
		got <- l
	}()
	// The waiter sleeps until the soonest expiry, unless woken.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := clock.WaitPending(wctx, pending+1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	if err := <-errc; err != nil {
		t.Fatalf("waiting permit: %v", err)
	}
	if l := <-got; l.Slot() != short.Slot() {
		t.Fatalf("waiter got slot %d, want the expired lease's slot %d", l.Slot(), short.Slot())
	}
}

func TestShared_ManyHolders_ExclusiveWaiterPreferred(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx := context.Background()
	r1 := mustAcquire(t, s, "doc", time.Minute, fence.WithShared())
	r2 := mustAcquire(t, s, "doc", time.Minute, fence.WithShared(), fence.WithOwner("reader 2"))
	if r1.Slot() != 0 || r2.Slot() != 0 || r2.Token() <= r1.Token() {
		t.Fatalf("shared grants: slots %d, %d, tokens %d, %d; want slot 0, increasing tokens", r1.Slot(), r2.Slot(), r1.Token(), r2.Token())
	}
	wantHolders(t, s, "doc", 0, true, r1, r2)
	if _, err := s.Acquire(ctx, "doc", time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("exclusive acquire while shared held: %v; want ErrNotAcquired", err)
	}
	// A try that does not wait leaves no waiter record: readers still get in.
	r3 := mustAcquire(t, s, "doc", time.Minute, fence.WithShared())

	got := make(chan *fence.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, "doc", time.Minute, fence.WithWait(fence.WaitForever))
		errc <- err
		got <- l
	}()
	waiterRecorded := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.locks["doc"]
		return e.x != nil && e.x.waiterUntil > s.now()
	}
	for i := 0; !waiterRecorded(); i++ {
		if i == 1000 {
			t.Fatal("the exclusive waiter was not recorded within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.Acquire(ctx, "doc", time.Minute, fence.WithShared()); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("shared acquire while an exclusive one waits: %v; want ErrNotAcquired (writer preference)", err)
	}
	for _, l := range []*fence.Lease{r1, r2, r3} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("exclusive waiter: %v", err)
	}
	w := <-got
	if w.Token() <= r3.Token() {
		t.Fatalf("exclusive token %d, want above the shared ones' %d", w.Token(), r3.Token())
	}
	if waiterRecorded() {
		t.Fatal("the waiter's record is still there after its exclusive grant")
	}
	if _, err := s.Acquire(ctx, "doc", time.Minute, fence.WithShared()); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("shared acquire while held exclusively: %v; want ErrNotAcquired", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := mustAcquire(t, s, "doc", time.Minute, fence.WithShared()); r.Token() <= w.Token() {
		t.Fatalf("shared token %d after the exclusive %d", r.Token(), w.Token())
	}
}

// Semaphore and shared leases are restored with their ids, tokens, slots,
// owners and kind after a clean close and after a crash (from the lease log
// and from the file after a checkpoint); the holders renew and release them,
// and a live slot is not granted again.
func TestSemaphore_Restart_LeasesKeptAndHoldersRenewRelease(t *testing.T) {
	for _, how := range []string{"close", "crash", "crash after checkpoint"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.db")
			s := mustOpen(t, path, &Options{NoSync: true})
			ctx := context.Background()
			p0 := mustAcquire(t, s, "pool", time.Hour, fence.WithLimit(3), fence.WithOwner("host:1 a"))
			p1 := mustAcquire(t, s, "pool", time.Hour, fence.WithLimit(3))
			p2 := mustAcquire(t, s, "pool", time.Hour, fence.WithLimit(3), fence.WithOwner("host:3 c"))
			if err := p1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r0 := mustAcquire(t, s, "doc", time.Hour, fence.WithShared(), fence.WithOwner("r0"))
			r1 := mustAcquire(t, s, "doc", time.Hour, fence.WithShared())
			switch how {
			case "close":
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			case "crash after checkpoint":
				s.fmu.Lock()
				if err := s.checkpointLocked(false); err != nil {
					t.Fatal(err)
				}
				s.fmu.Unlock()
				fallthrough
			default:
				s.abandon()
			}
			s = mustOpen(t, path, &Options{NoSync: true})
			defer s.Close()
			wantHolders(t, s, "pool", 3, false, p0, p2)
			wantHolders(t, s, "doc", 0, true, r0, r1)
			if _, err := s.Acquire(ctx, "pool", time.Minute, fence.WithLimit(2)); !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("acquire with another limit after the restart: %v; want ErrInvalid", err)
			}
			if _, err := s.Acquire(ctx, "doc", time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
				t.Fatalf("exclusive acquire of the shared lock after the restart: %v; want ErrNotAcquired", err)
			}
			p := mustAcquire(t, s, "pool", time.Minute, fence.WithLimit(3))
			if p.Slot() != 1 || p.Token() <= r1.Token() {
				t.Fatalf("permit after the restart: slot %d token %d; want the free slot 1, token above %d", p.Slot(), p.Token(), r1.Token())
			}
			if _, err := s.Acquire(ctx, "pool", time.Minute, fence.WithLimit(3)); !errors.Is(err, fence.ErrNotAcquired) {
				t.Fatalf("fourth permit after the restart: %v; want ErrNotAcquired", err)
			}
			for _, l := range []*fence.Lease{p0, p2, r0, r1} {
				if err := s.Renew(ctx, l.Name(), l.ID(), time.Minute); err != nil {
					t.Fatalf("renew of %s slot %d by its holder after the restart: %v", l.Name(), l.Slot(), err)
				}
				if err := s.Release(ctx, l.Name(), l.ID()); err != nil {
					t.Fatalf("release of %s slot %d by its holder after the restart: %v", l.Name(), l.Slot(), err)
				}
			}
			wantHolders(t, s, "doc", 0, true)
			if l := mustAcquire(t, s, "doc", time.Minute); l.Token() <= p.Token() {
				t.Fatalf("exclusive token %d after the restart, want above %d", l.Token(), p.Token())
			}
		})
	}
}

// Records of a semaphore or a shared lock that are damaged decode to a clear
// ErrCorrupt, never a panic; and every prefix of a good one too.
func TestLockRecord_Multi_CorruptRecordsRefused(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	mustAcquire(t, s, "pool", time.Hour, fence.WithLimit(3), fence.WithOwner("o"))
	mustAcquire(t, s, "pool", time.Hour, fence.WithLimit(3))
	mustAcquire(t, s, "doc", time.Hour, fence.WithShared())
	s.mu.Lock()
	sem, shared := s.encodeLock(s.locks["pool"]), s.encodeLock(s.locks["doc"])
	s.mu.Unlock()
	for _, good := range [][]byte{sem, shared} {
		r, err := decodeLock(good)
		if err != nil || len(r.holds) == 0 {
			t.Fatalf("decode of a good record %x: %+v, %v", good, r, err)
		}
		for n := range len(good) {
			if _, err := decodeLock(good[:n]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("decode of the first %d bytes of %x: %v; want ErrCorrupt", n, good, err)
			}
		}
	}
	set := func(b []byte, i int, v ...byte) []byte {
		b = append([]byte(nil), b...)
		copy(b[i:], v)
		return b
	}
	for name, v := range map[string][]byte{
		"unknown flag":          set(sem, 0, flagMulti|0x40),
		"lease flag with multi": set(sem, 0, flagMulti|flagLease),
		"limit 1":               set(sem, 9, 0, 1),
		"limit above MaxLimit":  set(sem, 9, 0xff, 0xff),
		"shared with a limit":   set(shared, 9, 0, 3),
		"no leases":             set(sem, 11, 0, 0),
		"more leases than recs": set(sem, 11, 0, 3),
		"slot past the limit":   set(sem, lockRecMulti+32, 0, 3),
		"slot twice":            set(sem, lockRecMulti+lockRecHold+1+32, 0, 0),
		"token 0":               set(sem, lockRecMulti, 0, 0, 0, 0, 0, 0, 0, 0),
		"token above last":      set(sem, 1, 0, 0, 0, 0, 0, 0, 0, 1),
		"owner past the end":    set(sem, lockRecMulti+34, 0xff, 0xff),
		"unprintable owner":     set(sem, lockRecMulti+lockRecHold, '\n'),
		"trailing bytes":        append(append([]byte(nil), shared...), 0),
		"shared slot":           set(shared, lockRecMulti+33, 1),
	} {
		if _, err := decodeLock(v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode of a record with %s: %v; want ErrCorrupt", name, err)
		}
	}
}

// copyFixture copies the files of testdata/previous-release/how into a temp
// dir (opening writes to them) and returns the store's path and the leases the
// previous release granted there.
func copyFixture(t *testing.T, how string) (string, map[string]struct {
	ID    string      `json:"id"`
	Owner string      `json:"owner"`
	Token fence.Token `json:"token"`
}) {
	t.Helper()
	src := filepath.Join("testdata", "previous-release", how)
	dir := t.TempDir()
	for _, f := range []string{"fence.db", "fence.db-wal", "leases.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if errors.Is(err, os.ErrNotExist) && f == "fence.db-wal" {
			continue // a clean close leaves the file complete alone
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var leases map[string]struct {
		ID    string      `json:"id"`
		Owner string      `json:"owner"`
		Token fence.Token `json:"token"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "leases.json"))
	if err == nil {
		err = json.Unmarshal(b, &leases)
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "fence.db"), leases
}

// Files written by the previous release (before semaphores), after a clean
// close and after a crash (with its lease log), open and work unchanged: their
// leases are held by the same ids, tokens and owners, their holders renew and
// release them, last tokens and healed tokens stand, and the names then become
// semaphores and shared locks.
func TestOpen_FilesOfPreviousRelease_WorkUnchanged(t *testing.T) {
	for _, how := range []string{"closed", "crashed"} {
		t.Run(how, func(t *testing.T) {
			path, leases := copyFixture(t, how)
			s := mustOpen(t, path, nil)
			defer s.Close()
			ctx := context.Background()
			for _, name := range []string{"held-owner", "held-plain"} {
				l := leases[name]
				wantOwner(t, s, name, l.Token, l.Owner)
				if _, err := s.Acquire(ctx, name, time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
					t.Fatalf("Acquire(%q) while the previous release's lease is live: %v; want ErrNotAcquired", name, err)
				}
				if err := s.Renew(ctx, name, l.ID, time.Minute); err != nil {
					t.Fatalf("Renew(%q) by the previous release's holder: %v", name, err)
				}
			}
			info, err := s.Inspect(ctx, "released")
			if err != nil || info.Held || info.LastToken != leases["released"].Token {
				t.Fatalf("Inspect(released) = %+v, %v; want free with last token %d", info, err, leases["released"].Token)
			}
			// The crashed file was cut right after Heal(healed, 500), below the
			// token ceiling, which Heal does not wait to write: the name's last
			// token did not reach the log (the counter, above 500, did).
			names, healed := 4, fence.Token(500)
			if how == "crashed" {
				names, healed = 3, 0
			}
			if info, err := s.Inspect(ctx, "healed"); err != nil || info.LastToken != healed {
				t.Fatalf("Inspect(healed) = %+v, %v; want last token %d", info, err, healed)
			}
			if list, err := s.List(ctx, fence.ListOptions{All: true}); err != nil || len(list) != names {
				t.Fatalf("List = %+v, %v; want the %d names of the previous release", list, err, names)
			}
			if err := s.Release(ctx, "held-owner", leases["held-owner"].ID); err != nil {
				t.Fatalf("Release by the previous release's holder: %v", err)
			}
			p := mustAcquire(t, s, "held-owner", time.Minute, fence.WithLimit(2))
			r := mustAcquire(t, s, "released", time.Minute, fence.WithShared())
			if p.Token() <= 500 || r.Token() <= p.Token() || p.Slot() != 0 {
				t.Fatalf("grants after the previous release: tokens %d, %d, slot %d; want above the healed 500, slot 0", p.Token(), r.Token(), p.Slot())
			}
			wantHolders(t, s, "held-owner", 2, false, p)
			wantHolders(t, s, "released", 0, true, r)
		})
	}
}

// A watcher of a semaphore sees each grant, with every holder, and the end of
// the last lease (the end of one of two changes no Index: see fence.LockInfo).
func TestSemaphore_Watch_SeesGrantsAndLastRelease(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	states := make(chan fence.LockInfo, 16)
	go func() {
		defer close(states)
		for info, err := range s.Watch(ctx, "pool") {
			if err != nil {
				return
			}
			states <- info
		}
	}()
	next := func(holders int) fence.LockInfo {
		t.Helper()
		select {
		case info, ok := <-states:
			if !ok || len(info.Holders) != holders || info.Held != (holders > 0) {
				t.Fatalf("watched %+v (open %v); want %d holders", info, ok, holders)
			}
			return info
		case <-ctx.Done():
			t.Fatalf("no state with %d holders within 10s", holders)
		}
		return fence.LockInfo{}
	}
	next(0)
	a := mustAcquire(t, s, "pool", time.Minute, fence.WithLimit(2))
	next(1)
	b := mustAcquire(t, s, "pool", time.Minute, fence.WithLimit(2))
	if info := next(2); info.Token != b.Token() || info.Limit != 2 {
		t.Fatalf("watched %+v; want the highest token %d, limit 2", info, b.Token())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(0); info.LastToken != b.Token() {
		t.Fatalf("watched %+v; want free with last token %d", info, b.Token())
	}
}
