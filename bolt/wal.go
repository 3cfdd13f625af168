package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	bbolt "go.etcd.io/bbolt"
)

// The lease log: a file next to the bbolt file (PATH-wal) to which each group
// commit appends the records it writes (lock records and the token ceiling) with
// one write and one fdatasync, where a bbolt commit costs two fsyncs and a copy
// of every page it touches. The records are folded into the bbolt file (a
// checkpoint) when the log passes its limit, at Close, and at Open, which first
// replays the log into the bbolt file.
//
// Layout: two header slots (magic, generation, CRC; a reset writes the one the
// new generation's parity picks, the valid one of higher generation counts), then
// records
//
//	len u32 | crc u32 | generation u64 | payload (len bytes)
//
// with crc the CRC-32C of generation and payload. Payload: kind 1, a lock record
// (name length u16, name, value as in the locks bucket); kind 2, the token
// ceiling (u64). The generation is the header's: a checkpoint commits the folded
// records with the next generation to the bbolt file (meta wal_generation), then
// rewrites the header with it, so records of earlier generations still in the
// file are never read again. Replay stops at the first record that is zero,
// short, of another generation or fails its CRC: the tail of a write that a crash
// cut (never acknowledged: a group commit is acknowledged after its fdatasync).

const (
	walMagic     = "fencewal"
	walSlotLen   = 32             // one header: magic, generation, CRC
	walHeaderLen = 2 * walSlotLen // two header slots, written in turn
	walRecHead   = 16             // len, crc, generation
	walGrow      = 4 << 20
	// walLimit is the log size past which the flusher checkpoints.
	walLimit = 4 << 20

	walKindLock    = 1
	walKindCeiling = 2
)

var (
	keyWALGen = []byte("wal_generation")
	// keyWALClean marks a file whose lease log was folded by Close, with nothing
	// logged since: it opens without its log. Open deletes the mark.
	keyWALClean = []byte("wal_clean")
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
)

// foldFill is how full a checkpoint leaves the lock pages it splits. bbolt's
// default (0.5) suits random inserts; a checkpoint inserts in key order, where
// it leaves every split page half empty and the file (and the page cache it
// takes) twice the size it needs. Pages later split by names inserted between
// existing ones are left this full too, so it is not 1: a page filled to the
// brim splits again at the next name that lands in it.
const foldFill = 0.9

// wal is the open lease log. It is used by the flusher only (and by Open and
// Close), except names, which is guarded by the Store's mu.
type wal struct {
	f      *os.File
	path   string
	noSync bool
	gen    uint64 // header's generation
	off    int64  // where the next record goes
	size   int64  // file size (grown ahead in walGrow steps)
	buf    []byte
	// scrap is the end of what a failed append may have left past off (0: none):
	// whole records of a write that was never acknowledged. The next append
	// covers them with zeros, so that replay, which stops at the first zero
	// record, never reads them after that append's records.
	scrap int64
	// resetTo is the generation a checkpoint folded into the bbolt file but could
	// not start the log with (0: none). Records of the old generation would be
	// ignored at the next Open, so no append is made until the reset succeeds.
	resetTo uint64

	// What the log holds beyond the bbolt file: the latest value of each name
	// logged since the last checkpoint (guarded by Store.mu: Inspect and List read
	// it) and the highest ceiling logged (0: none).
	names map[string][]byte
	ceil  uint64

	// checkpointAt is the log size past which the flusher checkpoints: walLimit
	// (the crash test lowers it, to kill the store in checkpoints too).
	checkpointAt int64
}

