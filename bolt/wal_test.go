package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
)

// crashedStore opens a store at a new path, grants "a" and "b" for an hour, and
// crashes it (no final write, no checkpoint). It returns the path, the leases
// and where the next log record would have gone.
func crashedStore(t *testing.T) (path string, a, b *fence.Lease, off int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	a = mustAcquire(t, s, "a", time.Hour)
	b = mustAcquire(t, s, "b", time.Hour)
	off = s.wal.off
	s.abandon()
	return path, a, b, off
}

func wantHeld(t *testing.T, s *Store, l *fence.Lease) {
	t.Helper()
	info, err := s.Inspect(context.Background(), l.Name())
	if err != nil || !info.Held || info.Token != l.Token() {
		t.Fatalf("Inspect(%q) = %+v, %v; want held by token %d", l.Name(), info, err, l.Token())
	}
}

func TestWAL_TornTail_IgnoredEarlierRecordsKept(t *testing.T) {
	path, a, b, off := crashedStore(t)
	// What a crash in the middle of a write leaves: a record head with a length
	// and a CRC that the bytes after it do not match.
	f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, walRecHead+40)
	binary.BigEndian.PutUint32(junk[0:4], 40)
	binary.BigEndian.PutUint32(junk[4:8], 0xdeadbeef)
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s := mustOpen(t, path, nil)
	defer s.Close()
	wantHeld(t, s, a)
	wantHeld(t, s, b)
	l := mustAcquire(t, s, "c", time.Second)
	if l.Token() <= b.Token() {
		t.Fatalf("token %d after the torn tail, want above %d", l.Token(), b.Token())
	}
}

func TestWAL_Checkpoint_FoldsIntoFileAndRestartsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	s.setCheckpointAt(1024)
	ctx := context.Background()
	gen0 := s.wal.gen
	var last fence.Token
	for i := 0; i < 60; i++ {
		l := mustAcquire(t, s, "n"+string(rune('a'+i%26))+string(rune('a'+i/26)), time.Minute)
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := mustAcquire(t, s, "held", time.Hour)
	s.fmu.Lock() // the flusher checkpoints after it acknowledges a commit
	gen, off := s.wal.gen, s.wal.off
	s.fmu.Unlock()
	if gen == gen0 {
		t.Fatalf("no checkpoint after 60 pairs with a 1 KiB log limit")
	}
	if off > 2048 {
		t.Fatalf("log holds %d bytes, want it restarted by checkpoints (limit 1 KiB)", off)
	}
	s.abandon() // a crash: what the last checkpoint folded is in the bbolt file, the rest in the log

	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var folded int
	_ = db.View(func(tx *bbolt.Tx) error {
		folded = tx.Bucket(bucketLocks).Stats().KeyN
		return nil
	})
	db.Close()
	if folded < 30 {
		t.Fatalf("%d lock records in the bbolt file after checkpoints, want most of the 60", folded)
	}

	s = mustOpen(t, path, nil)
	defer s.Close()
	wantHeld(t, s, held)
	if info, err := s.Inspect(ctx, "nhb"); err != nil || info.LastToken == 0 || info.LastToken > last {
		t.Fatalf("Inspect(nhb) = %+v, %v; want its last token", info, err)
	}
	if l := mustAcquire(t, s, "after", time.Second); l.Token() <= held.Token() {
		t.Fatalf("token %d after reopen, want above %d", l.Token(), held.Token())
	}
}

func TestWAL_MissingAfterCrash_RefusedUntouched(t *testing.T) {
	path, _, _, _ := crashedStore(t)
	if err := os.Remove(path + "-wal"); err != nil {
		t.Fatal(err)
	}
	refusedUntouched(t, path, ErrCorrupt)
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Open created a lease log: %v", err)
	}
}

func TestWAL_BadHeader_RefusedUntouched(t *testing.T) {
	path, _, _, _ := crashedStore(t)
	f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, walHeaderLen), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("notawal!"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, _ := os.ReadFile(path + "-wal")
	refusedUntouched(t, path, ErrCorrupt)
	if after, _ := os.ReadFile(path + "-wal"); string(after) != string(before) {
		t.Fatalf("the refused Open changed the lease log")
	}
}

func TestWAL_CleanClose_FileOpensWithoutLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	held := mustAcquire(t, s, "held", time.Hour)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A copy of the bbolt file alone, as a backup taken after a clean stop.
	if err := os.Remove(path + "-wal"); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, nil)
	defer s.Close()
	wantHeld(t, s, held)
	if l := mustAcquire(t, s, "next", time.Second); l.Token() <= held.Token() {
		t.Fatalf("token %d, want above %d", l.Token(), held.Token())
	}
}

func TestWAL_HeaderCutInReset_PreviousSlotCounts(t *testing.T) {
	path, a, b, _ := crashedStore(t)
	// Open replays the log and resets it, writing the other header slot; cut that
	// write: the slot of the previous generation counts, and the records it
	// covers were folded into the bbolt file by the reopen's commit.
	s := mustOpen(t, path, nil)
	gen := s.wal.gen
	s.abandon()
	f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("torn"), int64(gen%2)*walSlotLen+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = mustOpen(t, path, nil)
	defer s.Close()
	wantHeld(t, s, a)
	wantHeld(t, s, b)
}
