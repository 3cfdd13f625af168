package inmem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

// A paused holder's lease expires, the next holder gets a higher token and fences
// the resource, and the paused holder's late write is rejected.
func Example() {
	ctx := context.Background()
	clock := inmem.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker := inmem.NewLocker(inmem.Options{Clock: clock})
	store := inmem.NewGuard()

	a, _ := locker.Acquire(ctx, "invoices", 30*time.Second)
	_ = store.Put(ctx, "invoice/42", []byte("draft by A"), a.Fence())

	clock.Advance(31 * time.Second) // A pauses past its TTL
	<-a.Done()
	fmt.Println("A's lease:", a.Err())

	b, _ := locker.Acquire(ctx, "invoices", 30*time.Second)
	_ = store.Put(ctx, "invoice/42", []byte("paid by B"), b.Fence())

	err := store.Put(ctx, "invoice/42", []byte("overwritten by A"), a.Fence()) // A wakes up
	var stale *fence.StaleTokenError
	fmt.Println("A's late write rejected:", errors.As(err, &stale), "highest:", stale.Highest)

	it, _ := store.Get(ctx, "invoice/42")
	fmt.Printf("stored: %q (token %d)\n", it.Value, it.Fence.Token)
	// Output:
	// A's lease: fence: lease not held: expired before it was renewed
	// A's late write rejected: true highest: 2
	// stored: "paid by B" (token 2)
}

// ManualClock runs callbacks synchronously, in deadline order, inside Advance.
func ExampleManualClock() {
	clock := inmem.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clock.AfterFunc(2*time.Second, func() { fmt.Println("second at", clock.Now().Format(time.TimeOnly)) })
	clock.AfterFunc(time.Second, func() { fmt.Println("first at", clock.Now().Format(time.TimeOnly)) })
	clock.Advance(5 * time.Second)
	fmt.Println("now", clock.Now().Format(time.TimeOnly))
	// Output:
	// first at 00:00:01
	// second at 00:00:02
	// now 00:00:05
}

// Guard.Do fences an in-process write: it runs only if the fence is admitted.
func ExampleGuard_Do() {
	ctx := context.Background()
	locker := inmem.NewLocker(inmem.Options{})
	guard := inmem.NewGuard()
	var ledger []string

	lease, err := locker.Acquire(ctx, "ledger", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	err = guard.Do(ctx, "ledger", lease.Fence(), func() error {
		ledger = append(ledger, "entry 1")
		return nil
	})
	fmt.Println(ledger, err)
	// Output: [entry 1] <nil>
}
