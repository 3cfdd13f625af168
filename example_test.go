package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

// The main flow: acquire a lease, write through a guard with its fence, and see a
// paused former holder's write rejected with the highest token seen.
func Example() {
	ctx := context.Background()
	clock := inmem.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker := inmem.NewLocker(inmem.Options{Clock: clock})
	store := inmem.NewGuard() // stands in for the protected resource

	a, err := locker.Acquire(ctx, "payments", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("A holds token", a.Token())
	fmt.Println("A writes:", store.Put(ctx, "batch-7", []byte("A"), a.Fence()))

	clock.Advance(40 * time.Second) // A stalls (GC, VM pause) past its TTL
	fmt.Println("A's lease:", a.Err())

	b, err := locker.Acquire(ctx, "payments", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("B holds token", b.Token())
	fmt.Println("B writes:", store.Put(ctx, "batch-7", []byte("B"), b.Fence()))

	// A wakes up and writes, still believing it holds the lock.
	err = store.Put(ctx, "batch-7", []byte("A again"), a.Fence())
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("A's write rejected, highest token seen:", stale.Highest)
	}
	it, _ := store.Get(ctx, "batch-7")
	fmt.Printf("batch-7 = %q\n", it.Value)
	// Output:
	// A holds token 1
	// A writes: <nil>
	// A's lease: fence: lease not held: expired before it was renewed
	// B holds token 2
	// B writes: <nil>
	// A's write rejected, highest token seen: 2
	// batch-7 = "B"
}

// Acquire waits for a held lock with WithWait, and is woken by the release.
func ExampleWithWait() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{})
	first, _ := locker.Acquire(ctx, "report", time.Minute)

	got := make(chan *fence.Lease)
	go func() {
		next, err := locker.Acquire(ctx, "report", time.Minute, fence.WithWait(30*time.Second))
		if err != nil {
			fmt.Println(err)
		}
		got <- next
	}()
	_ = first.Release(ctx)
	next := <-got
	fmt.Println("next holder's token:", next.Token())
	_ = next.Release(ctx)
	// Output: next holder's token: 2
}

// TryAcquire fails at once on a held lock, with an error matching ErrNotAcquired.
func ExampleTryAcquire() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{})
	held, _ := locker.Acquire(ctx, "report", time.Minute)
	defer held.Release(ctx)

	_, err := fence.TryAcquire(ctx, locker, "report", time.Minute)
	fmt.Println(errors.Is(err, fence.ErrNotAcquired))
	// Output: true
}

// Fence lets a new holder fence off a paused predecessor before its first write.
func ExampleGuard() {
	ctx := context.Background()
	var guard fence.Guard = inmem.NewGuard()
	old := fence.Fence{Name: "payments", Token: 4, LeaseID: "lease-4"}
	cur := fence.Fence{Name: "payments", Token: 5, LeaseID: "lease-5"}

	fmt.Println(guard.Fence(ctx, "ledger", cur))
	fmt.Println(guard.Fence(ctx, "ledger", old))
	// Output:
	// <nil>
	// inmem: fence "ledger": fence: stale token 4 for "ledger", highest seen 5
}

// Heal reports a guard's highest token to a Locker whose counter went backwards
// (a failover that lost increments), so the next grant is above it.
func ExampleHeal() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{})
	guard := inmem.NewGuard()

	a, _ := locker.Acquire(ctx, "payments", time.Minute)
	snap := locker.Snapshot() // the replica that will take over
	_ = a.Release(ctx)
	b, _ := locker.Acquire(ctx, "payments", time.Minute)
	_ = guard.Put(ctx, "ledger", []byte("b"), b.Fence())
	_ = b.Release(ctx)

	locker.Restore(snap) // failover: token 2 and a's release are lost
	_ = a.Release(ctx)   // a retried release on the new primary
	c, _ := locker.Acquire(ctx, "payments", time.Minute)
	err := guard.Put(ctx, "ledger", []byte("c"), c.Fence())
	fmt.Println("token", c.Token(), "rejected:", errors.Is(err, fence.ErrStaleToken))

	_ = fence.Heal(ctx, locker, "payments", err)
	_ = c.Release(ctx)
	d, _ := locker.Acquire(ctx, "payments", time.Minute)
	fmt.Println("after heal: token", d.Token(), "accepted:", guard.Put(ctx, "ledger", []byte("d"), d.Fence()) == nil)
	// Output:
	// token 2 rejected: true
	// after heal: token 3 accepted: true
}

// A regression larger than MaxHealAhead (a store restored from a very old
// backup) is healed in steps, once an operator has checked that the guards'
// highest token is real: each step goes at most MaxHealAhead above the last token
// the refusal reports.
func ExampleHealBoundError() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{})
	a, _ := locker.Acquire(ctx, "payments", time.Minute)
	_ = a.Release(ctx)

	seen := 3*fence.MaxHealAhead + 5 // the guards' highest token, checked
	steps := 0
	for {
		err := locker.Heal(ctx, "payments", seen)
		var b *fence.HealBoundError
		if !errors.As(err, &b) {
			fmt.Println("healed:", err, "after", steps, "steps")
			break
		}
		steps++
		if err := locker.Heal(ctx, "payments", b.Last+fence.MaxHealAhead); err != nil {
			fmt.Println(err)
			return
		}
	}
	c, _ := locker.Acquire(ctx, "payments", time.Minute)
	fmt.Println("next token above seen:", c.Token() > seen)
	// Output:
	// healed: <nil> after 3 steps
	// next token above seen: true
}
