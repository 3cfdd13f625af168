package gate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestGate_Exclusive(t *testing.T) {
	var g Gate
	var mu sync.Mutex
	inside, maxInside := 0, 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				unlock, err := g.Lock(context.Background(), "k")
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				mu.Lock()
				inside++
				maxInside = max(maxInside, inside)
				mu.Unlock()
				time.Sleep(10 * time.Microsecond)
				mu.Lock()
				inside--
				mu.Unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("at most %d holders at once, want 1", maxInside)
	}
	if n := g.Len(); n != 0 {
		t.Fatalf("Len after all unlocked = %d, want 0", n)
	}
}

func TestGate_KeysIndependent(t *testing.T) {
	var g Gate
	ua, err := g.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer ua()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ub, err := g.Lock(ctx, "b")
	if err != nil {
		t.Fatalf("Lock(b) while a is held: %v, want nil", err)
	}
	ub()
}

func TestGate_Cancel(t *testing.T) {
	var g Gate
	unlock, err := g.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held key with a deadline: %v, want DeadlineExceeded", err)
	}
	if n := g.Len(); n != 1 {
		t.Fatalf("Len with one holder after a cancelled waiter = %d, want 1", n)
	}
	unlock()
	if n := g.Len(); n != 0 {
		t.Fatalf("Len after unlock = %d, want 0", n)
	}
}
