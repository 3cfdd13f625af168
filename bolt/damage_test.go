package bolt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
)

// A file cut short (a copy that stopped, a full disk) is refused with ErrCorrupt.
// bbolt maps the pages its meta page counts, so before checkPages reading one
// past the end of the file killed the process with SIGBUS (found by
// FuzzOpenCorrupt).
func TestOpen_TruncatedFileIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	whole := smallStore(t, dir)
	// Pages at and above the high-water mark are unused: only a cut below it
	// loses pages.
	db, err := bbolt.Open(filepath.Join(dir, "fence.db"), 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var used int
	_ = db.View(func(tx *bbolt.Tx) error { used = int(tx.Size()); return nil })
	db.Close()
	for _, n := range []int{used / 2, used - 4096, used - 1, 3 * 4096} {
		if n <= 2*4096 || n >= used {
			t.Fatalf("cut %d of the %d bytes in use: want a length within the pages", n, used)
		}
		path := filepath.Join(dir, "cut.db")
		if err := os.WriteFile(path, whole[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(path, &Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
			if err == nil {
				s.Close()
			}
			t.Fatalf("Open of the file cut to %d of %d bytes: %v, want ErrCorrupt", n, len(whole), err)
		}
		if got, err := os.ReadFile(path); err != nil || len(got) != n {
			t.Fatalf("the refused file changed: %d bytes, %v", len(got), err)
		}
		os.Remove(path + "-wal")
	}
}

// A lock key that is not a lock name (a damaged key) makes Open fail with
// ErrCorrupt; before, List listed a name that Inspect refused (found by
// FuzzOpenCorrupt).
func TestOpen_DamagedLockKeyIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	smallStore(t, dir)
	path := filepath.Join(dir, "fence.db")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketLocks)
		v := b.Get([]byte("lock"))
		if err := b.Delete([]byte("lock")); err != nil {
			return err
		}
		return b.Put([]byte("lo\x01k"), v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, &Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open with the lock key %q: %v, want ErrCorrupt", "lo\x01k", err)
	}
}

// A KV record without the value flag but with bytes after its lease id (a value
// whose flag was lost) is refused, not read as a key that was only fenced (found
// by FuzzDecodeKV).
func TestDecodeKV_BytesWithoutValueFlagAreCorrupt(t *testing.T) {
	f := fence.Fence{Name: "lock", Token: 3, LeaseID: "l"}
	rec := encodeKV(f, []byte("value"), true)
	rec[0] &^= flagValue
	if it, _, err := decodeKV(rec); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decodeKV of a value without its flag = %+v, %v; want ErrCorrupt", it, err)
	}
	if it, hasValue, err := decodeKV(encodeKV(f, nil, false)); err != nil || hasValue || it.Fence != f {
		t.Fatalf("decodeKV of a fenced-only record = %+v, %v, %v", it, hasValue, err)
	}
}
