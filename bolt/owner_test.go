package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/inmem"
	bbolt "go.etcd.io/bbolt"
)

// earlierLeaseRecord returns a lock record with a lease as releases before
// owners wrote it, built byte by byte: flags 1, last, token, wall expiry, id.
func earlierLeaseRecord(last, token fence.Token, wallExp int64, id [16]byte) []byte {
	b := []byte{1}
	b = binary.BigEndian.AppendUint64(b, uint64(last))
	b = binary.BigEndian.AppendUint64(b, uint64(token))
	b = binary.BigEndian.AppendUint64(b, uint64(wallExp))
	return append(b, id[:]...)
}

// walGen returns the lease log's generation, once the flusher is between runs
// (it checkpoints after acknowledging a commit).
func walGen(s *Store) uint64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.wal.gen
}

func wantOwner(t *testing.T, s *Store, name string, tok fence.Token, owner string) {
	t.Helper()
	info, err := s.Inspect(context.Background(), name)
	if err != nil || !info.Held || info.Token != tok || info.Owner != owner {
		t.Fatalf("Inspect(%q) = %+v, %v; want held by token %d, owner %q", name, info, err, tok, owner)
	}
	list, err := s.List(context.Background(), fence.ListOptions{Prefix: name, Limit: 1})
	if err != nil || len(list) != 1 || list[0].Owner != owner {
		t.Fatalf("List(%q) = %+v, %v; want owner %q", name, list, err, owner)
	}
}

func TestLockRecord_WithoutOwner_IsTheEarlierLayout(t *testing.T) {
	s := openStore(t, &Options{NoSync: true})
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	e := newEntry("n", 7)
	e.h.id, e.h.token, e.h.expires, e.h.hidx = id, 7, int64(time.Hour), 0
	s.mu.Lock()
	plain := s.encodeLock(e)
	wallExp := s.wallAt(e.h.expires)
	e.h.setOwner("host:42 job ü", "")
	owned := s.encodeLock(e)
	s.mu.Unlock()
	if want := earlierLeaseRecord(7, 7, wallExp, id); !bytes.Equal(plain, want) {
		t.Fatalf("record of a lease without owner = %x; want the earlier layout %x", plain, want)
	}
	r, err := decodeLock(plain)
	want := holdFields{token: 7, wallExp: wallExp, id: id}
	if err != nil || len(r.holds) != 1 || r.holds[0] != want || r.last != 7 || r.limit != 0 || r.shared {
		t.Fatalf("decode of the earlier layout = %+v, %v; want the lease of token 7 without owner", r, err)
	}
	want.owner = e.h.ownerName()
	if r, err = decodeLock(owned); err != nil || len(r.holds) != 1 || r.holds[0] != want {
		t.Fatalf("decode of a record with an owner = %+v, %v; want owner %q", r, err, e.h.ownerName())
	}
	for name, v := range map[string][]byte{
		"length past the end":  owned[:len(owned)-1],
		"length short":         append(owned[:len(owned):len(owned)], 'x'),
		"empty owner":          append(append([]byte{flagLease | flagOwner}, plain[1:]...), 0, 0),
		"unprintable owner":    append(append([]byte{flagLease | flagOwner}, plain[1:]...), 0, 1, '\n'),
		"owner without lease":  append([]byte{flagOwner}, plain[1:9]...),
		"owner flag, no owner": append([]byte{flagLease | flagOwner}, plain[1:]...),
	} {
		if _, err := decodeLock(v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode of a record with %s = %v; want ErrCorrupt", name, err)
		}
	}
}

