package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/zookeeper"
)

// acquireKind returns the lease of name that l grants with opts (no wait), failing
// t if it does not.
func acquireKind(t *testing.T, ctx context.Context, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v) = %v; want a lease", name, ttl, err)
	}
	return lease
}

// later runs acquire n times (default once) in the background; the returned
// channel yields each lease or error as it comes.
func later(acquire func() (*fence.Lease, error), n ...int) <-chan result {
	times := 1
	if len(n) > 0 {
		times = n[0]
	}
	c := make(chan result, times)
	for range times {
		go func() {
			lease, err := acquire()
			c <- result{lease, err}
		}()
	}
	return c
}

// rooted returns a Locker on a lock root of its own (named after what), a raw
// connection to read its nodes, and the test's context.
func rooted(t *testing.T, what string) (*zookeeper.Locker, *zk.Conn, string, context.Context) {
	t.Helper()
	root := freshRoot(what)
	return open(t, &zookeeper.Options{Root: root}), rawConn(t), root, testCtx(t)
}

type result struct {
	lease *fence.Lease
	err   error
}

// wantNothingYet fails t if c already yielded, or yields within a short look.
func wantNothingYet(t *testing.T, c <-chan result, what string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s returned %v, %v; want it still waiting", what, r.lease, r.err)
	case <-time.After(200 * time.Millisecond):
	}
}

// wantGranted returns the lease c yields within 10s, failing t otherwise.
func wantGranted(t *testing.T, c <-chan result, what string) *fence.Lease {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s = %v; want a lease", what, r.err)
		}
		return r.lease
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not granted within 10s", what)
	}
	return nil
}

// dirKids returns the children of name's directory under root (name needing no
// encoding), sorted.
func dirKids(t *testing.T, c *zk.Conn, root, name string) []string {
	t.Helper()
	kids, _, err := c.Children(root + "/" + name)
	if err != nil {
		t.Fatalf("Children(%s/%s) = %v", root, name, err)
	}
	slices.Sort(kids)
	return kids
}

func slotNodes(kids []string) []string {
	return slices.DeleteFunc(slices.Clone(kids), func(k string) bool { return !strings.HasPrefix(k, "s-") })
}

func TestLocker_Features_SemaphoresAndShared(t *testing.T) {
	l := open(t, nil)
	if got := fence.FeaturesOf(l); got != (fence.Features{Semaphores: true, Shared: true}) {
		t.Fatalf("FeaturesOf = %+v; want semaphores and shared locks", got)
	}
}

// A semaphore of 3 grants three permits in the lowest free slots, with increasing
// tokens, refuses a fourth, gives a released slot to the next acquire, and Inspect
// lists the holders in slot order; each permit's slot is a node of its own.
func TestSemaphore_LimitGrants_LowestFreeSlot(t *testing.T) {
	l, c, root, ctx := rooted(t, "sem-slots")
	name := "sem"
	var leases []*fence.Lease
	for i := range 3 {
		lease := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(3), fence.WithOwner("w"+string(rune('0'+i))))
		if lease.Slot() != i {
			t.Fatalf("permit %d slot = %d; want %d", i, lease.Slot(), i)
		}
		if i > 0 && lease.Token() <= leases[i-1].Token() {
			t.Fatalf("permit %d token = %d; want > %d", i, lease.Token(), leases[i-1].Token())
		}
		leases = append(leases, lease)
	}
	if got := slotNodes(dirKids(t, c, root, name)); !slices.Equal(got, []string{"s-0", "s-1", "s-2"}) {
		t.Fatalf("slot nodes = %q; want s-0, s-1, s-2", got)
	}
	if _, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(3)); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("fourth permit = %v; want ErrNotAcquired", err)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Limit != 3 || info.Shared || len(info.Holders) != 3 || info.Token != leases[2].Token() {
		t.Fatalf("Inspect = %+v; want held, limit 3, three holders, the highest token %d", info, leases[2].Token())
	}
	for i, h := range info.Holders {
		if h.Slot != i || h.Token != leases[i].Token() || h.Owner != leases[i].Owner() || h.ExpiresIn <= 0 {
			t.Fatalf("Holders[%d] = %+v; want slot %d, token %d, owner %q, time left", i, h, i, leases[i].Token(), leases[i].Owner())
		}
	}
	if err := leases[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	if next.Slot() != 1 || next.Token() <= leases[2].Token() {
		t.Fatalf("permit after slot 1's release: slot %d token %d; want slot 1, token > %d", next.Slot(), next.Token(), leases[2].Token())
	}
	if err := next.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("Renew of a permit = %v; want nil", err)
	}
	for _, lease := range []*fence.Lease{leases[0], leases[2], next} {
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release of slot %d = %v; want nil", lease.Slot(), err)
		}
	}
	if kids := dirKids(t, c, root, name); len(kids) != 0 {
		t.Fatalf("nodes after every permit's release = %q; want none", kids)
	}
}

