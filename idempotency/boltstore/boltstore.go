// Package boltstore is an idempotency.Store in a bbolt file, for a single
// process.
package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/idempotency"
)

// DefaultBucket is the bucket a Store uses when Options.Bucket is empty.
const DefaultBucket = "idempotency"

// Options configure a Store. The zero value (or nil) is fine.
type Options struct {
	// Bucket holds the records (default DefaultBucket).
	Bucket string
	// Clock measures lock timeouts and retention (default driver.SystemClock).
	Clock driver.Clock
}

// Store is an embedded idempotency.Store in a bbolt file, for a single process: records
// are JSON values under their key in one bucket, and every method is one bbolt
// transaction (Begin and Complete are read-modify-write under bbolt's single
// writer, so they are atomic). Times come from the local clock.
type Store struct {
	db     *bolt.DB
	bucket []byte
	clock  driver.Clock
	owned  bool // Close closes db
}

var _ idempotency.Store = (*Store)(nil)

type boltRecord struct {
	Fingerprint string                `json:"fp"`
	Owner       string                `json:"owner"`
	Done        bool                  `json:"done"`
	LockedUntil time.Time             `json:"locked_until"`
	ExpiresAt   time.Time             `json:"expires_at"`
	Response    *idempotency.Response `json:"response,omitempty"`
}

// Open opens (creating if needed) the bbolt file at path and returns a
// store that closes it on Close. It returns fence.ErrUnavailable if the file cannot
// be opened (another process holds its lock for 5s, say) and fence.ErrInvalid for an
// empty path.
func Open(path string, opts *Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("idempotency: open bolt store: %w", &fence.InvalidError{Field: "path", Value: path, Reason: "is empty"})
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("idempotency: open bolt store %s: %w: %w", path, fence.ErrUnavailable, err)
	}
	s, err := New(db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns a store in a bucket of an open bbolt database, creating the
// bucket. Close does not close db. It returns fence.ErrInvalid for a nil or
// read-only db.
func New(db *bolt.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("idempotency: bolt store: %w", &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"})
	}
	s := &Store{db: db, bucket: []byte(DefaultBucket), clock: driver.SystemClock}
	if opts != nil && opts.Bucket != "" {
		s.bucket = []byte(opts.Bucket)
	}
	if opts != nil && opts.Clock != nil {
		s.clock = opts.Clock
	}
	err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(s.bucket)
		return err
	})
	if err != nil {
		return nil, boltWrap("create bucket", err)
	}
	return s, nil
}

// Close closes the bbolt file if Open opened it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.db.Close()
}

// Begin implements Store.Begin in one bbolt write transaction.
func (s *Store) Begin(ctx context.Context, key, fingerprint string, lockTimeout, retention time.Duration) (idempotency.Claim, error) {
	if err := idempotency.ValidateBegin("bolt begin", key, fingerprint, lockTimeout, retention); err != nil {
		return idempotency.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idempotency.Claim{}, fmt.Errorf("idempotency: bolt begin %q: %w", key, err)
	}
	var claim idempotency.Claim
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		now := s.clock.Now()
		rec, err := getRecord(b, key)
		if err != nil {
			return err
		}
		switch {
		case rec == nil || !now.Before(rec.ExpiresAt):
		case rec.Fingerprint != fingerprint:
			claim = idempotency.Claim{State: idempotency.Mismatch}
			return nil
		case rec.Done:
			claim = idempotency.Claim{State: idempotency.Completed, Response: rec.Response}
			return nil
		case now.Before(rec.LockedUntil):
			claim = idempotency.Claim{State: idempotency.InFlight, RetryAfter: rec.LockedUntil.Sub(now)}
			return nil
		}
		owner := idempotency.NewOwner()
		claim = idempotency.Claim{State: idempotency.Started, Owner: owner}
		return putRecord(b, key, &boltRecord{Fingerprint: fingerprint, Owner: owner, LockedUntil: now.Add(lockTimeout), ExpiresAt: now.Add(retention)})
	})
	if err != nil {
		return idempotency.Claim{}, boltWrap(fmt.Sprintf("begin %q", key), err)
	}
	return claim, nil
}

// Complete implements Store.Complete.
func (s *Store) Complete(ctx context.Context, key, owner string, resp *idempotency.Response, retention time.Duration) error {
	if err := idempotency.ValidateOwner("bolt complete", key, owner); err != nil {
		return err
	}
	if resp == nil || retention <= 0 {
		return fmt.Errorf("idempotency: bolt complete %q: %w", key, &fence.InvalidError{Field: "response", Value: fmt.Sprint(retention), Reason: "needs a response and a positive retention"})
	}
	return s.owned1(ctx, "complete", key, owner, func(b *bolt.Bucket, rec *boltRecord, now time.Time) error {
		rec.Done = true
		rec.Response = resp
		rec.ExpiresAt = now.Add(retention)
		return putRecord(b, key, rec)
	})
}

// Release implements Store.Release.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if err := idempotency.ValidateOwner("bolt release", key, owner); err != nil {
		return err
	}
	return s.owned1(ctx, "release", key, owner, func(b *bolt.Bucket, _ *boltRecord, _ time.Time) error {
		return b.Delete([]byte(key))
	})
}

// owned1 runs f on key's record in a write transaction if owner owns it in flight.
func (s *Store) owned1(ctx context.Context, op, key, owner string, f func(*bolt.Bucket, *boltRecord, time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("idempotency: bolt %s %q: %w", op, key, err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		now := s.clock.Now()
		rec, err := getRecord(b, key)
		if err != nil {
			return err
		}
		if rec == nil || rec.Done || rec.Owner != owner || !now.Before(rec.ExpiresAt) {
			return idempotency.ErrNotOwner
		}
		return f(b, rec, now)
	})
	if err != nil {
		return boltWrap(fmt.Sprintf("%s %q", op, key), err)
	}
	return nil
}

// Purge implements Store.Purge; it scans the bucket.
func (s *Store) Purge(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("idempotency: bolt purge: %w", err)
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		now := s.clock.Now()
		var expired [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var rec boltRecord
			if err := json.Unmarshal(v, &rec); err != nil || !now.Before(rec.ExpiresAt) {
				expired = append(expired, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range expired {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(expired)
		return nil
	})
	if err != nil {
		return 0, boltWrap("purge", err)
	}
	return n, nil
}

func getRecord(b *bolt.Bucket, key string) (*boltRecord, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	var rec boltRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		// A corrupt record is treated as absent rather than blocking the key.
		return nil, nil
	}
	return &rec, nil
}

func putRecord(b *bolt.Bucket, key string, rec *boltRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), v)
}

func boltWrap(what string, err error) error {
	switch {
	case errors.Is(err, idempotency.ErrNotOwner):
		return fmt.Errorf("idempotency: bolt %s: %w", what, err)
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return fmt.Errorf("idempotency: bolt %s: %w: %w", what, fence.ErrClosed, err)
	case errors.Is(err, bolterrors.ErrDatabaseReadOnly), errors.Is(err, bolterrors.ErrKeyTooLarge), errors.Is(err, bolterrors.ErrValueTooLarge):
		return fmt.Errorf("idempotency: bolt %s: %w: %w", what, fence.ErrInvalid, err)
	}
	return fmt.Errorf("idempotency: bolt %s: %w: %w", what, fence.ErrUnavailable, err)
}
