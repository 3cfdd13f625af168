package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// pending is an Acquire running in a goroutine: its lease and error arrive once.
type pending struct {
	lease *fence.Lease
	err   error
	done  chan struct{}
}

// acquireAsync starts Acquire in a goroutine.
func acquireAsync(ctx context.Context, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.lease, p.err = l.Acquire(ctx, name, ttl, opts...)
	}()
	return p
}

// within reports whether the Acquire returned within d.
func (p *pending) within(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// wantNotAcquired fails t unless a try of name with opts finds it held.
func wantNotAcquired(t *testing.T, ctx context.Context, l fence.Locker, name, what string, opts ...fence.AcquireOption) {
	t.Helper()
	a, err := fence.TryAcquire(ctx, l, name, time.Minute, opts...)
	if err == nil {
		a.Release(ctx)
	}
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire = %v, %v; want an error matching fence.ErrNotAcquired", what, a, err)
	}
}

func TestLocker_Features_SemaphoresAndShared(t *testing.T) {
	l := etcd.NewLocker(client(t), nil)
	if got := fence.FeaturesOf(l); got != (fence.Features{Semaphores: true, Shared: true, RequestIDs: true}) {
		t.Fatalf("FeaturesOf = %+v; want semaphores, shared locks and request ids", got)
	}
	var s fence.Locker = &etcd.Store{Locker: l}
	if !fence.FeaturesOf(s).Semaphores {
		t.Fatal("a Store does not declare semaphores")
	}
}

// A semaphore of 3 takes the lowest free slot, each grant with a higher token;
// a released slot is the next one granted, and a full semaphore is held.
func TestLocker_Semaphore_LowestFreeSlotTokensIncrease(t *testing.T) {
	ctx, cli, name := setup(t, "sem")
	l := etcd.NewLocker(cli, nil)
	var ls []*fence.Lease
	for i := range 3 {
		a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
		if a.Slot() != i || (i > 0 && a.Token() <= ls[i-1].Token()) {
			t.Fatalf("permit %d: slot %d token %d; want slot %d and a token above the last", i, a.Slot(), a.Token(), i)
		}
		ls = append(ls, a)
	}
	wantNotAcquired(t, ctx, l, name, "fourth permit of 3", fence.WithLimit(3))
	if err := ls[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	if b.Slot() != 1 || b.Token() <= ls[2].Token() {
		t.Fatalf("after slot 1 released: slot %d token %d; want slot 1 above %d", b.Slot(), b.Token(), ls[2].Token())
	}
	if err := ls[1].Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("released permit's Renew = %v; want fence.ErrNotHeld (slot 1 is the next holder's)", err)
	}
	if err := ls[1].Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("released permit's second Release = %v; want fence.ErrNotHeld", err)
	}
	for _, a := range []*fence.Lease{ls[0], b, ls[2]} {
		if err := a.Renew(ctx, time.Minute); err != nil {
			t.Fatalf("Renew of slot %d = %v", a.Slot(), err)
		}
	}
}

// Acquirers that disagree with the live leases' limit get a *fence.LimitError
// naming both limits, in every combination of kinds; nothing changes.
func TestLocker_Semaphore_LimitMismatch_LimitError(t *testing.T) {
	ctx, cli, name := setup(t, "limit")
	l := etcd.NewLocker(cli, nil)
	check := func(what string, limit, held int, opts ...fence.AcquireOption) {
		t.Helper()
		a, err := l.Acquire(ctx, name, time.Minute, append(opts, fence.WithWait(time.Second))...)
		var le *fence.LimitError
		if !errors.As(err, &le) || le.Limit != limit || le.Held != held || le.Name != name || !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("%s: Acquire = %v, %v; want a *fence.LimitError with limit %d, held %d", what, a, err, limit, held)
		}
	}
	s := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	check("limit 4 on 3", 4, 3, fence.WithLimit(4))
	check("lock on 3", 1, 3)
	check("shared on 3", 1, 3, fence.WithShared())
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x := mustAcquire(t, ctx, l, name, time.Minute)
	check("limit 2 on a lock", 2, 1, fence.WithLimit(2))
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	check("limit 2 on shared", 2, 1, fence.WithLimit(2))
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Free again: any limit.
	mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(5)).Release(ctx)
}

