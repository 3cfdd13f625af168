package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
)

// The scripts of the version before semaphores and shared locks (testdata/v2;
// testdata/v1 is the version before owners), for rolling-upgrade tests.
var (
	//go:embed testdata/v2/acquire.lua
	v2AcquireSrc string
	//go:embed testdata/v2/lease.lua
	v2LeaseSrc string
	//go:embed testdata/v2/revoke.lua
	v2RevokeSrc string
	//go:embed testdata/v2/inspect.lua
	v2InspectSrc string

	v2Acquire = goredis.NewScript(v2AcquireSrc)
	v2Lease   = goredis.NewScript(v2LeaseSrc)
	v2Revoke  = goredis.NewScript(v2RevokeSrc)
	v2Inspect = goredis.NewScript(v2InspectSrc)
)

// tryAcquire acquires name once with opts and returns the lease, or nil if the
// name is held; any other error fails t.
func tryAcquire(t *testing.T, ctx context.Context, l *Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, ttl, opts...)
	switch {
	case err == nil:
		return lease
	case errors.Is(err, fence.ErrNotAcquired):
		return nil
	}
	t.Fatalf("Acquire %q: %v", name, err)
	return nil
}

// release releases lease, failing t if that fails.
func release(t *testing.T, ctx context.Context, lease *fence.Lease) {
	t.Helper()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release of token %d: %v", lease.Token(), err)
	}
}

// fill acquires n leases on name with opts, for a minute each, and checks that
// their tokens rise and that a semaphore's take the next slots: those after the
// name's live leases, which fill took.
func fill(t *testing.T, ctx context.Context, l *Locker, name string, n int, opts ...fence.AcquireOption) []*fence.Lease {
	t.Helper()
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	semaphore := driver.ApplyOptions(opts...).Limit > 1
	leases := make([]*fence.Lease, 0, n)
	last := info.LastToken
	for i := 0; i < n; i++ {
		lease := mustAcquire(t, ctx, l, name, time.Minute, opts...)
		if lease.Token() <= last || (semaphore && lease.Slot() != len(info.Holders)+i) {
			t.Fatalf("lease %d: token %d slot %d; want a token above %d and slot %d", i, lease.Token(), lease.Slot(), last, len(info.Holders)+i)
		}
		last = lease.Token()
		leases = append(leases, lease)
	}
	return leases
}

// limitError returns the *fence.LimitError in err, failing t if there is none or
// it does not also match fence.ErrInvalid.
func limitError(t *testing.T, err error) *fence.LimitError {
	t.Helper()
	var le *fence.LimitError
	if !errors.As(err, &le) || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("error = %v; want a *fence.LimitError matching fence.ErrInvalid", err)
	}
	return le
}

func TestLocker_Features_SemaphoresAndShared(t *testing.T) {
	l, _ := newLocker(t, nil)
	if got := fence.FeaturesOf(l); !got.Semaphores || !got.Shared {
		t.Fatalf("FeaturesOf = %+v; want both", got)
	}
}

// Slots are the lowest free ones, the limit is enforced, a mismatched limit is
// refused with both limits named, and a waiter is woken by a release (not by its
// poll: PollInterval is an hour) and takes the freed slot.
func TestLocker_Semaphore_SlotsLimitAndWake(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	var leases []*fence.Lease
	for i := 0; i < 3; i++ {
		leases = append(leases, fill(t, ctx, l, name, 1, fence.WithLimit(3), fence.WithOwner(fmt.Sprint("w ", i)))...)
	}
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(3)); lease != nil {
		t.Fatalf("fourth permit of 3 granted: slot %d", lease.Slot())
	}
	for _, opts := range [][]fence.AcquireOption{{fence.WithLimit(2)}, {}, {fence.WithShared()}} {
		_, err := l.Acquire(ctx, name, time.Minute, opts...)
		if le := limitError(t, err); le.Held != 3 || le.Limit == 3 || le.Name != name {
			t.Fatalf("LimitError = %+v; want Held 3 for %q", le, name)
		}
	}

	got := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(3), fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	waitSubscribers(t, c, l, name, 1)
	release(t, ctx, leases[1])
	select {
	case lease := <-got:
		if lease == nil || lease.Slot() != 1 || lease.Token() <= leases[2].Token() {
			t.Fatalf("waiter got %v; want slot 1 with a token above %d", lease, leases[2].Token())
		}
		leases[1] = lease
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}

	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held || info.Limit != 3 || info.Shared || len(info.Holders) != 3 {
		t.Fatalf("Inspect = %+v, %v; want 3 holders of limit 3", info, err)
	}
	for i, h := range info.Holders {
		if h.Slot != i || h.Token != leases[i].Token() || h.ExpiresIn <= 0 || h.ExpiresIn > time.Minute {
			t.Errorf("holder %d = %+v; want slot %d token %d with time left", i, h, i, leases[i].Token())
		}
	}
	if info.Token != leases[1].Token() || info.LastToken != leases[1].Token() || info.Owner != "" {
		t.Errorf("Inspect token %d owner %q last %d; want the highest, %d, with no owner", info.Token, info.Owner, info.LastToken, leases[1].Token())
	}
	if info.Holders[0].Owner != "w 0" || info.Holders[2].Owner != "w 2" {
		t.Errorf("holders' owners = %q, %q; want %q, %q", info.Holders[0].Owner, info.Holders[2].Owner, "w 0", "w 2")
	}
	for _, lease := range leases {
		release(t, ctx, lease)
	}
	if info, err := l.Inspect(ctx, name); err != nil || info.Held || info.Holders != nil {
		t.Fatalf("Inspect after the releases = %+v, %v; want free", info, err)
	}
	// Free, the name takes any kind again.
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute))
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2)))
}

