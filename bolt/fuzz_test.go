package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
)

// Fuzz targets of the bytes the store reads back from disk: its lock and KV
// records and a whole file. Each runs its seeds as a test; a longer run of one:
//
//	go test ./bolt -run '^$' -fuzz '^FuzzDecodeLock$' -fuzztime 5m

// smallStore makes a real store file in dir with a lock, a lock with an owner,
// semaphore permits, shared leases and KV keys (with a value, an empty one and
// only fenced), closes it and returns the file's bytes.
func smallStore(tb testing.TB, dir string) []byte {
	tb.Helper()
	path := filepath.Join(dir, "fence.db")
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	acquire := func(name string, opts ...fence.AcquireOption) *fence.Lease {
		l, err := s.Acquire(ctx, name, time.Hour, opts...)
		if err != nil {
			tb.Fatalf("Acquire(%q): %v", name, err)
		}
		return l
	}
	l := acquire("lock")
	acquire("owned", fence.WithOwner("worker-1 ünï"))
	acquire("pool", fence.WithLimit(3), fence.WithOwner("p1"))
	acquire("pool", fence.WithLimit(3))
	acquire("readers", fence.WithShared(), fence.WithOwner("r1"))
	acquire("readers", fence.WithShared())
	done := acquire("done")
	if err := done.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	for key, v := range map[string][]byte{"k/value": []byte("v\x00\xff"), "k/empty": {}} {
		if err := s.Put(ctx, key, v, l.Fence()); err != nil {
			tb.Fatal(err)
		}
	}
	// A fence without a lease id: the token of a lease that ended (a live one's
	// is refused without its lease).
	if err := s.Fence(ctx, "k/fenced", fence.Fence{Name: "done", Token: done.Token()}); err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// storedRecords returns the values of bucket in the store file at path.
func storedRecords(tb testing.TB, path string, bucket []byte) [][]byte {
	tb.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var out [][]byte
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, v []byte) error {
			out = append(out, bytes.Clone(v))
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// seedStore adds the records of bucket of a real small store to f.
func seedRecords(f *testing.F, bucket []byte) {
	dir := f.TempDir()
	smallStore(f, dir)
	recs := storedRecords(f, filepath.Join(dir, "fence.db"), bucket)
	if len(recs) < 3 {
		f.Fatalf("%d records in %s, want several", len(recs), bucket)
	}
	for _, v := range recs {
		f.Add(v)
	}
}

// encodeFields encodes a decoded lock record with the store's own encoder: an
// entry whose leases are live (in the heap) with the record's expiries.
func encodeFields(r lockFields) []byte {
	var s Store // wall0 0: a lease's expiry in lease time is its wall expiry
	e := newEntry("x", r.last)
	e.limit, e.shared = int16(r.limit), r.shared
	for i, f := range r.holds {
		h := &e.h
		if i > 0 {
			h = &hold{e: e}
			if e.x == nil {
				e.x = &extra{}
			}
			e.x.holds = append(e.x.holds, h)
		}
		h.id, h.token, h.slot, h.expires, h.hidx = f.id, f.token, int32(f.slot), f.wallExp, 0
		h.setOwner(f.owner, "")
	}
	return s.encodeLock(e)
}

// FuzzDecodeLock: a lock record either decodes, and then encodes back to the
// same bytes (nothing is dropped or invented), or is refused with ErrCorrupt.
func FuzzDecodeLock(f *testing.F) {
	seedRecords(f, bucketLocks)
	f.Add([]byte{})
	f.Add([]byte{flagLease | flagOwner})
	f.Add(encodeFields(lockFields{last: 7, limit: 2, holds: []holdFields{{token: 7, slot: 1}, {token: 3}}}))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeLock(v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeLock(%x): %v, want ErrCorrupt", v, err)
			}
			return
		}
		if len(r.holds) > 1 && r.limit == 0 && !r.shared {
			t.Fatalf("decodeLock(%x): a lock with %d leases", v, len(r.holds))
		}
		if got := encodeFields(r); !bytes.Equal(got, v) {
			t.Fatalf("decodeLock(%x) = %+v, which encodes as %x", v, r, got)
		}
	})
}