// race runs workers Lockers on clients of their own, each acquiring name rounds
// times (waiting) with the options opts gives; under one mutex, hold checks each
// grant and records it, and the function it returns records its end, just before
// the release. It returns the number of grants.
func race(t *testing.T, ctx context.Context, name string, workers, rounds int, opts func(w, i int) []fence.AcquireOption, hold func(w, i int, a *fence.Lease) (leave func())) int {
	var (
		mu     sync.Mutex
		grants int
		wg     sync.WaitGroup
	)
	for w := range workers {
		l := etcd.NewLocker(client(t), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				a, err := l.Acquire(ctx, name, time.Minute, append(opts(w, i), fence.WithWait(30*time.Second))...)
				if err != nil {
					t.Errorf("worker %d: Acquire = %v", w, err)
					return
				}
				mu.Lock()
				leave := hold(w, i, a)
				grants++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				leave() // before the release: the next grant may follow it at once
				mu.Unlock()
				if err := a.Release(ctx); err != nil {
					t.Errorf("worker %d: Release = %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if grants != workers*rounds {
		t.Fatalf("%d grants; want %d", grants, workers*rounds)
	}
	return grants
}

// Many Lockers on their own clients race for a semaphore of 3: at no point are
// more than 3 permits live, no slot has two live leases, and every token is new.
func TestLocker_Semaphore_Race_NeverNPlus1NeverTwoInASlot(t *testing.T) {
	ctx, _, name := setup(t, "race")
	const limit = 3
	live := map[int]fence.Token{} // slot -> token
	tokens := map[fence.Token]bool{}
	race(t, ctx, name, 8, 15, func(int, int) []fence.AcquireOption { return []fence.AcquireOption{fence.WithLimit(limit)} },
		func(_, _ int, a *fence.Lease) func() {
			if tok, ok := live[a.Slot()]; ok || len(live) >= limit || tokens[a.Token()] {
				t.Errorf("grant of slot %d token %d while %d live (slot held by %d: %v), token seen: %v", a.Slot(), a.Token(), len(live), tok, ok, tokens[a.Token()])
			}
			live[a.Slot()] = a.Token()
			tokens[a.Token()] = true
			return func() { delete(live, a.Slot()) }
		})
}

// Shared leases and exclusive ones race on one name: never an exclusive lease
// beside any other live lease, shared ones together, each token new and above
// that of every grant that ended before it.
func TestLocker_Shared_Race_ExclusiveAlone(t *testing.T) {
	ctx, _, name := setup(t, "rwrace")
	var (
		shared, exclus, maxShared, nShared int
		last, lastExcl                     fence.Token // highest token granted; highest exclusive one
		tokens                             = map[fence.Token]bool{}
	)
	isShared := func(w, i int) bool { return (w+i)%3 != 0 }
	grants := race(t, ctx, name, 6, 12, func(w, i int) []fence.AcquireOption {
		if isShared(w, i) {
			return []fence.AcquireOption{fence.WithShared()}
		}
		return nil
	}, func(w, i int, a *fence.Lease) func() {
		sh := isShared(w, i)
		// Every earlier grant has been recorded: an exclusive grant follows
		// their end, a shared one the end of every exclusive one.
		if exclus > 0 || (!sh && (shared > 0 || a.Token() <= last)) || a.Token() <= lastExcl || tokens[a.Token()] {
			t.Errorf("grant (shared %v, token %d) while %d exclusive, %d shared live, last token %d, last exclusive %d", sh, a.Token(), exclus, shared, last, lastExcl)
		}
		tokens[a.Token()] = true
		last = max(last, a.Token())
		if !sh {
			lastExcl = a.Token()
			exclus++
			return func() { exclus-- }
		}
		shared++
		nShared++
		maxShared = max(maxShared, shared)
		return func() { shared-- }
	})
	t.Logf("%d grants, %d shared, at most %d shared at once", grants, nShared, maxShared)
}

// An exclusive acquire waiting for shared holders holds off new shared acquires
// (writer preference) and is granted when the last shared holder leaves, by the
// watch; its grant clears its record, so shared acquires wait only for its lease.
func TestLocker_Shared_WriterPreferredRecordCleared(t *testing.T) {
	ctx, cli, name := setup(t, "rw")
	l, other := etcd.NewLocker(cli, nil), etcd.NewLocker(client(t), nil)
	r1 := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared(), fence.WithOwner("r1"))
	r2 := mustAcquire(t, ctx, other, name, time.Minute, fence.WithShared())
	if r1.Slot() != 0 || r2.Slot() != 0 || r2.Token() <= r1.Token() {
		t.Fatalf("shared slots %d, %d tokens %d, %d; want 0, 0 and increasing", r1.Slot(), r2.Slot(), r1.Token(), r2.Token())
	}
	wantNotAcquired(t, ctx, other, name, "exclusive beside shared holders")
	// Without a waiter, shared acquires are granted.
	r3 := mustAcquire(t, ctx, other, name, time.Minute, fence.WithShared())
	w := acquireAsync(ctx, other, name, time.Minute, fence.WithWait(30*time.Second))
	eventually(t, 5*time.Second, func() string { return "no waiter record" }, func() bool {
		resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name+"\x00w", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 1
	})
	wantNotAcquired(t, ctx, l, name, "shared while an exclusive acquire waits", fence.WithShared())
	for _, r := range []*fence.Lease{r1, r2, r3} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !w.within(2 * time.Second) { // the fallback poll is 5s
		t.Fatal("exclusive waiter not granted 2s after the last shared holder left")
	}
	x := w
	if x.err != nil || x.lease.Token() <= r3.Token() {
		t.Fatalf("exclusive waiter = %v, %v; want a lease above %d", x.lease, x.err, r3.Token())
	}
	if resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name+"\x00w", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("waiter records after the exclusive grant: %v, %v; want none", resp, err)
	}
	s := acquireAsync(ctx, l, name, time.Minute, fence.WithShared(), fence.WithWait(30*time.Second))
	time.Sleep(200 * time.Millisecond)
	if err := x.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.within(2 * time.Second) {
		t.Fatal("shared waiter not granted 2s after the exclusive release")
	}
	if s.err != nil || s.lease.Token() <= x.lease.Token() {
		t.Fatalf("shared after the exclusive release = %v, %v; want a lease above %d", s.lease, s.err, x.lease.Token())
	}
	s.lease.Release(ctx)
}

// An exclusive waiter that gives up (its wait ends, or its context) deletes its
// record at once: shared acquires are granted again without waiting for its TTL.
func TestLocker_Shared_WaiterGivesUp_RecordDeleted(t *testing.T) {
	ctx, cli, name := setup(t, "giveup")
	l := etcd.NewLocker(cli, nil)
	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	defer r.Release(ctx)
	if a, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(300*time.Millisecond)); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("exclusive beside a shared holder = %v, %v; want fence.ErrNotAcquired", a, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := acquireAsync(cctx, l, name, time.Minute, fence.WithWait(time.Minute))
	time.Sleep(300 * time.Millisecond)
	cancel()
	if !w.within(10 * time.Second) {
		t.Fatal("cancelled exclusive waiter still waiting 10s later")
	}
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("cancelled exclusive waiter = %v, %v; want context.Canceled", w.lease, w.err)
	}
	if resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name+"\x00w", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("waiter records after the waiters gave up: %v, %v; want none", resp, err)
	}
	mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared()).Release(ctx)
}