// A permit whose lease expired stays in the holders hash until the next acquire,
// which gives its slot to a new holder and prunes it; the expired holder can
// neither renew nor release, and is not listed.
func TestLocker_Semaphore_ExpiredHolderInTheHash(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	short := mustAcquire(t, ctx, l, name, 50*time.Millisecond, fence.WithLimit(2))
	long := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	waitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if info, err := l.Inspect(ctx, name); err != nil || len(info.Holders) != 1 {
			return fmt.Errorf("Inspect = %+v, %v; want the long permit alone once the short one expired", info, err)
		}
		return nil
	})
	if n, err := c.HLen(ctx, k.holders).Result(); err != nil || n != 3 { // two leases and ' limit'
		t.Fatalf("holders hash has %d fields, %v; want the expired lease still in it", n, err)
	}
	if n, err := c.ZCard(ctx, k.expiry).Result(); err != nil || n != 2 {
		t.Fatalf("expiry set has %d members, %v; want the expired lease still in it", n, err)
	}
	if err := l.Renew(ctx, name, short.ID(), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of the expired permit = %v; want ErrNotHeld", err)
	}
	if err := l.Release(ctx, name, short.ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release of the expired permit = %v; want ErrNotHeld", err)
	}
	next := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	if next.Slot() != short.Slot() || next.Token() <= long.Token() {
		t.Fatalf("next permit: slot %d token %d; want the expired slot %d and a token above %d", next.Slot(), next.Token(), short.Slot(), long.Token())
	}
	fields, err := c.HKeys(ctx, k.holders).Result()
	if err != nil || len(fields) != 3 || strings.Contains(strings.Join(fields, ","), short.ID()) {
		t.Fatalf("holders fields = %q, %v; want the expired lease pruned", fields, err)
	}
	if ids, err := c.ZRange(ctx, k.expiry, 0, -1).Result(); err != nil || len(ids) != 2 || slices.Contains(ids, short.ID()) {
		t.Fatalf("expiry set = %q, %v; want the expired lease pruned", ids, err)
	}
	if bits, err := c.BitCount(ctx, k.slots, nil).Result(); err != nil || bits != 2 {
		t.Fatalf("slots taken = %d, %v; want 2", bits, err)
	}
	// The lock key and the hash expire no earlier than the last permit.
	for _, key := range k.leaseKeys() {
		if pttl, err := c.PTTL(ctx, key).Result(); err != nil || pttl < 59*time.Second {
			t.Errorf("PTTL %s = %v, %v; want about a minute", key, pttl, err)
		}
	}
}

// Renewing a permit past the others' expiry keeps the name held for a lock
// acquire, which reads only the lock key, until the renewed lease's end.
func TestLocker_Semaphore_RenewExtendsTheMarker(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	a := mustAcquire(t, ctx, l, name, 2*time.Second, fence.WithLimit(2))
	if err := a.Renew(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if pttl, err := c.PTTL(ctx, l.keysFor(name).lock).Result(); err != nil || pttl < 59*time.Second {
		t.Fatalf("lock key PTTL after the renewal = %v, %v; want about a minute", pttl, err)
	}
	_, err := l.Acquire(ctx, name, time.Minute)
	limitError(t, err)
	info, err := l.Inspect(ctx, name)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].ExpiresIn < 59*time.Second {
		t.Fatalf("Inspect = %+v, %v; want one holder with about a minute left", info, err)
	}
}

