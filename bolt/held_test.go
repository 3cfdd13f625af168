package bolt

import (
	"context"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
)

// HeldLocks counts names, not leases; a name stops counting when its last lease
// ends by release, revocation or expiry (by the store's clock), and the leases a
// restart restores count again.
func TestStore_HeldLocks_CountsNamesThroughEndsAndRestart(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	want := func(what string, n int) {
		t.Helper()
		if got := s.HeldLocks(); got != n {
			t.Fatalf("%s: HeldLocks = %d, want %d", what, got, n)
		}
	}
	want("empty", 0)
	mustAcquire(t, s, "a", time.Minute)
	mustAcquire(t, s, "short", time.Second)
	p1 := mustAcquire(t, s, "sem", time.Minute, fence.WithLimit(3))
	p2 := mustAcquire(t, s, "sem", time.Minute, fence.WithLimit(3))
	want("a lock, a short lock and a semaphore of two permits", 3)
	if _, err := s.Acquire(ctx, "a", time.Minute); err == nil {
		t.Fatal("a second grant of a held lock")
	}
	want("after a refused grant", 3)
	clock.Advance(2 * time.Second)
	want("after the short lease's expiry", 2)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want("after one permit's release", 2)
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want("after the last permit's release", 1)
	mustAcquire(t, s, "b", time.Minute)
	if err := s.Revoke(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	want("after a revocation", 1)
	mustAcquire(t, s, "c", time.Minute)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.HeldLocks(); got != 0 {
		t.Fatalf("after Close: HeldLocks = %d, want 0", got)
	}
	s = mustOpen(t, path, &Options{NoSync: true, Clock: clock})
	defer s.Close()
	want("after a restart, a and c restored", 2)
	clock.Advance(2 * time.Minute)
	want("after their expiry", 0)
}

// The lease table is most of the memory of a store holding many leases: an
// entry (a lock name and its first lease) must stay within the 96-byte size
// class of the Go allocator (BenchmarkServe_HeldLeaseMemory in cmd/fence
// measures what a lease costs in all).
func TestEntry_FitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 96 {
		t.Errorf("entry is %d bytes, want at most 96", n)
	}
}