// A waiter on a full semaphore is woken by the watch when a permit is released,
// and takes the released slot: several handoffs, each within the fallback poll.
func TestLocker_Semaphore_Waiter_WokenByWatchTakesFreedSlot(t *testing.T) {
	ctx, cli, name := setup(t, "semwake")
	holder, waiter := etcd.NewLocker(cli, nil), etcd.NewLocker(client(t), nil)
	ls := []*fence.Lease{
		mustAcquire(t, ctx, holder, name, time.Minute, fence.WithLimit(2)),
		mustAcquire(t, ctx, holder, name, time.Minute, fence.WithLimit(2)),
	}
	for i := range 4 {
		got := acquireAsync(ctx, waiter, name, time.Minute, fence.WithLimit(2), fence.WithWait(30*time.Second))
		time.Sleep(200 * time.Millisecond) // the waiter's first try and watch
		slot := i % 2
		released := time.Now()
		if err := ls[slot].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !got.within(2 * time.Second) { // the fallback poll is 5s
			t.Fatalf("handoff %d: waiter not granted %v after the release", i, time.Since(released).Round(time.Millisecond))
		}
		if got.err != nil || got.lease.Slot() != slot {
			t.Fatalf("handoff %d: waiter = %v, %v; want slot %d", i, got.lease, got.err, slot)
		}
		ls[slot] = got.lease
	}
}

