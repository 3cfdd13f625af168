package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
)

// wantSlotsTokens fails t unless leases have the slots want, in order, and
// tokens increasing in that order.
func wantSlotsTokens(t *testing.T, leases []*fence.Lease, want ...int) {
	t.Helper()
	for i, lease := range leases {
		if lease.Slot() != want[i] || i > 0 && lease.Token() <= leases[i-1].Token() {
			t.Fatalf("lease %d: slot %d token %d (the one before: %d); want slot %d and a higher token", i, lease.Slot(), lease.Token(), leases[i-1].Token(), want[i])
		}
	}
}

// permits acquires n permits of name with limit, failing t if one is refused.
func permits(t *testing.T, ctx context.Context, l fence.Locker, name string, limit, n int, ttl time.Duration) []*fence.Lease {
	t.Helper()
	var out []*fence.Lease
	for i := 0; i < n; i++ {
		out = append(out, mustAcquire(t, ctx, l, name, ttl, fence.WithLimit(limit), fence.WithOwner("permit")))
	}
	return out
}

func TestLocker_Semaphore_LowestFreeSlotLimitAndMismatch(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	ps := permits(t, ctx, l, name, 3, 3, time.Minute)
	wantSlotsTokens(t, ps, 0, 1, 2)
	_, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithLimit(3))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.ExpiresIn <= 50*time.Second {
		t.Fatalf("a fourth permit of 3: %v; want a *fence.HeldError expiring in about 1m", err)
	}
	for _, o := range [][]fence.AcquireOption{{fence.WithLimit(2)}, {}, {fence.WithShared()}} {
		_, err = fence.TryAcquire(ctx, l, name, time.Minute, o...)
		var le *fence.LimitError
		if !errors.As(err, &le) || le.Limit == 3 || le.Held != 3 || !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("another limit on a semaphore of 3: %v; want a *fence.LimitError naming 3 held", err)
		}
	}
	wantOK(t, "Release of slot 1", ps[1].Release(ctx))
	again := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	if again.Slot() != 1 || again.Token() <= ps[2].Token() {
		t.Fatalf("after slot 1's release: slot %d token %d; want slot 1 and a token above %d", again.Slot(), again.Token(), ps[2].Token())
	}
	info, err := l.Inspect(ctx, name)
	wantOK(t, "Inspect", err)
	if !info.Held || info.Limit != 3 || info.Shared || len(info.Holders) != 3 || info.Token != again.Token() || info.LastToken != again.Token() {
		t.Fatalf("Inspect = %+v; want three holders of limit 3, the highest token %d", info, again.Token())
	}
	for i, h := range info.Holders {
		if h.Slot != i || h.ExpiresIn <= 50*time.Second {
			t.Fatalf("Inspect holder %d = %+v; want slot %d with about 1m left", i, h, i)
		}
	}
	list, err := l.List(ctx, fence.ListOptions{Prefix: name, Limit: 1})
	wantOK(t, "List", err)
	if len(list) != 1 || len(list[0].Holders) != 3 || list[0].Limit != 3 {
		t.Fatalf("List = %+v; want the semaphore with its three holders", list)
	}
}

func TestLocker_Semaphore_RenewReleaseOnlyTheirOwnPermit(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	ps := permits(t, ctx, l, name, 2, 2, 2*time.Second)
	wantOK(t, "Renew of slot 0", ps[0].Renew(ctx, time.Minute))
	wantIs(t, "Renew of a permit id never granted", l.Renew(ctx, name, "m.not-a-lease", time.Minute), fence.ErrNotHeld)
	wantIs(t, "Release of a lock id on a semaphore", l.Release(ctx, name, "0123456789abcdef0123456789abcdef"), fence.ErrNotHeld)
	info, err := l.Inspect(ctx, name)
	wantOK(t, "Inspect", err)
	if len(info.Holders) != 2 || info.Holders[0].ExpiresIn < 50*time.Second || info.Holders[1].ExpiresIn > 2*time.Second {
		t.Fatalf("Inspect after renewing slot 0 = %+v; want slot 0 with about 1m, slot 1 with under 2s", info)
	}
	wantOK(t, "Release of slot 1", ps[1].Release(ctx))
	wantIs(t, "Release of slot 1 again", l.Release(ctx, name, ps[1].ID()), fence.ErrNotHeld)
	wantIs(t, "Renew of slot 1 after its release", l.Renew(ctx, name, ps[1].ID(), time.Minute), fence.ErrNotHeld)
	wantOK(t, "Release of slot 0", ps[0].Release(ctx))
	info, err = l.Inspect(ctx, name)
	wantOK(t, "Inspect", err)
	if info.Held || info.Holders != nil || info.LastToken != ps[1].Token() {
		t.Fatalf("Inspect after both releases = %+v; want free, last token %d", info, ps[1].Token())
	}
	// Free: any kind may take the name now, a lock first.
	lock := mustAcquire(t, ctx, l, name, time.Minute)
	if lock.Token() <= ps[1].Token() {
		t.Fatalf("lock after the semaphore: token %d, want above %d", lock.Token(), ps[1].Token())
	}
}

