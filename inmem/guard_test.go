package inmem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

func TestGuard_Do_StaleFenceNeverRunsWrite(t *testing.T) {
	g := inmem.NewGuard()
	ctx := context.Background()
	hi := fence.Fence{Name: "job", Token: 5, LeaseID: "lease-5"}
	lo := fence.Fence{Name: "job", Token: 4, LeaseID: "lease-4"}
	if err := g.Do(ctx, "file", hi, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := g.Do(ctx, "file", lo, func() error { ran = true; return nil })
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != 5 {
		t.Fatalf("Do with token 4 after 5 = %v, want *StaleTokenError with Highest 5", err)
	}
	if ran {
		t.Fatal("Do ran the write of a stale fence")
	}
}

func TestGuard_Do_FailedWriteDoesNotRecordFence(t *testing.T) {
	g := inmem.NewGuard()
	ctx := context.Background()
	boom := errors.New("disk full")
	f7 := fence.Fence{Name: "job", Token: 7, LeaseID: "l7"}
	if err := g.Do(ctx, "file", f7, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do with a failing write = %v, want it to wrap %v", err, boom)
	}
	if _, ok, _ := g.Highest("file"); ok {
		t.Fatal("a failed write recorded its fence")
	}
	// A lower token is still admitted, since 7 never took effect.
	if err := g.Do(ctx, "file", fence.Fence{Name: "job", Token: 6, LeaseID: "l6"}, func() error { return nil }); err != nil {
		t.Fatalf("Do with token 6 after failed 7 = %v, want nil", err)
	}
	if err := g.Do(ctx, "file", f7, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Do with nil write = %v, want ErrInvalid", err)
	}
}

func TestGuard_PutGet_ValueCopied(t *testing.T) {
	g := inmem.NewGuard()
	ctx := context.Background()
	buf := []byte("abc")
	f := fence.Fence{Name: "job", Token: 1, LeaseID: "l1"}
	if err := g.Put(ctx, "k", buf, f); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	it, err := g.Get(ctx, "k")
	if err != nil || string(it.Value) != "abc" || it.Fence != f {
		t.Fatalf("Get = %q %+v %v; want \"abc\" %+v nil", it.Value, it.Fence, err, f)
	}
	it.Value[0] = 'Y'
	it2, _ := g.Get(ctx, "k")
	if string(it2.Value) != "abc" {
		t.Fatalf("Get after mutating a returned value = %q, want \"abc\"", it2.Value)
	}
	if err := g.Put(ctx, "big", make([]byte, inmem.MaxValueLen+1), fence.Fence{Name: "job", Token: 2}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put of MaxValueLen+1 bytes = %v, want ErrInvalid", err)
	}
}
