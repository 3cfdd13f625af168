package bolt

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	bbolt "go.etcd.io/bbolt"
)

// KV record: flags(1) nameLen(1) name token(8) leaseLen(1) lease [value].
const flagValue = 1

func encodeKV(f fence.Fence, value []byte, hasValue bool) []byte {
	b := make([]byte, 0, 11+len(f.Name)+len(f.LeaseID)+len(value))
	var flags byte
	if hasValue {
		flags = flagValue
	}
	b = append(b, flags, byte(len(f.Name)))
	b = append(b, f.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(f.Token))
	b = append(b, byte(len(f.LeaseID)))
	b = append(b, f.LeaseID...)
	return append(b, value...)
}

// decodeKV decodes a KV record; the value is copied out of the transaction's memory.
func decodeKV(v []byte) (it fence.Item, hasValue bool, err error) {
	bad := fmt.Errorf("record of %d bytes is malformed: %w", len(v), ErrCorrupt)
	if len(v) < 2 || v[0]&^flagValue != 0 {
		return it, false, bad
	}
	hasValue = v[0]&flagValue != 0
	n := int(v[1])
	v = v[2:]
	if len(v) < n+9 {
		return it, false, bad
	}
	it.Fence.Name = string(v[:n])
	it.Fence.Token = fence.Token(binary.BigEndian.Uint64(v[n:]))
	v = v[n+8:]
	m := int(v[0])
	v = v[1:]
	if len(v) < m {
		return it, false, bad
	}
	it.Fence.LeaseID = string(v[:m])
	if hasValue {
		it.Value = append([]byte{}, v[m:]...)
	} else if len(v) > m { // a value whose flag was lost
		return fence.Item{}, false, bad
	}
	return it, hasValue, nil
}

// Put stores value under key if f is admitted (fence.Admit against the key's
// fence), and records f as the key's fence, in one transaction that is on disk
// when Put returns. It returns a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, in which case
// nothing changed; fence.ErrInvalid for a bad key or fence or a value longer than
// MaxValueLen; fence.ErrUnavailable if the file could not be written; and
// fence.ErrClosed after Close.
func (s *Store) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("bolt: put %q: value is %d bytes, more than %d: %w", key, len(value), MaxValueLen, fence.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	return s.fence(ctx, "put", key, f, value)
}

// Fence advances key's fence to f without changing its value, so a new holder
// can fence off a paused predecessor before its first write. It returns nil if f
// was admitted, a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if not, fence.ErrInvalid for a bad
// key or fence, fence.ErrUnavailable if the file could not be written, and
// fence.ErrClosed after Close.
func (s *Store) Fence(ctx context.Context, key string, f fence.Fence) error {
	return s.fence(ctx, "fence", key, f, nil)
}

// fence admits f for key and stores it, with value if value is not nil.
func (s *Store) fence(ctx context.Context, op, key string, f fence.Fence, value []byte) error {
	if err := checkArgs(ctx, op, key, driver.ValidateKey(key), f.Validate()); err != nil {
		return err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return opError(op, key, fence.ErrClosed)
	}
	var refused error
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		// Batch may run this more than once: start from scratch every time.
		refused = nil
		b := tx.Bucket(bucketKV)
		k := []byte(key)
		var cur fence.Item
		hasValue := false
		if v := b.Get(k); v != nil {
			var err error
			if cur, hasValue, err = decodeKV(v); err != nil {
				refused = err
				return nil
			}
		}
		if err := fence.Admit(key, cur.Fence, f); err != nil {
			refused = err
			return nil
		}
		if value != nil {
			return b.Put(k, encodeKV(f, value, true))
		}
		return b.Put(k, encodeKV(f, cur.Value, hasValue))
	})
	if err != nil {
		return fmt.Errorf("bolt: %s %q: %w", op, key, writeError(s.path, err))
	}
	if refused != nil {
		return opError(op, key, refused)
	}
	return nil
}

// Get returns the value stored under key and the fence that fences it. A key
// that was only fenced (Fence) has a nil value. It returns fence.ErrNotFound if
// key was never fenced nor written, fence.ErrInvalid for a bad key,
// fence.ErrUnavailable if the file could not be read, and fence.ErrClosed after
// Close.
func (s *Store) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := checkArgs(ctx, "get", key, driver.ValidateKey(key), nil); err != nil {
		return fence.Item{}, err
	}
	var it fence.Item
	found := false
	err := s.view(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketKV).Get([]byte(key))
		if v == nil {
			return nil
		}
		found = true
		var err error
		it, _, err = decodeKV(v)
		return err
	})
	if err != nil {
		return fence.Item{}, opError("get", key, err)
	}
	if !found {
		return fence.Item{}, opError("get", key, fence.ErrNotFound)
	}
	return it, nil
}