func TestLocker_Semaphore_ExpiredPermitsSlotReusedOthersKept(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	short := mustAcquire(t, ctx, l, name, 100*time.Millisecond, fence.WithLimit(2))
	long := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	next, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(2), fence.WithWait(10*time.Second))
	wantOK(t, "a waiting permit while slot 0's 100ms lease runs out", err)
	if next.Slot() != short.Slot() || next.Token() <= long.Token() {
		t.Fatalf("permit after the expiry: slot %d token %d; want slot %d and a token above %d", next.Slot(), next.Token(), short.Slot(), long.Token())
	}
	wantIs(t, "Renew of the expired permit", short.Renew(ctx, time.Minute), fence.ErrNotHeld)
	wantOK(t, "Renew of the live permit", long.Renew(ctx, time.Minute))
}

func TestLocker_LockAndSemaphoreAndShared_ExcludeEachOther(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	lock := mustAcquire(t, ctx, l, name, time.Minute)
	_, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithShared())
	wantIs(t, "a shared acquire while a lock is held", err, fence.ErrNotAcquired)
	var le *fence.LimitError
	if _, err = fence.TryAcquire(ctx, l, name, time.Minute, fence.WithLimit(2)); !errors.As(err, &le) || le.Held != 1 || le.Limit != 2 {
		t.Fatalf("a permit while a lock is held: %v; want a *fence.LimitError of held limit 1", err)
	}
	wantOK(t, "Release of the lock", lock.Release(ctx))

	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	_, err = fence.TryAcquire(ctx, l, name, time.Minute)
	wantIs(t, "a lock while a shared lease is held", err, fence.ErrNotAcquired)
	wantOK(t, "Release of the shared lease", r.Release(ctx))
	lock = mustAcquire(t, ctx, l, name, time.Minute)
	if lock.Token() <= r.Token() {
		t.Fatalf("lock token %d after shared %d; want higher", lock.Token(), r.Token())
	}
}

