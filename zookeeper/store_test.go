package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/zookeeper"
)

func TestStore_Close_LaterCallsErrClosed(t *testing.T) {
	s := openStore(t, nil)
	ctx := testCtx(t)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v; want nil", err)
	}
	f := fence.Fence{Name: t.Name(), Token: 1, LeaseID: driver.NewLeaseID()}
	if err := s.Put(ctx, "k", []byte("v"), f); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Put after Close = %v; want fence.ErrClosed", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Get after Close = %v; want fence.ErrClosed", err)
	}
	if _, err := s.Acquire(ctx, t.Name(), time.Second); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Acquire after Close = %v; want fence.ErrClosed", err)
	}
}

// A Store serves locks and fenced data from one connection: the lease's fence
// writes, and a stale one is refused. (Not run by go test, it needs a server on the
// default port; TestStore_Flow runs the same flow on the test server.)
func ExampleOpenStore() {
	ctx := context.Background()
	s, err := zookeeper.OpenStore([]string{"127.0.0.1:2181"}, &zookeeper.Options{Root: "/example-store/locks"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	first, err := s.Acquire(ctx, "payments", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	old := first.Fence() // a paused holder's fence
	_ = first.Release(ctx)
	a, err := s.Acquire(ctx, "payments", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Release(ctx)
	fmt.Println("A writes:", s.Put(ctx, "ledger", []byte("A"), a.Fence()))
	err = s.Put(ctx, "ledger", []byte("old"), old)
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStaleToken))
	it, _ := s.Get(ctx, "ledger")
	fmt.Printf("ledger = %q\n", it.Value)
}

func TestStore_Flow_LeaseFenceWritesStaleRefused(t *testing.T) {
	s := openStore(t, nil)
	ctx := testCtx(t)
	// An earlier grant's fence is the stale one: the Store refuses tokens it never
	// issued, or issued to another lease.
	first, err := s.Acquire(ctx, t.Name(), 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v; want a lease", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, t.Name(), 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v; want a lease", err)
	}
	defer a.Release(ctx)
	if err := s.Put(ctx, t.Name(), []byte("A"), a.Fence()); err != nil {
		t.Fatalf("Put with the lease's fence = %v; want nil", err)
	}
	old := first.Fence()
	var stale *fence.StaleTokenError
	if err := s.Put(ctx, t.Name(), []byte("old"), old); !errors.As(err, &stale) || stale.Highest != a.Token() {
		t.Fatalf("Put with token %d = %v; want a stale-token error with highest %d", old.Token, err, a.Token())
	}
	it, err := s.Get(ctx, t.Name())
	if err != nil || string(it.Value) != "A" || it.Fence != a.Fence() {
		t.Fatalf("Get = %q %v, %v; want \"A\" %v", it.Value, it.Fence, err, a.Fence())
	}
}