// Inspect and List report a semaphore's holders in slot order and shared holders
// in token order, with owners and time left; names that extend another ("a" and
// "a/b") stay apart.
func TestLocker_InspectList_Holders(t *testing.T) {
	ctx, cli, name := setup(t, "insp")
	l := etcd.NewLocker(cli, nil)
	s0 := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3), fence.WithOwner("w0"))
	s1 := mustAcquire(t, ctx, l, name, 30*time.Second, fence.WithLimit(3))
	sub := name + "/b"
	r0 := mustAcquire(t, ctx, l, sub, time.Minute, fence.WithShared(), fence.WithOwner("reader"))
	r1 := mustAcquire(t, ctx, l, sub, time.Minute, fence.WithShared())
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	want := []fence.Holder{{Slot: 0, Token: s0.Token(), Owner: "w0"}, {Slot: 1, Token: s1.Token()}}
	if !info.Held || info.Limit != 3 || info.Shared || len(info.Holders) != 2 || info.Token != s1.Token() || info.LastToken != s1.Token() {
		t.Fatalf("Inspect(semaphore) = %+v; want held, limit 3, two holders, token %d", info, s1.Token())
	}
	for i, h := range info.Holders {
		if h.Slot != want[i].Slot || h.Token != want[i].Token || h.Owner != want[i].Owner || h.ExpiresIn <= 0 || h.ExpiresIn > time.Minute {
			t.Fatalf("holder %d = %+v; want %+v with time left", i, h, want[i])
		}
	}
	if info.ExpiresIn > 30*time.Second || info.ExpiresIn < 25*time.Second {
		t.Fatalf("Inspect ExpiresIn = %v; want slot 1's, about 30s", info.ExpiresIn)
	}
	list, err := l.List(ctx, fence.ListOptions{Prefix: name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != name || list[1].Name != sub {
		t.Fatalf("List = %+v; want %q and %q", list, name, sub)
	}
	if len(list[0].Holders) != 2 || list[0].Limit != 3 {
		t.Fatalf("List[0] = %+v; want the semaphore's two holders", list[0])
	}
	sh := list[1]
	if !sh.Shared || sh.Limit != 0 || len(sh.Holders) != 2 || sh.Holders[0].Token != r0.Token() || sh.Holders[0].Owner != "reader" ||
		sh.Holders[1].Token != r1.Token() || sh.Holders[0].Slot != 0 || sh.Holders[1].Slot != 0 || sh.Token != r1.Token() {
		t.Fatalf("List[1] = %+v; want two shared holders in token order", sh)
	}
	si, err := l.Inspect(ctx, sub)
	if err != nil || !slices.Equal(si.Holders, sh.Holders) && len(si.Holders) != 2 {
		t.Fatalf("Inspect(shared) = %+v, %v; want List's holders", si, err)
	}
	for _, a := range []*fence.Lease{s0, s1, r0, r1} {
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := l.Inspect(ctx, name); err != nil || info.Held || info.Holders != nil || info.LastToken != s1.Token() {
		t.Fatalf("Inspect after release = %+v, %v; want free, last token %d", info, err, s1.Token())
	}
}

// Revoke ends every live permit at once; their holders' Renew says ErrNotHeld,
// and every slot is granted again with a higher token.
func TestLocker_Semaphore_Revoke_EndsEveryPermit(t *testing.T) {
	ctx, cli, name := setup(t, "semrevoke")
	l := etcd.NewLocker(cli, nil)
	var ls []*fence.Lease
	for range 3 {
		ls = append(ls, mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3)))
	}
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	for _, a := range ls {
		if err := a.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Renew of revoked slot %d = %v; want fence.ErrNotHeld", a.Slot(), err)
		}
	}
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("second Revoke = %v; want fence.ErrNotHeld", err)
	}
	for i := range 3 {
		a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3))
		if a.Slot() != i || a.Token() <= ls[2].Token() {
			t.Fatalf("after Revoke: slot %d token %d; want slot %d above %d", a.Slot(), a.Token(), i, ls[2].Token())
		}
	}
}