func TestLocker_Revoke_EndsEveryPermitWakesWaiterNextTokenHigher(t *testing.T) {
	ctx, l, name := lockTest(t, &postgres.LockerOptions{PollInterval: time.Hour})
	ps := permits(t, ctx, l, name, 2, 2, time.Minute)
	got := acquireLater(t, ctx, sharedPool, l, name, 30*time.Second, fence.WithLimit(2))
	wantOK(t, "Revoke", openLocker(t, sharedPool, nil).Revoke(ctx, name))
	for _, p := range ps {
		wantIs(t, "Renew of a revoked permit", p.Renew(ctx, time.Minute), fence.ErrNotHeld)
	}
	select {
	case w := <-got:
		wantOK(t, "the waiting permit", w.err)
		if w.lease.Slot() != 0 || w.lease.Token() <= ps[1].Token() {
			t.Fatalf("permit after the revoke: slot %d token %d; want slot 0, token above %d", w.lease.Slot(), w.lease.Token(), ps[1].Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting permit was not woken within 10s of the revoke (poll 1h)")
	}
}

func TestLocker_Semaphore_WaiterWokenByReleaseNotByPolling(t *testing.T) {
	ctx, l, name := lockTest(t, &postgres.LockerOptions{PollInterval: time.Hour})
	ps := permits(t, ctx, l, name, 2, 2, time.Minute)
	got := acquireLater(t, ctx, sharedPool, l, name, 30*time.Second, fence.WithLimit(2))
	wantOK(t, "Release of slot 1", ps[1].Release(ctx))
	select {
	case w := <-got:
		wantOK(t, "the waiting permit", w.err)
		if w.lease.Slot() != 1 {
			t.Fatalf("the waiter got slot %d; want the released slot 1", w.lease.Slot())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting permit was not woken within 10s of a release (poll 1h, TTL 1m)")
	}
}

// waiterUntil reads the recorded exclusive waiter's end of name, by SQL.
func waiterUntil(t *testing.T, ctx context.Context, name string) (recorded bool) {
	t.Helper()
	wantOK(t, "read waiter_until", sharedPool.QueryRow(ctx,
		`SELECT waiter_until > clock_timestamp() FROM fence_locks WHERE name = $1`, name).Scan(&recorded))
	return recorded
}

// awaitWaiterRecorded returns once name records an exclusive waiter, failing t
// after 10s.
func awaitWaiterRecorded(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !waiterUntil(t, ctx, name) {
		if time.Now().After(deadline) {
			t.Fatal("no exclusive waiter recorded within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling the row: nothing signals the record
	}
}

func TestLocker_Shared_WaitingWriterHoldsOffReadersAndIsWokenByTheLast(t *testing.T) {
	ctx, l, name := lockTest(t, &postgres.LockerOptions{PollInterval: time.Hour})
	r1 := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	r2 := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(30*time.Second))
		got <- acquired{lease, err}
	}()
	awaitWaiterRecorded(t, ctx, name)
	_, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithShared())
	var held *fence.HeldError
	if !errors.As(err, &held) || held.ExpiresIn <= 20*time.Second {
		t.Fatalf("a reader with a writer waiting: %v; want held for the waiter's record (up to 30s)", err)
	}
	wantOK(t, "Release of reader 1", r1.Release(ctx))
	select {
	case w := <-got:
		t.Fatalf("the writer got in with reader 2 still holding: %v", w.err)
	case <-time.After(100 * time.Millisecond):
	}
	wantOK(t, "Release of reader 2", r2.Release(ctx))
	select {
	case w := <-got:
		wantOK(t, "the waiting writer", w.err)
		if w.lease.Token() <= r2.Token() {
			t.Fatalf("writer token %d; want above the readers' %d", w.lease.Token(), r2.Token())
		}
		if waiterUntil(t, ctx, name) {
			t.Fatal("the waiter's record is still there after its exclusive grant")
		}
		wantOK(t, "Release of the writer", w.lease.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the writer was not woken within 10s of the last reader's release (poll 1h)")
	}
	mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
}

// TestLocker_Shared_WriterThatGaveUpHoldsReadersOffAtMostItsWait: a writer
// waiting 300ms (TTL 1m) for a reader records itself for its wait, not its
// TTL: while it waits a new reader is held for at most what is left of it, and
// once it gave up a waiting reader gets in well within its 5s wait.
func TestLocker_Shared_WriterThatGaveUpHoldsReadersOffAtMostItsWait(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(300*time.Millisecond))
		gaveUp <- err
	}()
	awaitWaiterRecorded(t, ctx, name)
	_, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithShared())
	var held *fence.HeldError
	if errors.As(err, &held) && held.ExpiresIn > 300*time.Millisecond {
		t.Fatalf("a reader while the writer waits 300ms: %v; want held at most 300ms (or, on a slow machine, granted)", err)
	} else if err == nil {
		t.Log("the writer's 300ms wait was over before the reader's try: inconclusive")
	}
	select {
	case err := <-gaveUp:
		wantIs(t, "the writer's wait of 300ms", err, fence.ErrNotAcquired)
	case <-time.After(10 * time.Second):
		t.Fatal("the writer's 300ms wait did not end within 10s")
	}
	next := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared(), fence.WithWait(5*time.Second))
	if next.Token() <= r.Token() {
		t.Fatalf("reader token %d, want above %d", next.Token(), r.Token())
	}
}

// TestLocker_Semaphore_ConcurrentTries_ExactlyLimitGranted has 32 goroutines,
// on 4 Lockers, try once at the same moment for a semaphore of 5, on a fresh
// name (the row's insert races) and on one whose row exists: exactly 5 get a
// permit, on distinct slots with distinct tokens.
func TestLocker_Semaphore_ConcurrentTries_ExactlyLimitGranted(t *testing.T) {
	ctx := ctxT(t)
	ls := make([]*postgres.Locker, 4)
	for i := range ls {
		ls[i] = lockerOn(t, sharedPool, nil)
	}
	for round := 0; round < 10; round++ {
		name := uniq(t, "sem")
		if round%2 == 1 {
			cycle(t, ctx, ls[0], name, 1, 0) // the row exists, free
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			granted []*fence.Lease
			start   = make(chan struct{})
		)
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func(l *postgres.Locker) {
				defer wg.Done()
				<-start
				lease, err := fence.TryAcquire(ctx, l, name, time.Minute, fence.WithLimit(5))
				if err != nil {
					if !errors.Is(err, fence.ErrNotAcquired) {
						t.Errorf("TryAcquire: %v", err)
					}
					return
				}
				mu.Lock()
				granted = append(granted, lease)
				mu.Unlock()
			}(ls[g%len(ls)])
		}
		close(start)
		wg.Wait()
		if len(granted) != 5 {
			t.Fatalf("round %d: %d permits of 5 granted to 32 concurrent tries", round, len(granted))
		}
		slots, tokens := map[int]bool{}, map[fence.Token]bool{}
		for _, p := range granted {
			if slots[p.Slot()] || tokens[p.Token()] || p.Slot() < 0 || p.Slot() >= 5 {
				t.Fatalf("round %d: slot %d or token %d granted twice or out of range", round, p.Slot(), p.Token())
			}
			slots[p.Slot()], tokens[p.Token()] = true, true
			wantOK(t, "Release", p.Release(ctx))
		}
	}
}