// Acquirers must agree on the limit while leases are live: another limit, a lock
// or a shared lease gets a *fence.LimitError naming both, matching ErrInvalid, and
// leaves no node; once nothing is live any limit goes.
func TestSemaphore_LimitMismatch_LimitError(t *testing.T) {
	l, c, root, ctx := rooted(t, "sem-mismatch")
	name := "sem"
	lease := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	for _, tc := range []struct {
		what  string
		opts  []fence.AcquireOption
		limit int
	}{
		{"limit 2", []fence.AcquireOption{fence.WithLimit(2)}, 2},
		{"a lock", nil, 1},
		{"a shared lease, waiting", []fence.AcquireOption{fence.WithShared(), fence.WithWait(5 * time.Second)}, 1},
	} {
		_, err := l.Acquire(ctx, name, time.Minute, tc.opts...)
		var le *fence.LimitError
		if !errors.As(err, &le) || !errors.Is(err, fence.ErrInvalid) || le.Limit != tc.limit || le.Held != 3 || le.Name != name {
			t.Fatalf("%s on a semaphore of 3 = %v; want a *LimitError{%q, %d, 3} matching ErrInvalid", tc.what, err, name, tc.limit)
		}
	}
	if kids := dirKids(t, c, root, name); len(kids) != 2 {
		t.Fatalf("nodes after refused acquires = %q; want the permit's node and slot only", kids)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	if _, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(3)); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("limit 3 on a semaphore of 2 = %v; want ErrInvalid", err)
	}
	other.Release(ctx)
}

// A waiter for a full semaphore is woken by a release (its watch, not a poll: the
// holders' TTL is a minute) and takes the freed slot.
func TestSemaphore_Waiter_WokenByRelease_TakesFreedSlot(t *testing.T) {
	l, w := open(t, nil), open(t, nil)
	ctx := testCtx(t)
	name := "sem-wait-" + driver.NewLeaseID()[:8]
	a := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	b := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	waiters := later(func() (*fence.Lease, error) {
		return w.Acquire(ctx, name, time.Minute, fence.WithLimit(2), fence.WithWait(30*time.Second))
	}, 2)
	wantNothingYet(t, waiters, "waiter on a full semaphore")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := wantGranted(t, waiters, "a waiter after a release (1m TTLs)")
	if first.Slot() != 0 || first.Token() <= b.Token() {
		t.Fatalf("waiter's permit: slot %d token %d; want slot 0, token > %d", first.Slot(), first.Token(), b.Token())
	}
	wantNothingYet(t, waiters, "second waiter on a full semaphore")
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := wantGranted(t, waiters, "the second waiter after a release")
	if last.Slot() != 1 || last.Token() <= first.Token() {
		t.Fatalf("second waiter's permit: slot %d token %d; want slot 1, token > %d", last.Slot(), last.Token(), first.Token())
	}
	first.Release(ctx)
	last.Release(ctx)
}

// waitExpired waits until Inspect of name lists want holders: the others' TTLs
// passed by the leader's clock.
func waitHolders(t *testing.T, l *zookeeper.Locker, name string, want int) {
	t.Helper()
	ctx := testCtx(t)
	for i := 0; ; i++ {
		info, err := l.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) == want {
			return
		}
		if i == 200 {
			t.Fatalf("Inspect = %+v after 10s; want %d holders", info, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The slot of a permit whose TTL passed is free again, though its holder's
// session lives on and no waiter took it over: the next acquire takes it (the
// lowest slot that no live lease has), deleting the expired node and its slot.
func TestSemaphore_ExpiredPermit_SlotReused(t *testing.T) {
	l, c, root, ctx := rooted(t, "sem-expired")
	name := "sem"
	short := acquireKind(t, ctx, l, name, 200*time.Millisecond, fence.WithLimit(3))
	long := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	waitHolders(t, l, name, 1)
	next := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(3))
	if next.Slot() != short.Slot() || next.Token() <= long.Token() {
		t.Fatalf("permit after slot %d expired: slot %d token %d; want slot %d, token > %d", short.Slot(), next.Slot(), next.Token(), short.Slot(), long.Token())
	}
	if err := short.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of the expired permit = %v; want ErrNotHeld", err)
	}
	if got := slotNodes(dirKids(t, c, root, name)); !slices.Equal(got, []string{"s-0", "s-1"}) {
		t.Fatalf("slot nodes = %q; want s-0 and s-1 (the expired one's taken over)", got)
	}
	long.Release(ctx)
	next.Release(ctx)
}

// Revoke ends every live permit, with its slot, and says ErrNotHeld once none is.
func TestSemaphore_Revoke_EndsEveryPermit(t *testing.T) {
	root := freshRoot("sem-revoke")
	l, admin := open(t, &zookeeper.Options{Root: root}), open(t, &zookeeper.Options{Root: root})
	c := rawConn(t)
	ctx := testCtx(t)
	name := "sem"
	a := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	b := acquireKind(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	if err := admin.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke = %v; want nil", err)
	}
	for _, lease := range []*fence.Lease{a, b} {
		if err := lease.Renew(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("revoked permit %d's Renew = %v; want ErrNotHeld", lease.Slot(), err)
		}
	}
	if kids := dirKids(t, c, root, name); len(kids) != 0 {
		t.Fatalf("nodes after Revoke = %q; want none", kids)
	}
	if err := admin.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("second Revoke = %v; want ErrNotHeld", err)
	}
}