// A file and a lease log written before owners: their lease records (no owner)
// are restored, held without owner, and their holders renew and release them.
func TestOpen_LeaseRecordsOfEarlierRelease_HeldWithoutOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, &Options{NoSync: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UnixNano()
	inFile, inLog := [16]byte{0xa}, [16]byte{0xb}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketLocks).Put([]byte("in-file"), earlierLeaseRecord(3, 3, exp, inFile)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyCeiling, u64(100))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// Reopen so the file has a log, crash, and append an earlier record to it.
	s = mustOpen(t, path, &Options{NoSync: true})
	s.abandon()
	w, err := openWAL(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.append([]lockRec{{name: "in-log", val: earlierLeaseRecord(4, 4, exp, inLog)}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, &Options{NoSync: true})
	defer s.Close()
	ctx := context.Background()
	for _, l := range []struct {
		name string
		tok  fence.Token
		id   [16]byte
	}{{"in-file", 3, inFile}, {"in-log", 4, inLog}} {
		wantOwner(t, s, l.name, l.tok, "")
		id := hex.EncodeToString(l.id[:])
		if err := s.Renew(ctx, l.name, id, time.Minute); err != nil {
			t.Fatalf("Renew(%q) by the holder of an earlier record: %v", l.name, err)
		}
		if err := s.Release(ctx, l.name, id); err != nil {
			t.Fatalf("Release(%q) by the holder of an earlier record: %v", l.name, err)
		}
	}
}

// The owner survives a crash (from the lease log), a clean close (from the
// bbolt file) and a checkpoint, and goes with the lease.
func TestOwner_KeptAcrossCrashCloseAndCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	o := &Options{NoSync: true}
	s := mustOpen(t, path, o)
	s.setCheckpointAt(512)
	const owner = "worker-7.example:4242 ünïcødé job"
	long := strings.Repeat("o", fence.MaxOwnerLen)
	a := mustAcquire(t, s, "a", time.Hour, fence.WithOwner(owner))
	b := mustAcquire(t, s, "b", time.Hour, fence.WithOwner(long))
	c := mustAcquire(t, s, "c", time.Hour)
	s.abandon()

	s = mustOpen(t, path, o)
	s.setCheckpointAt(512)
	wantOwner(t, s, "a", a.Token(), owner)
	wantOwner(t, s, "b", b.Token(), long)
	wantOwner(t, s, "c", c.Token(), "")
	// Enough traffic to checkpoint: the records are folded into the bbolt file.
	gen := walGen(s)
	for i := 0; i < 20; i++ {
		if err := s.Renew(context.Background(), "a", a.ID(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if walGen(s) == gen {
		t.Fatalf("no checkpoint after 20 renewals with a 512-byte log limit")
	}
	wantOwner(t, s, "a", a.Token(), owner)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, o)
	s.setCheckpointAt(512)
	defer s.Close()
	wantOwner(t, s, "a", a.Token(), owner)
	wantOwner(t, s, "b", b.Token(), long)
	if err := s.Release(context.Background(), "a", a.ID()); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Inspect(context.Background(), "a"); err != nil || info.Held || info.Owner != "" {
		t.Fatalf("Inspect after release = %+v, %v; want free, without owner", info, err)
	}
	d := mustAcquire(t, s, "a", time.Hour) // the next holder names none
	wantOwner(t, s, "a", d.Token(), "")
}

// A revocation is on disk when Revoke returns: after kill -9 the name is free
// at once, and the next token is higher.
func TestRevoke_DurableAcrossCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := mustOpen(t, path, nil)
	ctx := context.Background()
	old := mustAcquire(t, s, "job", time.Hour, fence.WithOwner("me"))
	if err := s.Revoke(ctx, "job"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	s.abandon()

	s = mustOpen(t, path, nil)
	defer s.Close()
	if info, err := s.Inspect(ctx, "job"); err != nil || info.Held || info.Owner != "" || info.LastToken != old.Token() {
		t.Fatalf("Inspect after a revoke and a crash = %+v, %v; want free, last token %d", info, err, old.Token())
	}
	if err := s.Release(ctx, "job", old.ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("the revoked holder's Release after the restart = %v; want ErrNotHeld", err)
	}
	if l := mustAcquire(t, s, "job", time.Minute); l.Token() <= old.Token() {
		t.Fatalf("token %d after the revoke, want above %d", l.Token(), old.Token())
	}
}

func TestRevoke_ExpiredOrClosed_Errors(t *testing.T) {
	clock := inmem.NewManualClock(time.Unix(1_700_000_000, 0))
	s := mustOpen(t, filepath.Join(t.TempDir(), "fence.db"), &Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	mustAcquire(t, s, "job", time.Second)
	clock.Advance(time.Second)
	if err := s.Revoke(ctx, "job"); !errors.Is(err, fence.ErrNotHeld) || err.Error() != `bolt: revoke "job": fence: lease not held` {
		t.Fatalf("Revoke of an expired lease = %v; want ErrNotHeld, worded as the other operations", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, "job"); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("Revoke after Close = %v; want ErrClosed", err)
	}
}