// openWAL opens the lease log of the store at path, if it exists, and reads its
// records: the latest value of each name and the highest ceiling, which Open
// folds into the bbolt file. Open creates a missing log (create) if the bbolt
// file allows it.
func openWAL(path string, noSync bool) (*wal, error) {
	w := &wal{path: path + "-wal", noSync: noSync, names: make(map[string][]byte), checkpointAt: walLimit}
	f, err := os.OpenFile(w.path, os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", w.path, err)
	}
	w.f = f
	if err := w.read(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// create creates the missing log, empty, and makes its directory entry durable
// (before the bbolt file records a generation for it).
func (w *wal) create() error {
	f, err := os.OpenFile(w.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w.f, w.size = f, 0
	if w.noSync {
		return nil
	}
	if err := f.Sync(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(w.path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// close closes the file, if open.
func (w *wal) close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}

// read reads the header and every valid record of the current generation.
func (w *wal) read() error {
	fi, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("bolt: open %s: %w", w.path, err)
	}
	w.size = fi.Size()
	if w.size == 0 {
		return nil // created, then a crash before the header was written
	}
	data := make([]byte, w.size)
	if _, err := io.ReadFull(io.NewSectionReader(w.f, 0, w.size), data); err != nil {
		return fmt.Errorf("bolt: open %s: %w", w.path, err)
	}
	if len(data) >= walHeaderLen && allZero(data[:walHeaderLen]) {
		return nil // grown, then a crash before the first header was written
	}
	// The valid slot of the higher generation is the header: a reset writes the
	// other slot, so one cut in the middle leaves the previous header readable.
	valid := false
	for i := 0; i+walSlotLen <= min(len(data), walHeaderLen); i += walSlotLen {
		h := data[i : i+walSlotLen]
		if string(h[:8]) != walMagic || crc32.Checksum(h[:16], castagnoli) != binary.BigEndian.Uint32(h[16:20]) {
			continue
		}
		if g := binary.BigEndian.Uint64(h[8:16]); !valid || g > w.gen {
			w.gen, valid = g, true
		}
	}
	if !valid {
		// Without a header, records cannot be read. If there are none (the first
		// header write was cut), nothing is lost: an empty log. Else refuse.
		if len(data) >= walHeaderLen+walRecHead && allZero(data[walHeaderLen:walHeaderLen+walRecHead]) {
			w.gen = 0
			return nil
		}
		return fmt.Errorf("bolt: open %s: not a fence lease log (bad header): %w", w.path, ErrCorrupt)
	}
	off := int64(walHeaderLen)
	for off+walRecHead <= int64(len(data)) {
		h := data[off:]
		n := int64(binary.BigEndian.Uint32(h[0:4]))
		if n == 0 || off+walRecHead+n > int64(len(data)) || binary.BigEndian.Uint64(h[8:16]) != w.gen ||
			crc32.Checksum(h[8:walRecHead+n], castagnoli) != binary.BigEndian.Uint32(h[4:8]) {
			break
		}
		if err := w.apply(h[walRecHead : walRecHead+n]); err != nil {
			return fmt.Errorf("bolt: open %s: record at %d: %w", w.path, off, err)
		}
		off += walRecHead + n
	}
	w.off = off
	return nil
}

// apply folds one record's payload into names and ceil.
func (w *wal) apply(p []byte) error {
	switch {
	case len(p) == 9 && p[0] == walKindCeiling:
		w.ceil = max(w.ceil, binary.BigEndian.Uint64(p[1:]))
	case len(p) >= 3 && p[0] == walKindLock:
		n := int(binary.BigEndian.Uint16(p[1:3]))
		if 3+n > len(p) {
			return fmt.Errorf("name of %d bytes in a record of %d: %w", n, len(p), ErrCorrupt)
		}
		if _, err := decodeLock(p[3+n:]); err != nil {
			return err
		}
		w.names[string(p[3:3+n])] = append([]byte(nil), p[3+n:]...)
	default:
		return fmt.Errorf("record of kind %d and %d bytes is malformed: %w", p[0], len(p), ErrCorrupt)
	}
	return nil
}

// fold writes what the log holds (names, ceil) into the bbolt file with
// generation gen, in transactions of at most maxTxRecords records, gen last:
// until that commit the log stays the one to replay (replaying it again is
// harmless, since each record is a name's whole state and the last one wins).
//
// With clean (from Close) it also records that the log holds nothing more, so the
// bbolt file alone (a copy of it) opens without the log.
func (w *wal) fold(db *bbolt.DB, names map[string][]byte, ceil, gen uint64, clean bool) error {
	// In key order, each page is visited once per transaction, and the pages
	// split full: the file stays dense (see foldFill).
	keys := slices.Sorted(maps.Keys(names))
	for i := 0; i == 0 || i < len(keys); i += maxTxRecords {
		part := keys[i:min(i+maxTxRecords, len(keys))]
		last := i+maxTxRecords >= len(keys)
		err := db.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketLocks)
			b.FillPercent = foldFill
			for _, k := range part {
				if err := b.Put([]byte(k), names[k]); err != nil {
					return err
				}
			}
			if !last {
				return nil
			}
			m := tx.Bucket(bucketMeta)
			if v := m.Get(keyCeiling); ceil > 0 && (len(v) != 8 || binary.BigEndian.Uint64(v) < ceil) {
				if err := m.Put(keyCeiling, u64(ceil)); err != nil {
					return err
				}
			}
			if clean {
				if err := m.Put(keyWALClean, []byte{1}); err != nil {
					return err
				}
			}
			return m.Put(keyWALGen, u64(gen))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// reset starts generation gen: it rewrites the header (creating the file if
// missing) and makes the log empty.
func (w *wal) reset(gen uint64) error {
	var h [walSlotLen]byte
	copy(h[:8], walMagic)
	binary.BigEndian.PutUint64(h[8:16], gen)
	binary.BigEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	if err := w.ensure(walHeaderLen); err != nil {
		return err
	}
	if _, err := w.f.WriteAt(h[:], int64(gen%2)*walSlotLen); err != nil {
		return err
	}
	if err := w.sync(); err != nil {
		return err
	}
	w.gen, w.off, w.ceil, w.scrap, w.resetTo = gen, walHeaderLen, 0, 0, 0
	return nil
}

// ensure grows the file so that end fits, ahead in walGrow steps, with a full
// fsync (the size is metadata fdatasync may not write).
func (w *wal) ensure(end int64) error {
	if end <= w.size {
		return nil
	}
	size := (end/walGrow + 1) * walGrow
	if err := w.f.Truncate(size); err != nil {
		return err
	}
	if !w.noSync {
		if err := w.f.Sync(); err != nil {
			return err
		}
	}
	w.size = size
	return nil
}

func (w *wal) sync() error {
	if w.noSync {
		return nil
	}
	return fdatasync(w.f)
}

// append writes recs and, if not zero, the ceiling, with one write and one
// fdatasync. It returns the number of bytes the log now holds.
func (w *wal) append(recs []lockRec, ceil uint64) (int64, error) {
	b := w.buf[:0]
	rec := func(payload func(b []byte) []byte) {
		start := len(b)
		b = append(b, make([]byte, walRecHead)...)
		b = payload(b)
		p := b[start:]
		binary.BigEndian.PutUint32(p[0:4], uint32(len(p)-walRecHead))
		binary.BigEndian.PutUint64(p[8:16], w.gen)
		binary.BigEndian.PutUint32(p[4:8], crc32.Checksum(p[8:], castagnoli))
	}
	for _, r := range recs {
		rec(func(b []byte) []byte {
			b = append(b, walKindLock, byte(len(r.name)>>8), byte(len(r.name)))
			b = append(b, r.name...)
			return append(b, r.val...)
		})
	}
	if ceil != 0 {
		rec(func(b []byte) []byte { return append(append(b, walKindCeiling), u64(ceil)...) })
	}
	n := int64(len(b))
	if end := w.off + n; w.scrap > end {
		b = append(b, make([]byte, w.scrap-end)...)
	}
	w.buf = b
	if w.resetTo != 0 {
		if err := w.reset(w.resetTo); err != nil {
			return w.off, err
		}
	}
	if err := w.ensure(w.off + int64(len(b))); err != nil {
		return w.off, err
	}
	if m, err := w.f.WriteAt(b, w.off); err != nil {
		// A full disk cuts a write short. Zero what it wrote (pages that are
		// allocated now, so this needs no space), lest a restart replay records
		// that were never acknowledged; whatever is left, the next append covers.
		w.scrap = max(w.scrap, w.off+int64(m))
		if m > 0 {
			_, _ = w.f.WriteAt(make([]byte, m), w.off)
		}
		return w.off, err
	}
	if err := w.sync(); err != nil {
		w.scrap = max(w.scrap, w.off+int64(len(b)))
		return w.off, err
	}
	w.off += n // the zeros after the records are not part of the log
	w.scrap = 0
	if ceil != 0 {
		w.ceil = max(w.ceil, ceil)
	}
	return w.off, nil
}