// FuzzDecodeKV: a KV record either decodes, and then encodes back to the same
// bytes, or is refused with ErrCorrupt.
func FuzzDecodeKV(f *testing.F) {
	seedRecords(f, bucketKV)
	f.Add([]byte{flagValue, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{flagValue | flagAttempts, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 1, 1, 'l', 2, 1, 'a', 2, 'b', 'c', 'v'})
	f.Fuzz(func(t *testing.T, v []byte) {
		it, attempts, hasValue, err := decodeKVRecord(v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeKVRecord(%x): %v, want ErrCorrupt", v, err)
			}
			return
		}
		if hasValue != (it.Value != nil) {
			t.Fatalf("decodeKVRecord(%x): hasValue %v with value %q", v, hasValue, it.Value)
		}
		if got := encodeKVRecord(it.Fence, attempts, it.Value, hasValue); !bytes.Equal(got, v) {
			t.Fatalf("decodeKVRecord(%x) = %+v, %q, which encodes as %x", v, it, attempts, got)
		}
	})
}

// applyEdits returns a copy of file with edits applied: edits[0:3] is the length to
// truncate to (0: keep it all), then each 4 bytes are an offset (3 bytes, modulo
// the length) and a value XORed into the byte there. The fuzzer mutates edits,
// not the file, so that its inputs stay small and each one is a few changes of
// a real store file.
func applyEdits(file, edits []byte) []byte {
	b := bytes.Clone(file)
	if len(edits) >= 3 {
		if n := int(edits[0])<<16 | int(edits[1])<<8 | int(edits[2]); n > 0 && n < len(b) {
			b = b[:n]
		}
		edits = edits[3:]
	}
	for ; len(edits) >= 4 && len(b) > 0; edits = edits[4:] {
		off := (int(edits[0])<<16 | int(edits[1])<<8 | int(edits[2])) % len(b)
		b[off] ^= edits[3]
	}
	return b
}

// FuzzOpenCorrupt opens a real small store file with a few bytes changed or cut
// short: Open never panics, crashes or hangs, and either opens cleanly (then
// every read works or fails with ErrCorrupt) or refuses the file with
// ErrCorrupt, or with ErrNotStore when the damage made it another program's or
// another schema's file (a bucket name or the schema version changed), as
// ErrNotStore documents.
func FuzzOpenCorrupt(f *testing.F) {
	seed := smallStore(f, f.TempDir())
	f.Add([]byte{0, 0, 0})
	half := len(seed) / 2
	f.Add([]byte{byte(half >> 16), byte(half >> 8), byte(half)})
	for _, off := range []int{0, 16, 64, 4096 + 16, 2*4096 + 20, 3*4096 + 40, 4*4096 + 60} {
		f.Add([]byte{0, 0, 0, byte(off >> 16), byte(off >> 8), byte(off), 0xff})
	}
	f.Fuzz(func(t *testing.T, edits []byte) {
		// A hang is a failure with every goroutine's stack, not a stalled fuzzer.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				buf := make([]byte, 1<<20)
				panic(fmt.Sprintf("Open and reads of a damaged file take over 10s:\n%s", buf[:runtime.Stack(buf, true)]))
			}
		}()
		data := applyEdits(seed, edits)
		path := filepath.Join(t.TempDir(), "fence.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, &Options{NoSync: true, Timeout: time.Second})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotStore) {
				t.Fatalf("Open of a damaged file: %v, want ErrCorrupt or ErrNotStore", err)
			}
			return
		}
		defer s.Close()
		ctx := context.Background()
		infos, err := s.List(ctx, fence.ListOptions{All: true})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("List: %v", err)
		}
		for _, name := range []string{"lock", "owned", "pool", "readers", "done"} {
			if _, err := s.Inspect(ctx, name); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Inspect(%q): %v", name, err)
			}
		}
		for _, info := range infos {
			if _, err := s.Inspect(ctx, info.Name); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Inspect(%q): %v", info.Name, err)
			}
		}
		for _, key := range []string{"k/value", "k/empty", "k/fenced"} {
			if _, err := s.Get(ctx, key); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, fence.ErrNotFound) {
				t.Fatalf("Get(%q): %v", key, err)
			}
		}
	})
}