// A lock and a semaphore refuse each other's limits; a lock and shared leases
// are held by each other.
func TestLocker_Kinds_LockVersusOthers(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	lock := mustAcquire(t, ctx, l, name, time.Minute)
	_, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(4))
	if le := limitError(t, err); le.Held != 1 || le.Limit != 4 {
		t.Fatalf("LimitError = %+v; want Held 1, Limit 4", le)
	}
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); lease != nil {
		t.Fatal("shared lease granted while a lock is held")
	}
	release(t, ctx, lock)

	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	if lease := tryAcquire(t, ctx, l, name, time.Minute); lease != nil {
		t.Fatal("lock granted while a shared lease is held")
	}
	_, err = l.Acquire(ctx, name, time.Minute, fence.WithLimit(2))
	if le := limitError(t, err); le.Held != 1 || le.Limit != 2 {
		t.Fatalf("LimitError = %+v; want Held 1, Limit 2", le)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Shared || info.Limit != 0 || len(info.Holders) != 1 || info.Holders[0].Token != r.Token() {
		t.Fatalf("Inspect = %+v, %v; want one shared holder", info, err)
	}
	release(t, ctx, r)
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute))
}

// fence.MaxLimit shared holders at once, and not one more until one leaves; an
// exclusive acquire waits for all of them.
func TestLocker_Shared_MaxLimitHolders(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	leases := fill(t, ctx, l, name, fence.MaxLimit, fence.WithShared())
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); lease != nil {
		t.Fatalf("shared lease %d granted; want at most %d", fence.MaxLimit+1, fence.MaxLimit)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil || len(info.Holders) != fence.MaxLimit || info.Token != leases[len(leases)-1].Token() {
		t.Fatalf("Inspect: %d holders, token %d, %v; want %d, %d", len(info.Holders), info.Token, err, fence.MaxLimit, leases[len(leases)-1].Token())
	}
	release(t, ctx, leases[0])
	leases[0] = mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	if lease := tryAcquire(t, ctx, l, name, time.Minute); lease != nil {
		t.Fatal("lock granted while shared leases are held")
	}
	for _, lease := range leases {
		release(t, ctx, lease)
	}
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute))
}

// A semaphore of fence.MaxLimit permits hands out every slot once, and a freed
// slot in the middle is the next one taken.
func TestLocker_Semaphore_MaxLimitSlots(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	leases := fill(t, ctx, l, name, fence.MaxLimit, fence.WithLimit(fence.MaxLimit))
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(fence.MaxLimit)); lease != nil {
		t.Fatalf("permit %d of %d granted", fence.MaxLimit+1, fence.MaxLimit)
	}
	release(t, ctx, leases[500])
	if lease := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(fence.MaxLimit)); lease.Slot() != 500 {
		t.Fatalf("after slot 500 was released the next permit got slot %d", lease.Slot())
	}
}

// A waiting exclusive acquire holds off new shared acquires, also after the last
// shared holder left and before the writer's next try, and takes the lock; its
// grant clears the record, so a reader gets in at once after its release.
func TestLocker_Shared_WriterPreferred(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	r1 := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	w := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Minute, fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		w <- lease
	}()
	waitSubscribers(t, c, l, name, 1)
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); lease != nil {
		t.Fatal("a reader got in with a writer waiting")
	}
	until, err := c.HGet(ctx, l.keysFor(name).holders, " waiter").Int64()
	if err != nil || until <= 0 {
		t.Fatalf("waiter record = %d, %v; want one", until, err)
	}
	release(t, ctx, r1)
	var lease *fence.Lease
	select {
	case lease = <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer was not woken when the reader left")
	}
	if lease == nil || lease.Token() <= r1.Token() {
		t.Fatalf("writer got %v; want a token above %d", lease, r1.Token())
	}
	if n, err := c.Exists(ctx, l.keysFor(name).holders).Result(); err != nil || n != 0 {
		t.Fatalf("holders hash exists = %d, %v after the writer's grant; want it gone with the record", n, err)
	}
	release(t, ctx, lease)
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared()))
}