// A permit's lease id is a credential: an id that names the right slot but not
// the grant's random part renews and releases nothing.
func TestLocker_Semaphore_ForgedLeaseID_ErrNotHeld(t *testing.T) {
	ctx, cli, name := setup(t, "forged")
	l := etcd.NewLocker(cli, nil)
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	for _, id := range []string{"0123456789abcdef0123456789abcdef.2.0", "x.2.0", ".2.0", a.ID() + "x", "0123.r.0", a.ID()[:10]} {
		if err := l.Release(ctx, name, id); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Release(%q) = %v; want fence.ErrNotHeld", id, err)
		}
		if err := l.Renew(ctx, name, id, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Renew(%q) = %v; want fence.ErrNotHeld", id, err)
		}
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("holder's Release after the forged ones = %v", err)
	}
}

// Renew with a longer TTL moves a permit to a new etcd lease: same slot, same
// token, owner kept.
func TestLocker_Semaphore_RenewLongerTTL_KeepsSlotTokenOwner(t *testing.T) {
	ctx, cli, name := setup(t, "semrenew")
	l := etcd.NewLocker(cli, nil)
	mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	a := mustAcquire(t, ctx, l, name, 2*time.Second, fence.WithLimit(2), fence.WithOwner("o"))
	if err := l.Renew(ctx, name, a.ID(), time.Minute); err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || len(info.Holders) != 2 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	h := info.Holders[1]
	if h.Slot != 1 || h.Token != a.Token() || h.Owner != "o" || h.ExpiresIn < 50*time.Second {
		t.Fatalf("holder after Renew(1m) = %+v; want slot 1, token %d, owner o, about a minute left", h, a.Token())
	}
	if err := l.Release(ctx, name, a.ID()); err != nil {
		t.Fatal(err)
	}
}

// Watch yields each grant of a permit and the end of the last one.
func TestLocker_Watch_Semaphore_GrantsAndLastRelease(t *testing.T) {
	ctx, cli, name := setup(t, "semwatch")
	l := etcd.NewLocker(cli, nil)
	states, stop := startWatch(t, l, name)
	defer stop()
	waitFor(t, states, 5*time.Second, "initial free state", false, isFree)
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	waitFor(t, states, 2*time.Second, "first permit", false, func(i fence.LockInfo) bool { return len(i.Holders) == 1 && i.Token == a.Token() })
	b := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	waitFor(t, states, 2*time.Second, "second permit", false, func(i fence.LockInfo) bool { return len(i.Holders) == 2 && i.Token == b.Token() })
	for _, x := range []*fence.Lease{a, b} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, states, 2*time.Second, "free after the last release", false, isFree)
}

// A semaphore and a shared lock on many names at once: every name's keys stay
// its own (names that are prefixes of others included).
func TestLocker_Semaphore_PrefixNames_Independent(t *testing.T) {
	ctx, cli, name := setup(t, "pfx")
	l := etcd.NewLocker(cli, nil)
	names := []string{name, name + "/a", name + "a", name + " b"}
	for i, n := range names {
		a := mustAcquire(t, ctx, l, n, time.Minute, fence.WithLimit(2))
		if a.Slot() != 0 {
			t.Fatalf("%d: %q slot %d; want 0 (names independent)", i, n, a.Slot())
		}
	}
	for _, n := range names {
		if err := l.Revoke(ctx, n); err != nil {
			t.Fatalf("Revoke(%q) = %v", n, err)
		}
		for _, m := range names {
			if info, err := l.Inspect(ctx, m); err != nil || info.Held == (slices.Index(names, m) <= slices.Index(names, n)) {
				t.Fatalf("after Revoke(%q): Inspect(%q) = %+v, %v", n, m, info, err)
			}
		}
	}
}

