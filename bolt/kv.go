package bolt

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/fencelock/fence"
	bbolt "go.etcd.io/bbolt"
)

// KV record: flags(1) nameLen(1) name token(8) leaseLen(1) lease
// [count(1) (idLen(1) id)*count] [value]. The attempt ids (flagAttempts) are
// those the key remembers under its fence (see fence.RememberAttempt).
const (
	flagValue    = 1
	flagAttempts = 2
)

func encodeKV(f fence.Fence, value []byte, hasValue bool) []byte {
	return encodeKVRecord(f, nil, value, hasValue)
}

func encodeKVRecord(f fence.Fence, attempts []string, value []byte, hasValue bool) []byte {
	n := 11 + len(f.Name) + len(f.LeaseID) + len(value)
	for _, a := range attempts {
		n += 1 + len(a)
	}
	b := make([]byte, 0, n+1)
	var flags byte
	if hasValue {
		flags = flagValue
	}
	if len(attempts) > 0 {
		flags |= flagAttempts
	}
	b = append(b, flags, byte(len(f.Name)))
	b = append(b, f.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(f.Token))
	b = append(b, byte(len(f.LeaseID)))
	b = append(b, f.LeaseID...)
	if len(attempts) > 0 {
		b = append(b, byte(len(attempts)))
		for _, a := range attempts {
			b = append(b, byte(len(a)))
			b = append(b, a...)
		}
	}
	return append(b, value...)
}

// decodeKV decodes a KV record; the value is copied out of the transaction's memory.
func decodeKV(v []byte) (it fence.Item, hasValue bool, err error) {
	it, _, hasValue, err = decodeKVRecord(v)
	return it, hasValue, err
}

// decodeKVRecord is decodeKV with the attempt ids the record remembers.
func decodeKVRecord(v []byte) (it fence.Item, attempts []string, hasValue bool, err error) {
	bad := fmt.Errorf("record of %d bytes is malformed: %w", len(v), ErrCorrupt)
	if len(v) < 2 || v[0]&^(flagValue|flagAttempts) != 0 {
		return it, nil, false, bad
	}
	hasValue = v[0]&flagValue != 0
	hasAttempts := v[0]&flagAttempts != 0
	n := int(v[1])
	v = v[2:]
	if len(v) < n+9 {
		return it, nil, false, bad
	}
	it.Fence.Name = string(v[:n])
	it.Fence.Token = fence.Token(binary.BigEndian.Uint64(v[n:]))
	v = v[n+8:]
	m := int(v[0])
	v = v[1:]
	if len(v) < m {
		return it, nil, false, bad
	}
	it.Fence.LeaseID = string(v[:m])
	v = v[m:]
	if hasAttempts {
		if len(v) < 1 || v[0] == 0 {
			return fence.Item{}, nil, false, bad
		}
		count := int(v[0])
		v = v[1:]
		attempts = make([]string, 0, count)
		for range count {
			if len(v) < 1 || v[0] == 0 || len(v) < 1+int(v[0]) {
				return fence.Item{}, nil, false, bad
			}
			attempts = append(attempts, string(v[1:1+int(v[0])]))
			v = v[1+int(v[0]):]
		}
	}
	if hasValue {
		it.Value = append([]byte{}, v...)
	} else if len(v) > 0 { // a value whose flag was lost
		return fence.Item{}, nil, false, bad
	}
	return it, attempts, hasValue, nil
}

// Put stores value under key if f is admitted, and records f as the key's fence,
// in one transaction that is on disk when Put returns. f is admitted if this
// store issued it (P9, see "Only issued tokens fence" in the package doc) and
// fence.Admit admits it against the key's fence. Put returns a
// *fence.UnissuedTokenError (fence.ErrUnissuedToken), *fence.LeaseRequiredError
// (fence.ErrLeaseRequired), *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, in which case
// nothing changed; fence.ErrInvalid for a bad key or fence
// or a value longer than MaxValueLen; fence.ErrUnavailable if the file could not
// be read or written; and fence.ErrClosed after Close.
//
// A Put whose context names its write by an attempt id (fence.WithWriteAttempt)
// claims the id for key in the same transaction; a later attempt with the same
// id and f, while f is still key's fence, returns nil and writes nothing (P3).
// A malformed id is fence.ErrInvalid.
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
// can fence off a paused predecessor before its first write. It admits f as Put
// does. It returns nil if f was admitted, a *fence.UnissuedTokenError
// (fence.ErrUnissuedToken), *fence.LeaseRequiredError (fence.ErrLeaseRequired),
// *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if not, fence.ErrInvalid for a bad
// key or fence, fence.ErrUnavailable if the file could not be read or written,
// and fence.ErrClosed after Close.
func (s *Store) Fence(ctx context.Context, key string, f fence.Fence) error {
	return s.fence(ctx, "fence", key, f, nil)
}

// Delete removes key's value if f is admitted (as Put admits it), and records f
// as the key's fence, in one transaction that is on disk when Delete returns: the
// fence stays, so a stale writer is still refused. It returns fence.ErrNotFound
// if key holds no value (never written, only fenced, or already deleted), a
// *fence.UnissuedTokenError (fence.ErrUnissuedToken), *fence.LeaseRequiredError
// (fence.ErrLeaseRequired), *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused (these are checked
// first), and fence.ErrInvalid for a bad key or
// fence; in each of those cases nothing changed. It returns
// fence.ErrUnavailable if the file could not be read or written, and
// fence.ErrClosed after Close. An attempt id claims and replays as in Put: a
// later attempt of an applied Delete returns nil, not fence.ErrNotFound.
func (s *Store) Delete(ctx context.Context, key string, f fence.Fence) error {
	return s.fence(ctx, "delete", key, f, nil)
}

