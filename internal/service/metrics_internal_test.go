package service

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestHeldSet_CountsNamesWithUnexpiredLeases: the gauge counts a name while any
// of its leases is unexpired, through renewals, releases of the first and of
// other leases, revokes and expiries.
func TestHeldSet_CountsNamesWithUnexpiredLeases(t *testing.T) {
	h := newHeldSet(nil)
	now := time.Now()
	later := now.Add(time.Hour)
	check := func(what string, at time.Time, names, leases int) {
		t.Helper()
		if got := h.count(at); got != names || h.leases != leases {
			t.Fatalf("%s: want %d names and %d leases, got %d and %d", what, names, leases, got, h.leases)
		}
	}
	h.set("sem", "l1", later)
	h.set("sem", "l2", later)
	h.set("sem", "l3", now.Add(time.Minute))
	h.set("lock", "l4", later)
	check("4 leases on 2 names", now, 2, 4)
	h.set("sem", "l1", later.Add(time.Hour)) // a renewal
	h.set("sem", "l3", now.Add(time.Minute))
	check("after renewals", now, 2, 4)
	h.remove("sem", "l1") // the first lease: another takes its place
	check("after the release of the first permit", now, 2, 3)
	h.remove("sem", "l1") // a retried release
	h.remove("none", "l1")
	check("after releases of what is not held", now, 2, 3)
	check("after the expiry of a permit", now.Add(2*time.Minute), 2, 2)
	h.remove("sem", "l2")
	check("after the release of the last permit", now.Add(2*time.Minute), 1, 1)
	h.set("sem", "l5", later)
	h.set("sem", "l6", later)
	h.removeAll("sem")
	check("after a revoke", now, 1, 1)
	check("after the expiry of the lock", later, 0, 0)
}

// BenchmarkHeldSet_Memory reports what a held lock costs the held set, in heap
// bytes a lease (about a map slot: it keeps no names or ids).
func BenchmarkHeldSet_Memory(b *testing.B) {
	const n = 100000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("mem/%d", i)
	}
	id := "0123456789abcdef0123456789abcdef"
	until := time.Now().Add(time.Hour)
	for range b.N {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		h := newHeldSet(nil)
		for _, name := range names {
			h.set(name, id, until)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		runtime.KeepAlive(h)
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, "bytes/lease")
	}
}