// A one-member cluster is killed and restarted: permits and shared leases granted
// before are still held (a new permit finds the semaphore full, an exclusive
// acquire the shared lease), their holders renew and release them, and the next
// grant's token is above theirs.
func TestCluster_Restart_PermitsAndSharedLeasesSurvive(t *testing.T) {
	servertest.SkipIfShort(t)
	c := etcdtest.NewCluster(t, 1)
	ctx := testCtx(t)
	cli := newClient(t, c.Endpoints())
	l := etcd.NewLocker(cli, nil)
	sem, rw := uniq("restart-sem"), uniq("restart-rw")
	p0 := mustAcquire(t, ctx, l, sem, 30*time.Second, fence.WithLimit(2))
	p1 := mustAcquire(t, ctx, l, sem, 30*time.Second, fence.WithLimit(2), fence.WithOwner("p1"))
	r := mustAcquire(t, ctx, l, rw, 30*time.Second, fence.WithShared())

	m := c.Members[0]
	m.Kill()
	if err := c.Restart(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The client reconnects on its own; the first requests may still fail.
	eventually(t, 20*time.Second, func() string { return "Renew of slot 0 after the restart" }, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return p0.Renew(rctx, 30*time.Second) == nil
	})
	wantNotAcquired(t, ctx, l, sem, "third permit after the restart", fence.WithLimit(2))
	wantNotAcquired(t, ctx, l, rw, "exclusive beside the shared lease after the restart")
	info, err := l.Inspect(ctx, sem)
	if err != nil || len(info.Holders) != 2 || info.Holders[1].Owner != "p1" {
		t.Fatalf("Inspect after the restart = %+v, %v; want both permits, slot 1 owned by p1", info, err)
	}
	if err := p1.Release(ctx); err != nil {
		t.Fatalf("Release of slot 1 after the restart = %v", err)
	}
	n := mustAcquire(t, ctx, l, sem, 30*time.Second, fence.WithLimit(2))
	if n.Slot() != 1 || n.Token() <= max(p1.Token(), r.Token()) {
		t.Fatalf("permit after the restart: slot %d token %d; want slot 1 above %d", n.Slot(), n.Token(), p1.Token())
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the shared lease after the restart = %v", err)
	}
	mustAcquire(t, ctx, l, rw, 30*time.Second).Release(ctx)
}

// Shared leases take random slots: 60 of them collide on some slot now and then,
// and the try takes a free one from its failed transaction's reads; all are
// granted, each token above the last, and Inspect lists them all in token order.
func TestLocker_Shared_ManyHolders_SlotCollisionsResolved(t *testing.T) {
	ctx, cli, name := setup(t, "many")
	l := etcd.NewLocker(cli, nil)
	var last fence.Token
	for i := range 60 {
		a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
		if a.Token() <= last {
			t.Fatalf("shared lease %d: token %d; want above %d", i, a.Token(), last)
		}
		last = a.Token()
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || len(info.Holders) != 60 || !info.Shared || info.Token != last {
		t.Fatalf("Inspect = %d holders, shared %v, token %d, %v; want 60 shared holders, token %d", len(info.Holders), info.Shared, info.Token, err, last)
	}
	if !slices.IsSortedFunc(info.Holders, func(a, b fence.Holder) int { return int(a.Token) - int(b.Token) }) {
		t.Fatalf("Holders not in token order: %+v", info.Holders)
	}
}

// With fence.MaxLimit shared leases live (written here as the keys a grant
// writes), a shared acquire finds the lock held.
func TestLocker_Shared_MaxLimitLive_Held(t *testing.T) {
	ctx, cli, name := setup(t, "maxshared")
	l := etcd.NewLocker(cli, nil)
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(ctx, g.ID)
	for from := 0; from < fence.MaxLimit; from += 100 {
		var ops []clientv3.Op
		for s := from; s < min(from+100, fence.MaxLimit); s++ {
			id := fmt.Sprintf("%032x.r.%d", s, s)
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%slock/%s\x00hsh\x00%04d", etcd.DefaultPrefix, name, s), id+"\x00", clientv3.WithLease(g.ID)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	wantNotAcquired(t, ctx, l, name, "shared with MaxLimit shared leases live", fence.WithShared())
	if _, err := cli.Delete(ctx, fmt.Sprintf("%slock/%s\x00hsh\x00%04d", etcd.DefaultPrefix, name, 700)); err != nil {
		t.Fatal(err)
	}
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
