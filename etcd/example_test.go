package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/etcd"
)

// A worker takes a lock and writes to the fenced store with its lease's fence. It
// pauses past its TTL; the next worker gets the lock with a higher token and writes;
// the paused worker's late write is refused with the highest token seen.
func Example() {
	ctx := context.Background()
	store, err := etcd.Open(ctx, srv.Endpoints, &etcd.Options{Prefix: "example/" + driver.NewLeaseID()[:8] + "/"})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	a, err := store.Acquire(ctx, "reconcile", time.Second) // etcd leases count whole seconds
	if err != nil {
		panic(err)
	}
	fmt.Println("A writes:", store.Put(ctx, "ledger", []byte("A"), a.Fence()))
	<-a.Done() // A pauses past its TTL
	fmt.Println("A's lease:", a.Err())

	b, err := store.Acquire(ctx, "reconcile", 10*time.Second, fence.WithWait(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer b.Release(ctx)
	fmt.Println("B's token is higher:", b.Token() > a.Token())
	fmt.Println("B writes:", store.Put(ctx, "ledger", []byte("B"), b.Fence()))

	err = store.Put(ctx, "ledger", []byte("A, late"), a.Fence())
	var stale *fence.StaleTokenError
	fmt.Println("A's late write refused:", errors.As(err, &stale) && stale.Highest == b.Token())
	it, _ := store.Get(ctx, "ledger")
	fmt.Printf("ledger: %s\n", it.Value)
	// Output:
	// A writes: <nil>
	// A's lease: fence: lease not held: expired before it was renewed
	// B's token is higher: true
	// B writes: <nil>
	// A's late write refused: true
	// ledger: B
}

// A waiter blocks until the holder releases; the handoff is driven by an etcd watch.
func ExampleLocker_Acquire_wait() {
	ctx := context.Background()
	cli := exampleClient()
	defer cli.Close()
	locker := etcd.NewLocker(cli, &etcd.Options{Prefix: "example/" + driver.NewLeaseID()[:8] + "/"})
	defer locker.Close()

	holder, err := locker.Acquire(ctx, "job", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = locker.Acquire(ctx, "job", 10*time.Second) // tries once by default
	fmt.Println("held:", errors.Is(err, fence.ErrNotAcquired))

	got := make(chan *fence.Lease)
	go func() {
		l, err := locker.Acquire(ctx, "job", 10*time.Second, fence.WithWait(time.Minute))
		if err != nil {
			panic(err)
		}
		got <- l
	}()
	if err := holder.Release(ctx); err != nil {
		panic(err)
	}
	next := <-got
	fmt.Println("next token is higher:", next.Token() > holder.Token())
	fmt.Println("release:", next.Release(ctx))
	// Output:
	// held: true
	// next token is higher: true
	// release: <nil>
}
