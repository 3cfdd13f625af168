package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/redis"
)

// The main flow: acquire, write to the protected resource with the lease's fence,
// release.
func Example() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	defer client.Close()
	locker, err := redis.NewLocker(client, &redis.Options{Prefix: redis.PrefixForExamples()})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	store := inmem.NewGuard() // any fence.KV or fence.Guard: it enforces the token

	lease, err := locker.Acquire(ctx, "payments", 30*time.Second, fence.WithWait(10*time.Second))
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Release(ctx)
	if err := store.Put(ctx, "balance", []byte("100"), lease.Fence()); err != nil {
		fmt.Println("write refused:", err)
		return
	}
	fmt.Println("wrote balance with token", lease.Token())
	// Output: wrote balance with token 1
}

// A waiter is woken by the release, in about one round trip.
func ExampleLocker_Acquire_wait() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	defer client.Close()
	locker, _ := redis.NewLocker(client, &redis.Options{Prefix: redis.PrefixForExamples()})
	defer locker.Close()

	holder, _ := locker.Acquire(ctx, "report", time.Minute)
	_, err := locker.Acquire(ctx, "report", time.Minute) // tries once
	fmt.Println("second try while held:", errors.Is(err, fence.ErrNotAcquired))

	got := make(chan *fence.Lease)
	go func() {
		lease, err := locker.Acquire(ctx, "report", time.Minute, fence.WithWait(10*time.Second))
		if err != nil {
			panic(err)
		}
		got <- lease
	}()
	// Whether the waiter is already blocked or not, it gets the lock right after
	// the release: it subscribes before each retry, so no release is missed.
	_ = holder.Release(ctx)
	next := <-got
	defer next.Release(ctx)
	fmt.Println("holder token", holder.Token(), "waiter token", next.Token())
	// Output:
	// second try while held: true
	// holder token 1 waiter token 2
}

// After a failover that lost increments, a guard rejects the regressed token; Heal
// with the error raises the counter, and the next grant is accepted.
func ExampleLocker_Heal() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	defer client.Close()
	locker, _ := redis.NewLocker(client, &redis.Options{Prefix: redis.PrefixForExamples()})
	defer locker.Close()
	guard := inmem.NewGuard()
	// Before the failover the guard accepted token 7 of lock "ledger"; the promoted
	// replica's counter (here: a fresh one) is behind.
	_ = guard.Fence(ctx, "ledger-row", fence.Fence{Name: "ledger", Token: 7, LeaseID: driver.NewLeaseID()})

	lease, _ := locker.Acquire(ctx, "ledger", time.Minute)
	err := guard.Put(ctx, "ledger-row", []byte("x"), lease.Fence())
	fmt.Println("token", lease.Token(), "refused:", errors.Is(err, fence.ErrStaleToken))
	_ = lease.Release(ctx)

	if err := fence.Heal(ctx, locker, "ledger", err); err != nil {
		panic(err)
	}
	lease, _ = locker.Acquire(ctx, "ledger", time.Minute)
	defer lease.Release(ctx)
	fmt.Println("token", lease.Token(), "accepted:", guard.Put(ctx, "ledger-row", []byte("x"), lease.Fence()) == nil)
	// Output:
	// token 1 refused: true
	// token 8 accepted: true
}
