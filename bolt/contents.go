package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
)

// Contents is what a stopped store holds that outlives its leases, as
// ReadContents reads it: the token ceiling, each name's last token and the fenced
// key-value items. It is what a move to another store must carry over so that
// tokens keep rising (P1) and fences keep refusing stale writers.
type Contents struct {
	// Ceiling is the store's token ceiling: no token handed out from its shared
	// counter is above it (see "Tokens" in the package doc).
	Ceiling fence.Token
	// Last holds each name's last token: the highest token granted on the name or
	// the floor a Heal raised it to, which may be above Ceiling.
	Last map[string]fence.Token
	// Items holds every fenced key with its value and fence; the value is nil for
	// a key only fenced (Guard.Fence) or whose value was deleted.
	Items map[string]fence.Item
}

// Max returns the highest token the store may have handed out or promised a
// name's next grant would pass: the larger of Ceiling and every name's last
// token. A store that takes over must issue only tokens above it.
func (c *Contents) Max() fence.Token {
	m := c.Ceiling
	for _, t := range c.Last {
		m = max(m, t)
	}
	return m
}

// ReadContents reads the contents of the store in the file at path and its lease
// log (path-wal), without writing to either: the bbolt file is opened read-only
// and the records of the log that a running store would fold at its next Open
// are applied in memory. The store must not be open in another process: bbolt's
// file lock makes ReadContents wait up to timeout (0: DefaultTimeout) for it.
//
// It returns an error matching fence.ErrInvalid if path does not exist or is a
// directory, ErrNotStore if the file is not a fence store (an empty file
// included), ErrCorrupt if it or its log is damaged, and fence.ErrUnavailable if
// another process holds the file (a running `fence serve`).
func ReadContents(path string, timeout time.Duration) (*Contents, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("bolt: read %s: no such file: %w", path, fence.ErrInvalid)
	case err != nil:
		return nil, fmt.Errorf("bolt: read %s: %w", path, err)
	case fi.IsDir():
		return nil, fmt.Errorf("bolt: read %s: is a directory: %w", path, fence.ErrInvalid)
	case fi.Size() == 0:
		return nil, fmt.Errorf("bolt: read %s: empty file: %w", path, ErrNotStore)
	}
	if err := check(path, timeout); err != nil {
		return nil, err
	}
	w, err := readWAL(path)
	if err != nil {
		return nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return nil, openError(path, timeout, err)
	}
	defer db.Close()
	c := &Contents{Last: map[string]fence.Token{}, Items: map[string]fence.Item{}}
	err = guarded(path, func() error {
		return db.View(func(tx *bbolt.Tx) error { return c.read(path, tx, w) })
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// readWAL reads the lease log of the store at path, opened read-only; a missing
// log reads as an empty one (w.f nil).
func readWAL(path string) (*wal, error) {
	w := &wal{path: path + "-wal", names: make(map[string][]byte)}
	f, err := os.Open(w.path)
	if errors.Is(err, os.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: read %s: %w", w.path, err)
	}
	defer f.Close()
	w.f = f
	if err := w.read(); err != nil {
		return nil, err
	}
	return w, nil
}

// read fills c from the file's buckets in tx and what the log w holds beyond
// them, applying the log as replayLocked folds it at Open.
func (c *Contents) read(path string, tx *bbolt.Tx, w *wal) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return nil // a new file that was never used: nothing in it
	}
	var folded uint64
	if v := meta.Get(keyWALGen); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("bolt: read %s: lease log generation is %d bytes: %w", path, len(v), ErrCorrupt)
		}
		folded = binary.BigEndian.Uint64(v)
	}
	if w.f == nil && folded != 0 && meta.Get(keyWALClean) == nil {
		return fmt.Errorf("bolt: read %s: the lease log %s is missing: %w", path, w.path, ErrCorrupt)
	}
	if v := meta.Get(keyCeiling); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("bolt: read %s: token ceiling is %d bytes: %w", path, len(v), ErrCorrupt)
		}
		c.Ceiling = fence.Token(binary.BigEndian.Uint64(v))
	}
	records := map[string][]byte{}
	if err := tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
		records[string(k)] = v
		return nil
	}); err != nil {
		return err
	}
	switch {
	case w.gen > folded && w.size > 0:
		return fmt.Errorf("bolt: read %s: lease log generation %d is ahead of the file's %d: %w", path, w.gen, folded, ErrCorrupt)
	case w.gen == folded && w.size > 0:
		for k, v := range w.names {
			records[k] = v
		}
		c.Ceiling = max(c.Ceiling, fence.Token(w.ceil))
	}
	for k, v := range records {
		r, err := decodeNamed([]byte(k), v)
		if err != nil {
			return fmt.Errorf("bolt: read %s: lock %q: %w", path, k, err)
		}
		last := r.last
		for _, h := range r.holds {
			last = max(last, h.token)
		}
		c.Last[k] = last
	}
	return tx.Bucket(bucketKV).ForEach(func(k, v []byte) error {
		it, _, err := decodeKV(v)
		if err != nil {
			return fmt.Errorf("bolt: read %s: key %q: %w", path, k, err)
		}
		c.Items[string(k)] = it
		return nil
	})
}