// A waiting writer whose TTL is far shorter than the reader's time left (and
// whose poll is an hour) tries again within its record's life, so readers stay
// held off for as long as it waits, not only for its TTL.
func TestLocker_Shared_ShortTTLWriter_RenewsItsRecord(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	const ttl = 300 * time.Millisecond
	w := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, ttl, fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		w <- lease
	}()
	waitSubscribers(t, c, l, name, 1)
	time.Sleep(4 * ttl)
	if lease := tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); lease != nil {
		t.Fatalf("a reader got in %v after a writer of TTL %v started waiting", 4*ttl, ttl)
	}
	release(t, ctx, r)
	select {
	case lease := <-w:
		if lease == nil || lease.Token() <= r.Token() {
			t.Fatalf("writer got %v; want a token above %d", lease, r.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer was not woken when the reader left")
	}
}

// The record of a writer that gave up (its context ended) holds readers off for
// the rest of its TTL, also once no shared lease is live, and then ends.
func TestLocker_Shared_WaiterThatGaveUp_RecordEnds(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	k := l.keysFor(name)
	r := mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	const ttl = time.Second
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := l.Acquire(wctx, name, ttl, fence.WithWait(time.Minute))
	cancel()
	if !errors.Is(err, fence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer's Acquire = %v; want ErrNotAcquired at its context's end", err)
	}
	release(t, ctx, r)
	pttl, err := c.PTTL(ctx, k.lock).Result()
	if left := ttl - time.Since(start); err != nil || pttl <= 0 || pttl > ttl {
		t.Fatalf("lock key PTTL after the last reader left = %v, %v; want the record's rest, about %v", pttl, err, left)
	}
	if info, err := l.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("Inspect = %+v, %v; want free (a record is no lease)", info, err)
	}
	if err := l.Revoke(ctx, name); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Revoke = %v; want ErrNotHeld", err)
	}
	if got := tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); got != nil {
		t.Fatalf("a reader got in %v after the writer started waiting; want no sooner than its TTL, %v", time.Since(start), ttl)
	}
	var got *fence.Lease
	waitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if got = tryAcquire(t, ctx, l, name, time.Minute, fence.WithShared()); got == nil {
			return errors.New("readers still held off 5s after the writer gave up")
		}
		return nil
	})
	if d := time.Since(start); d < ttl {
		t.Fatalf("a reader got in %v after the writer started waiting; want no sooner than its TTL, %v", d, ttl)
	}
	release(t, ctx, got)
	// A lock's grant ends the record at once.
	r = mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared())
	wctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = l.Acquire(wctx, name, time.Minute, fence.WithWait(time.Minute))
	cancel()
	release(t, ctx, r)
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute))
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Minute, fence.WithShared()))
}

// A semaphore grant at the largest token succeeds, the next fails closed with
// ErrTokenExhausted, leaving the counter and the holders as they were.
func TestLocker_Semaphore_FailsClosedAtMaxToken(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	for _, opt := range []fence.AcquireOption{fence.WithLimit(3), fence.WithShared()} {
		name := uniqueName(t)
		k := l.keysFor(name)
		if err := c.Set(ctx, k.token, uint64(fence.MaxToken-1), 0).Err(); err != nil {
			t.Fatal(err)
		}
		lease := mustAcquire(t, ctx, l, name, time.Minute, opt)
		if lease.Token() != fence.MaxToken {
			t.Fatalf("token = %d; want fence.MaxToken", lease.Token())
		}
		_, err := l.Acquire(ctx, name, time.Minute, opt)
		if !errors.Is(err, fence.ErrTokenExhausted) {
			t.Fatalf("Acquire past MaxToken = %v; want ErrTokenExhausted", err)
		}
		if got, err := c.Get(ctx, k.token).Uint64(); err != nil || got != uint64(fence.MaxToken) {
			t.Fatalf("counter = %d, %v; want %d", got, err, fence.MaxToken)
		}
		info, err := l.Inspect(ctx, name)
		if err != nil || len(info.Holders) != 1 || info.Token != fence.MaxToken {
			t.Fatalf("Inspect = %+v, %v; want the one holder at MaxToken", info, err)
		}
		release(t, ctx, lease)
	}
}