// TestLocker_SemaphoreAndShared_ConcurrentHolders_NeverAboveLimit runs 24
// goroutines on 4 Lockers that each take a permit of 3 (waiting), check in
// memory that no more than 3 hold one and that nobody else holds its slot, hold
// it briefly and release it, 8 times each; and the same with readers and
// writers of a shared lock: a writer never overlaps anyone.
func TestLocker_SemaphoreAndShared_ConcurrentHolders_NeverAboveLimit(t *testing.T) {
	ctx := ctxT(t)
	ls := make([]*postgres.Locker, 4)
	for i := range ls {
		ls[i] = lockerOn(t, sharedPool, nil)
	}
	const goroutines, rounds = 24, 8
	run := func(t *testing.T, opts func(g int) []fence.AcquireOption, enter func(g int, lease *fence.Lease) error, leave func(g int, lease *fence.Lease)) {
		name := uniq(t, "name")
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(g int, l *postgres.Locker) {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					lease, err := l.Acquire(ctx, name, time.Minute, append(opts(g), fence.WithWait(30*time.Second))...)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if err := enter(g, lease); err != nil {
						t.Error(err)
					}
					time.Sleep(time.Millisecond)
					leave(g, lease) // before the release: the next holder may enter once it is done
					if err := lease.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			}(g, ls[g%len(ls)])
		}
		wg.Wait()
	}
	t.Run("Semaphore", func(t *testing.T) {
		var (
			mu   sync.Mutex
			slot [3]bool
			n    int
		)
		run(t, func(int) []fence.AcquireOption { return []fence.AcquireOption{fence.WithLimit(3)} },
			func(_ int, lease *fence.Lease) error {
				mu.Lock()
				defer mu.Unlock()
				if n++; n > 3 || slot[lease.Slot()] {
					return errors.New("a fourth permit, or a slot granted twice, while permits were held")
				}
				slot[lease.Slot()] = true
				return nil
			},
			func(_ int, lease *fence.Lease) {
				mu.Lock()
				defer mu.Unlock()
				n--
				slot[lease.Slot()] = false
			})
	})
	t.Run("Shared", func(t *testing.T) {
		var (
			mu              sync.Mutex
			readers, writer int
		)
		writes := func(g int) bool { return g%6 == 0 }
		run(t, func(g int) []fence.AcquireOption {
			if writes(g) {
				return nil
			}
			return []fence.AcquireOption{fence.WithShared()}
		},
			func(g int, _ *fence.Lease) error {
				mu.Lock()
				defer mu.Unlock()
				if writes(g) {
					writer++
				} else {
					readers++
				}
				if writer > 1 || writer == 1 && readers > 0 {
					return errors.New("a writer overlapped another holder")
				}
				return nil
			},
			func(g int, _ *fence.Lease) {
				mu.Lock()
				defer mu.Unlock()
				if writes(g) {
					writer--
				} else {
					readers--
				}
			})
	})
}

func TestLocker_Watch_SeesPermitGrantsAndTheLastRelease(t *testing.T) {
	ctx, l, name := lockTest(t, nil)
	states, _, _ := startWatch(t, ctx, l, name)
	awaitState(t, states, watchPromptly, "the first state", isFree)
	ps := permits(t, ctx, l, name, 2, 2, time.Minute)
	awaitState(t, states, watchPromptly, "both permits", func(i fence.LockInfo) bool {
		return i.Held && i.Token == ps[1].Token() && len(i.Holders) == 2
	})
	wantOK(t, "Release of slot 0", ps[0].Release(ctx))
	wantOK(t, "Release of slot 1", ps[1].Release(ctx))
	awaitState(t, states, watchPromptly, "the last release", isFree)
}
