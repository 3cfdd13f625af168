package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// The main flow over HTTP: take a lock, write with its fence, and see a stale
// holder's write refused with the highest token seen.
func Example() {
	srv, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard()})
	if err != nil {
		log.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	c, err := fencehttp.NewClient(hs.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	a, err := c.Acquire(ctx, "ledger", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A holds token", a.Token())
	_ = a.Release(ctx) // as if A paused past its TTL

	b, err := c.Acquire(ctx, "ledger", 30*time.Second, fence.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B holds token", b.Token())
	fmt.Println("B writes:", c.Put(ctx, "balance", []byte("100"), b.Fence()))

	err = c.Put(ctx, "balance", []byte("90"), a.Fence()) // A wakes up and writes
	fmt.Println("A writes:", err)
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("highest seen:", stale.Highest)
	}
	item, _ := c.Get(ctx, "balance")
	fmt.Printf("balance: %s (token %d)\n", item.Value, item.Fence.Token)
	// Output:
	// A holds token 1
	// B holds token 2
	// B writes: <nil>
	// A writes: put "balance": stale token 1, highest seen 2
	// highest seen: 2
	// balance: 100 (token 2)
}

// A server over any Locker and KV, mounted on an http.Server, with bearer tokens.
// `fence serve` does this with the embedded bolt store.
func ExampleNewServer() {
	store := inmem.NewGuard()
	srv, err := fencehttp.NewServer(fencehttp.Config{
		Locker:     inmem.NewLocker(inmem.Options{}),
		KV:         store,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
		AuthTokens: [][]byte{[]byte("a-long-random-secret")},
	})
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Addr: "127.0.0.1:7420", Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	_ = hs // hs.ListenAndServe(); on SIGTERM: srv.Drain(), then hs.Shutdown(ctx)
}

// A lease over HTTP renews itself and says when it is lost.
func ExampleClient_Acquire() {
	srv, _ := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c, _ := fencehttp.NewClient(hs.URL, &fencehttp.ClientOptions{AuthToken: os.Getenv("FENCE_AUTH_TOKEN")})

	lease, err := c.Acquire(context.Background(), "jobs/nightly", 3*time.Second, fence.WithWait(time.Minute), fence.WithAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	fmt.Println(lease.Name(), "token", lease.Token())
	select {
	case <-lease.Done(): // renewals failed until the deadline, or the lease was taken
		fmt.Println("lost:", lease.Err())
	default:
		fmt.Println("held")
	}
	// Output:
	// jobs/nightly token 1
	// held
}

// A semaphore over HTTP: each permit has a slot and a token of the name's one
// counter, so a resource per slot is fenced as a lock's resource is; a paused
// holder of slot 1 is refused once the next holder of slot 1 has written.
func ExampleClient_Acquire_semaphore() {
	srv, _ := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard()})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c, _ := fencehttp.NewClient(hs.URL, nil)
	ctx := context.Background()

	var permits []*fence.Lease
	for range 2 {
		p, err := c.Acquire(ctx, "uploaders", time.Minute, fence.WithLimit(2))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("slot %d, token %d\n", p.Slot(), p.Token())
		permits = append(permits, p)
	}
	_, err := fence.TryAcquire(ctx, c, "uploaders", time.Minute, fence.WithLimit(2))
	fmt.Println(errors.Is(err, fence.ErrNotAcquired))

	stale := permits[1]
	_ = stale.Release(ctx) // as if it paused past its TTL
	next, err := c.Acquire(ctx, "uploaders", time.Minute, fence.WithLimit(2))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("slot %d, token %d\n", next.Slot(), next.Token())
	key := fmt.Sprintf("partition-%d", next.Slot())
	fmt.Println("next writes:", c.Put(ctx, key, []byte("b"), next.Fence()))
	fmt.Println("stale writes:", c.Put(ctx, key, []byte("a"), stale.Fence()))
	// Output:
	// slot 0, token 1
	// slot 1, token 2
	// true
	// slot 1, token 3
	// next writes: <nil>
	// stale writes: put "partition-1": stale token 2, highest seen 3
}