// Revoke ends every permit at once: their holders can no longer renew, a waiter is
// woken, and the next token is higher.
func TestLocker_Semaphore_Revoke_EndsEveryPermit(t *testing.T) {
	l, c := newLocker(t, &Options{PollInterval: time.Hour})
	ctx := ctxT(t)
	name := uniqueName(t)
	a := mustAcquire(t, ctx, l, name, time.Hour, fence.WithLimit(2))
	b := mustAcquire(t, ctx, l, name, time.Hour, fence.WithLimit(2))
	got := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, time.Minute, fence.WithLimit(2), fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	waitSubscribers(t, c, l, name, 1)
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*fence.Lease{a, b} {
		if err := l.Renew(ctx, name, p.ID(), time.Hour); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Renew of a revoked permit = %v; want ErrNotHeld", err)
		}
	}
	select {
	case next := <-got:
		if next == nil || next.Token() <= b.Token() || next.Slot() != 0 {
			t.Fatalf("waiter got %v; want slot 0 with a token above %d", next, b.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the revoke")
	}
	if err := l.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, l.keysFor(name).leaseKeys()...).Result(); err != nil || n != 0 {
		t.Fatalf("keys left after Revoke: %d, %v", n, err)
	}
}

// Heal raises the counter under live permits without touching them; after a
// failover that lost the last grants, the guard of a slot's resource refuses the
// regressed token and Heal makes the next permit's token pass.
func TestFailover_Permits_GuardRejects_HealRecovers(t *testing.T) {
	ctx, primary, replica := replicated(t)
	l := lockerAt(t, primary, nil)
	g := inmem.NewGuard()
	const name = "partitions"
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	waitCounter(t, replica, l, name, "1")
	detach(t, replica)
	b := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	resource := "partition-" + strconv.Itoa(b.Slot())
	if err := g.Put(ctx, resource, []byte("acknowledged"), b.Fence()); err != nil {
		t.Fatal(err)
	}

	primary.Kill()
	l2 := lockerAt(t, replica, nil)
	// The promoted replica knows permit a only: the next permit takes b's slot
	// with b's token again.
	again := mustAcquire(t, ctx, l2, name, time.Minute, fence.WithLimit(2))
	if again.Slot() != b.Slot() || again.Token() > b.Token() {
		t.Fatalf("after failover: slot %d token %d; want slot %d with a token at most %d", again.Slot(), again.Token(), b.Slot(), b.Token())
	}
	err := g.Put(ctx, resource, []byte("stale"), again.Fence())
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != b.Token() {
		t.Fatalf("guard on the regressed permit = %v; want a *StaleTokenError with Highest %d", err, b.Token())
	}
	release(t, ctx, again)
	if err := fence.Heal(ctx, l2, name, err); err != nil {
		t.Fatal(err)
	}
	// a's permit is still live on the promoted replica, untouched by Heal.
	if err := l2.Renew(ctx, name, a.ID(), time.Minute); err != nil {
		t.Fatalf("Renew of the permit granted before the failover: %v", err)
	}
	healed := mustAcquire(t, ctx, l2, name, time.Minute, fence.WithLimit(2))
	if healed.Token() != b.Token()+1 || healed.Slot() != b.Slot() {
		t.Fatalf("after Heal: token %d slot %d; want %d in slot %d", healed.Token(), healed.Slot(), b.Token()+1, b.Slot())
	}
	if err := g.Put(ctx, resource, []byte("after heal"), healed.Fence()); err != nil {
		t.Fatalf("write after heal: %v", err)
	}
}

