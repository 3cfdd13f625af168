package inmem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

func TestLocker_Semaphore_SlotsAndWake(t *testing.T) {
	ctx := context.Background()
	l := inmem.NewLocker(inmem.Options{})
	a, err := l.Acquire(ctx, "s", time.Minute, fence.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, "s", time.Minute, fence.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	if a.Slot() != 0 || b.Slot() != 1 || b.Token() <= a.Token() {
		t.Fatalf("slots %d, %d tokens %d, %d; want 0, 1 and increasing", a.Slot(), b.Slot(), a.Token(), b.Token())
	}
	if _, err := l.Acquire(ctx, "s", time.Minute, fence.WithLimit(2)); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("third permit: %v; want ErrNotAcquired", err)
	}
	var le *fence.LimitError
	if _, err := l.Acquire(ctx, "s", time.Minute, fence.WithLimit(3)); !errors.As(err, &le) || le.Held != 2 || le.Limit != 3 {
		t.Fatalf("limit 3 on a semaphore of 2: %v; want a *fence.LimitError", err)
	}
	got := make(chan *fence.Lease, 1)
	go func() {
		c, err := l.Acquire(ctx, "s", time.Minute, fence.WithLimit(2), fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if c == nil {
			return
		}
		if c.Slot() != 0 || c.Token() <= b.Token() {
			t.Fatalf("waiter got slot %d token %d; want slot 0 above %d", c.Slot(), c.Token(), b.Token())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	info, err := l.Inspect(ctx, "s")
	if err != nil || len(info.Holders) != 2 || info.Limit != 2 {
		t.Fatalf("Inspect = %+v, %v; want two holders of limit 2", info, err)
	}
}

func TestLocker_Shared_WriterPreferred(t *testing.T) {
	ctx := context.Background()
	l := inmem.NewLocker(inmem.Options{})
	r1, err := l.Acquire(ctx, "rw", time.Minute, fence.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire(ctx, "rw", time.Minute, fence.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	w := make(chan *fence.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, "rw", time.Minute, fence.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		w <- lease
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := l.Acquire(ctx, "rw", time.Minute, fence.WithShared())
		if errors.Is(err, fence.ErrNotAcquired) {
			break // the waiting writer holds readers off
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a reader still got in with a writer waiting: %v", err)
		}
		if err := r.Release(ctx); err != nil { // in before the writer waited
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range []*fence.Lease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case lease := <-w:
		if lease != nil && lease.Token() <= r2.Token() {
			t.Fatalf("writer token %d; want above %d", lease.Token(), r2.Token())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not woken when the readers left")
	}
}