// Purge removes key's value and its fence, durably, so the next write under any
// lock and token is admitted (fence.Purger): the one way a key's fence goes
// back, for a key fenced by the wrong lock. It returns fence.ErrNotFound if key
// has neither a value nor a fence, fence.ErrInvalid for a bad key,
// fence.ErrUnavailable if the file could not be written, and fence.ErrClosed
// after Close.
func (s *Store) Purge(ctx context.Context, key string) error {
	if err := checkArgs(ctx, "purge", key, fence.ValidateKey(key), nil); err != nil {
		return err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return opError("purge", key, fence.ErrClosed)
	}
	found := false
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKV)
		k := []byte(key)
		found = b.Get(k) != nil
		if !found {
			return nil
		}
		return b.Delete(k)
	})
	if err != nil {
		return fmt.Errorf("bolt: purge %q: %w", key, writeError(s.path, err))
	}
	if !found {
		return opError("purge", key, fence.ErrNotFound)
	}
	return nil
}

// fence admits f for key and stores it: with value if value is not nil, without
// the key's value for op "delete", else with the key's value. A put or delete
// whose attempt id (fence.WithWriteAttempt) the key remembers under f is the
// write already applied: nothing is written and nil returned (P3).
func (s *Store) fence(ctx context.Context, op, key string, f fence.Fence, value []byte) error {
	if err := checkArgs(ctx, op, key, fence.ValidateKey(key), f.Validate()); err != nil {
		return err
	}
	var attempt string // a fence op needs none: advancing to the fence already there changes nothing
	if op != "fence" {
		var err error
		if attempt, err = fence.AttemptKey(ctx, op, value); err != nil {
			return opError(op, key, err)
		}
	}
	// P9. What lets a fence through, once true, stays true (a name's last token
	// only grows, a token is issued to one lease only, and an ended lease never
	// lives again), so checking before the transaction admits exactly what
	// checking inside it would. It runs before
	// s.life is taken: it may read the file, which takes s.life itself.
	if !s.externalLocks {
		if err := s.checkIssued(f); err != nil {
			return opError(op, key, err)
		}
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return opError(op, key, fence.ErrClosed)
	}
	del := op == "delete"
	var refused error
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		// Batch may run this more than once: start from scratch every time.
		refused = nil
		b := tx.Bucket(bucketKV)
		k := []byte(key)
		var cur fence.Item
		var attempts []string
		hasValue := false
		if v := b.Get(k); v != nil {
			var err error
			if cur, attempts, hasValue, err = decodeKVRecord(v); err != nil {
				refused = err
				return nil
			}
		}
		if fence.Replayed(cur.Fence, attempts, f, attempt) {
			return nil // this write's earlier attempt was applied (P3)
		}
		if err := fence.Admit(key, cur.Fence, f); err != nil {
			refused = err
			return nil
		}
		attempts = fence.RememberAttempt(cur.Fence, attempts, f, attempt)
		switch {
		case del && !hasValue:
			refused = fmt.Errorf("key holds no value: %w", fence.ErrNotFound)
			return nil
		case del:
			return b.Put(k, encodeKVRecord(f, attempts, nil, false))
		case value != nil:
			return b.Put(k, encodeKVRecord(f, attempts, value, true))
		}
		return b.Put(k, encodeKVRecord(f, attempts, cur.Value, hasValue))
	})
	if err != nil {
		return fmt.Errorf("bolt: %s %q: %w", op, key, writeError(s.path, err))
	}
	if refused != nil {
		return opError(op, key, refused)
	}
	return nil
}

// checkIssued returns a *fence.UnissuedTokenError if this store did not issue
// f (P9): f's token is above the last token of f.Name (in memory, else in the lease
// log or the file; 0 if the name was never granted), or a live lease of f.Name
// holds f's token under another lease id than f's non-empty one; and a
// *fence.LeaseRequiredError if f has no lease id and an unexpired lease of
// f.Name holds f's token. It returns fence.ErrClosed after Close and the errors
// of reading the file.
func (s *Store) checkIssued(f fence.Fence) error {
	if !s.lockOpen() {
		return fence.ErrClosed
	}
	defer s.mu.Unlock()
	e := s.locks[f.Name]
	var last fence.Token
	if e == nil {
		var err error
		if last, err = s.recordedLastLocked(f.Name); err != nil {
			return err
		}
		e = s.locks[f.Name] // may have come while the file was read
	}
	if e != nil {
		last = max(last, e.last)
	}
	if err := fence.CheckIssued(f, last); err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	var hbuf [8]*hold
	if f.LeaseID == "" {
		// A live lease's token without its id would refuse that lease's own
		// writes. An expired lease is ended (Renew refuses it), timer or not.
		now := s.now()
		return fence.CheckLeaseGiven(f, slices.ContainsFunc(e.leases(hbuf[:0]), func(h *hold) bool {
			return h.token == f.Token && h.expires > now
		}))
	}
	id, ok := parseLeaseID(f.LeaseID)
	for _, h := range e.leases(hbuf[:0]) {
		if h.token == f.Token && (!ok || h.id != id) {
			return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: last, OtherLease: true}
		}
	}
	return nil
}

// Get returns the value stored under key and the fence that fences it. A key
// that was only fenced (Fence), or whose value was deleted (Delete), has a nil
// value. It returns fence.ErrNotFound if
// key was never fenced nor written, fence.ErrInvalid for a bad key,
// fence.ErrUnavailable if the file could not be read, and fence.ErrClosed after
// Close.
func (s *Store) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := checkArgs(ctx, "get", key, fence.ValidateKey(key), nil); err != nil {
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