// Rolling upgrade: the scripts of earlier versions see semaphore and shared
// leases as a held lock (they wait, with the right time left, and grant
// nothing), cannot renew or release them, and their Revoke ends them all.
func TestLocker_OldScripts_SeeNewLeasesAsHeld(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	for _, opt := range []fence.AcquireOption{fence.WithLimit(2), fence.WithShared()} {
		name := uniqueName(t)
		k := l.keysFor(name)
		a := mustAcquire(t, ctx, l, name, time.Minute, opt)
		b := mustAcquire(t, ctx, l, name, 30*time.Second, opt)
		id := driver.NewLeaseID()
		for v, res := range map[string]*goredis.Cmd{
			"v1": v1Acquire.Run(ctx, c, []string{k.lock, k.token}, id, 60000, maxTokenArg),
			"v2": v2Acquire.Run(ctx, c, []string{k.lock, k.token}, id, 60000, maxTokenArg, "", k.wake, l.publish),
		} {
			got, err := res.Int64Slice()
			if err != nil || len(got) != 2 || got[0] != 0 || got[1] < 59000 {
				t.Fatalf("%s acquire = %v, %v; want {0, about 60000}: held until the last lease ends", v, got, err)
			}
		}
		for v, res := range map[string]*goredis.Cmd{
			"v1": v1Inspect.Run(ctx, c, []string{k.lock, k.token}),
			"v2": v2Inspect.Run(ctx, c, []string{k.lock, k.token}),
		} {
			got, err := res.Slice()
			if err != nil || got[0] != int64(1) || got[1] != int64(a.Token()) {
				t.Fatalf("%s inspect = %v, %v; want held with the first lease's token, %d", v, got, err, a.Token())
			}
			if v == "v2" && got[4] != "" {
				t.Fatalf("v2 inspect owner = %q; want none", got[4])
			}
		}
		for _, lease := range []*fence.Lease{a, b} {
			for _, op := range [][]any{{lease.ID(), "renew", 1}, {lease.ID(), "release", k.wake, l.publish}, {" ", "release", k.wake, l.publish}} {
				if n, err := v2Lease.Run(ctx, c, []string{k.lock}, op...).Int64(); err != nil || n != 0 {
					t.Fatalf("v2 lease %v = %d, %v; want 0 (not its lease)", op[1:2], n, err)
				}
			}
		}
		if info, err := l.Inspect(ctx, name); err != nil || len(info.Holders) != 2 {
			t.Fatalf("Inspect after the old scripts = %+v, %v; want both leases", info, err)
		}
		if n, err := v2Revoke.Run(ctx, c, []string{k.lock}, k.wake, l.publish).Int64(); err != nil || n != 1 {
			t.Fatalf("v2 revoke = %d, %v; want 1", n, err)
		}
		// The hash is left behind, but means nothing without the marker.
		if err := l.Renew(ctx, name, a.ID(), time.Minute); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("Renew after an old Revoke = %v; want ErrNotHeld", err)
		}
		if info, err := l.Inspect(ctx, name); err != nil || info.Held {
			t.Fatalf("Inspect after an old Revoke = %+v, %v; want free", info, err)
		}
		next := mustAcquire(t, ctx, l, name, time.Minute, opt)
		if next.Slot() != 0 || next.Token() <= b.Token() {
			t.Fatalf("after an old Revoke: slot %d token %d; want slot 0 above %d", next.Slot(), next.Token(), b.Token())
		}
		if info, err := l.Inspect(ctx, name); err != nil || len(info.Holders) != 1 {
			t.Fatalf("Inspect = %+v, %v; want only the new lease (the old hash dropped)", info, err)
		}
		release(t, ctx, next)
	}
}

// A semaphore acquire and a release are one command each, as a lock's are.
func TestLocker_Semaphore_OneCommandPerGrant(t *testing.T) {
	l, c := newLocker(t, nil)
	ctx := ctxT(t)
	name := uniqueName(t)
	release(t, ctx, mustAcquire(t, ctx, l, name, time.Second, fence.WithLimit(2))) // warm the script cache
	h := &countHook{}
	c.AddHook(h)
	lease := mustAcquire(t, ctx, l, name, time.Second, fence.WithLimit(2))
	release(t, ctx, lease)
	if got := h.n.Load(); got != 2 {
		t.Errorf("acquire+release of a permit sent %d commands, want 2", got)
	}
}

// Watch sees each grant of a semaphore and its end once the last permit is
// released.
func TestLocker_Semaphore_Watch(t *testing.T) {
	l, _ := newLocker(t, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	name := uniqueName(t)
	states := make(chan fence.LockInfo, 16)
	go func() {
		for info, err := range l.Watch(ctx, name) {
			if err == nil {
				states <- info
			}
		}
	}()
	await := func(what string, ok func(fence.LockInfo) bool) {
		t.Helper()
		for {
			select {
			case info := <-states:
				if ok(info) {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the watcher did not see %s", what)
			}
		}
	}
	await("the first state", func(fence.LockInfo) bool { return true })
	a := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	await("the first permit", func(i fence.LockInfo) bool { return len(i.Holders) == 1 && i.Limit == 2 })
	b := mustAcquire(t, ctx, l, name, time.Minute, fence.WithLimit(2))
	await("the second permit", func(i fence.LockInfo) bool { return len(i.Holders) == 2 })
	release(t, ctx, a)
	release(t, ctx, b)
	await("the end of the last permit", func(i fence.LockInfo) bool { return !i.Held })
}
