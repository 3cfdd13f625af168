package zookeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
)

// The guard suite with fences drawn from the Store's grants, and the P9 suite.
func TestStore_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return openStore(t, nil) }, fencetest.WithGuardAsIssuer())
}

func TestStore_IssuedKV(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return openStore(t, nil) })
}

// A waiter's node has a czxid, the token it will be granted: a fence with it is
// refused while it waits (the bound is the holder's token), admitted once granted.
func TestStore_Issued_WaitersTokenNotYetIssued(t *testing.T) {
	s := openStore(t, nil)
	ctx := testCtx(t)
	name := "waiter-" + driver.NewLeaseID()[:8]
	holder, err := s.Acquire(ctx, name, 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	t.Cleanup(func() { _ = holder.Release(context.Background()) })
	type result struct {
		l   *fence.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := s.Acquire(ctx, name, 30*time.Second, fence.WithWait(fence.WaitForever))
		got <- result{l, err}
	}()
	// The waiter's node: the one in the directory that is not the holder's.
	conn := rawConn(t)
	dir := "/fence/locks/" + name
	var waiter int64
	for waiter == 0 {
		kids, _, err := conn.Children(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			_, st, err := conn.Get(dir + "/" + k)
			if err == nil && st.Czxid != int64(holder.Token()) && strings.HasPrefix(k, "n-") {
				waiter = st.Czxid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	key := "waiter-key-" + driver.NewLeaseID()[:8]
	f := fence.Fence{Name: name, Token: fence.Token(waiter)}
	var ue *fence.UnissuedTokenError
	if err := s.Put(ctx, key, []byte("early"), f); !errors.As(err, &ue) || ue.Token != f.Token || ue.Last != holder.Token() || ue.OtherLease {
		t.Fatalf("Put with the waiter's token = %v, want *fence.UnissuedTokenError{Token: %d, Last: %d}", err, f.Token, holder.Token())
	}
	if it, err := s.Get(ctx, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(%q) after the refused Put = %+v, %v, want fence.ErrNotFound", key, it, err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter's Acquire = %v", r.err)
	}
	defer r.l.Release(context.Background())
	if r.l.Token() != fence.Token(waiter) {
		t.Fatalf("waiter granted token %d, its node's czxid is %d", r.l.Token(), waiter)
	}
	if err := s.Put(ctx, key, []byte("granted"), r.l.Fence()); err != nil {
		t.Fatalf("Put once granted = %v", err)
	}
}