// A holder's session that ends takes its permits' nodes and slots with it, so a
// waiter is granted at once, in the freed slot.
func TestSemaphore_SessionClosed_SlotFreedAtOnce(t *testing.T) {
	root := freshRoot("sem-session")
	a, b := open(t, &zookeeper.Options{Root: root}), open(t, &zookeeper.Options{Root: root})
	ctx := testCtx(t)
	name := "sem"
	first := acquireKind(t, ctx, a, name, time.Minute, fence.WithLimit(2))
	second := acquireKind(t, ctx, b, name, time.Minute, fence.WithLimit(2))
	waiter := later(func() (*fence.Lease, error) {
		return b.Acquire(ctx, name, time.Minute, fence.WithLimit(2), fence.WithWait(30*time.Second))
	})
	wantNothingYet(t, waiter, "waiter on a full semaphore")
	a.Close()
	got := wantGranted(t, waiter, "waiter after the holder's session closed")
	if got.Slot() != first.Slot() || got.Token() <= second.Token() {
		t.Fatalf("permit after the session's end: slot %d token %d; want slot %d, token > %d", got.Slot(), got.Token(), first.Slot(), second.Token())
	}
	got.Release(ctx)
	second.Release(ctx)
}

// contend runs workers goroutines of rounds each on name, from two sessions of
// their own: each acquires with the options opts(i) gives worker i (waiting),
// calls enter with the lease (an error fails t, and that lease is released),
// holds it 2ms, calls leave and releases. opts, enter and leave run under one
// mutex.
func contend(t *testing.T, name string, workers, rounds int, opts func(i int) []fence.AcquireOption, enter func(i int, lease *fence.Lease) error, leave func(i int, lease *fence.Lease)) {
	t.Helper()
	ls := []*zookeeper.Locker{open(t, nil), open(t, nil)}
	ctx := testCtx(t)
	var mu sync.Mutex
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				mu.Lock()
				o := opts(i)
				mu.Unlock()
				lease, err := ls[i%2].Acquire(ctx, name, time.Minute, append(o, fence.WithWait(30*time.Second))...)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				err = enter(i, lease)
				mu.Unlock()
				if err == nil {
					time.Sleep(2 * time.Millisecond)
					mu.Lock()
					leave(i, lease)
					mu.Unlock()
				}
				if rerr := lease.Release(ctx); err == nil {
					err = rerr
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Under contention from two sessions, at most limit permits are held at once, no
// two in one slot, and each slot's tokens rise from holder to holder.
func TestSemaphore_Contention_SlotsExclusive(t *testing.T) {
	const limit = 3
	holding, last := map[int]bool{}, map[int]fence.Token{}
	contend(t, "sem-contention-"+driver.NewLeaseID()[:8], 8, 6,
		func(int) []fence.AcquireOption { return []fence.AcquireOption{fence.WithLimit(limit)} },
		func(_ int, lease *fence.Lease) error {
			k := lease.Slot()
			if holding[k] || len(holding) == limit || lease.Token() <= last[k] {
				return fmt.Errorf("permit in slot %d token %d while holding %v, last tokens %v: want a free slot and a rising token", k, lease.Token(), holding, last)
			}
			holding[k], last[k] = true, lease.Token()
			return nil
		},
		func(_ int, lease *fence.Lease) { delete(holding, lease.Slot()) })
}
