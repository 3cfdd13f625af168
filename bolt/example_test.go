package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
)

// A holder takes the lock and writes with its fence; a paused predecessor that
// wakes up with an older token is refused by the store, and learns the highest
// token seen.
func Example() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := bolt.Open(filepath.Join(dir, "fence.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	old, err := st.Acquire(ctx, "ledger", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	stale := old.Fence() // the first holder pauses here...
	_ = old.Release(ctx) // ...and its lease ends meanwhile
	lease, err := st.Acquire(ctx, "ledger", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	if err := st.Put(ctx, "ledger/balance", []byte("100"), lease.Fence()); err != nil {
		log.Fatal(err)
	}
	err = st.Put(ctx, "ledger/balance", []byte("0"), stale) // the paused holder wakes
	var se *fence.StaleTokenError
	fmt.Println("stale write refused:", errors.As(err, &se) && se.Highest == lease.Token())

	it, err := st.Get(ctx, "ledger/balance")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("balance %s, fenced by the newer token: %v\n", it.Value, it.Fence.Token == lease.Token())
	// Output:
	// stale write refused: true
	// balance 100, fenced by the newer token: true
}

// Tokens keep increasing across a restart of the store.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence.db")
	ctx := context.Background()

	st, err := bolt.Open(path, nil)
	if err != nil {
		log.Fatal(err)
	}
	before, err := st.Acquire(ctx, "job", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_ = before.Release(ctx)
	if err := st.Close(); err != nil {
		log.Fatal(err)
	}

	st, err = bolt.Open(path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	after, err := st.Acquire(ctx, "job", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token after restart is higher:", after.Token() > before.Token())
	// Output: token after restart is higher: true
}

// A second process (or a second Open) of a file in use gets a clear error after
// Options.Timeout instead of hanging.
func ExampleOpen_locked() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence.db")
	st, err := bolt.Open(path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	_, err = bolt.Open(path, &bolt.Options{Timeout: 10 * time.Millisecond})
	fmt.Println(errors.Is(err, fence.ErrUnavailable))
	// Output: true
}
