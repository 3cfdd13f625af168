package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
)

// KVOptions configure a KV. The zero value (or nil) uses DefaultKVTable.
type KVOptions struct {
	Table string // the KV table, optionally qualified once
}

// KV is a fenced key-value table: a fence.KV, fence.Guard and fence.Purger whose
// every key is a row (k, v, fence_name, fence_token, fence_lease) with its own
// fence, written with Row.Upsert in one statement. A NULL v marks a key that
// holds no value: only fenced, or deleted. It is safe for concurrent use.
//
// A KV grants no locks, so it cannot tell which tokens were issued (P9): it admits
// any fence fence.Admit admits, whichever locker made it.
type KV[D Dialector] struct {
	d      *Dialect
	db     DB
	row    *rowSQL
	schema string
	err    error

	get, del, purge string
}

// NewKV returns a KV of dialect D over db with the table of opts. A bad table name
// or a nil db is reported by every method as an error matching fence.ErrInvalid.
func NewKV[D Dialector](db DB, opts *KVOptions) *KV[D] {
	d := dialectOf[D]()
	table := DefaultKVTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	kv := &KV[D]{d: d, db: db, row: newRowSQL(d, table, "k", []string{"v"}, "", "", "")}
	q, err := d.quoteIdent(table)
	switch {
	case err != nil:
		kv.err = d.errorf("new kv: %w", err)
	case db == nil:
		kv.err = d.errorf("new kv: %w", errNilDB)
	}
	kv.schema = strings.Replace(d.KVSchema, d.Quote+DefaultKVTable+d.Quote, q, 1)
	kv.get = "SELECT v, fence_name, fence_token, fence_lease FROM " + q + " WHERE k = ?"
	// Delete: one conditional UPDATE, fence.Admit's rule (or a row never fenced)
	// and a value to delete. Arguments: name, lease, token, key, AdmitArgs.
	kv.del = "UPDATE " + q + " SET v = NULL, fence_name = ?, fence_lease = ?, fence_token = ?" +
		" WHERE k = ? AND v IS NOT NULL AND (fence_token = 0 OR " + AdmitSQL("fence_name", "fence_token", "fence_lease") + ")"
	kv.purge = "DELETE FROM " + q + " WHERE k = ?"
	return kv
}

// CreateSchema creates the KV table if it does not exist. It returns an error
// matching ErrSchema or fence.ErrUnavailable if the database refuses.
func (kv *KV[D]) CreateSchema(ctx context.Context) error {
	if kv.err != nil {
		return kv.err
	}
	if _, err := kv.db.ExecContext(ctx, kv.schema); err != nil {
		return kv.d.Wrap("create kv schema", err)
	}
	return nil
}

// Put stores value under key if f is admitted (see Row.Upsert). It returns a
// *fence.StaleTokenError or *fence.NamespaceError if f is refused (nothing
// changed), fence.ErrInvalid for a bad key or fence or a value over MaxValueLen,
// and the database errors of Row.Upsert.
func (kv *KV[D]) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return kv.d.errorf("put: %w", err)
	}
	if len(value) > MaxValueLen {
		return kv.d.errorf("put %q: %w", key, &fence.InvalidError{Field: "value", Value: fmt.Sprintf("%d bytes", len(value)), Reason: fmt.Sprintf("is longer than %d bytes", MaxValueLen)})
	}
	if value == nil {
		value = []byte{} // NULL means "fenced, never written"
	}
	return kv.row.upsert(ctx, kv.db, f, key, value)
}

// Get returns the value under key and the fence that wrote it. It returns an
// error matching fence.ErrNotFound if key was never written nor fenced, or was
// purged (a key only fenced, or deleted, has a nil Value and its fence),
// fence.ErrInvalid for a bad key, and ErrSchema for a NULL or non-positive fence.
func (kv *KV[D]) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, kv.d.errorf("get: %w", err)
	}
	it, err := kv.read(ctx, key)
	if err != nil {
		return fence.Item{}, kv.d.Wrap(fmt.Sprintf("get %q", key), err)
	}
	return it, nil
}

// read returns key's row as Get does: fence.ErrNotFound for no row, ErrSchema for
// a NULL or non-positive fence, the driver's error as it is.
func (kv *KV[D]) read(ctx context.Context, key string) (fence.Item, error) {
	var v []byte
	var name, lease sql.NullString
	var token sql.NullInt64
	err := kv.db.QueryRowContext(ctx, kv.get, key).Scan(&v, &name, &token, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Item{}, fence.ErrNotFound
	}
	if err != nil {
		return fence.Item{}, err
	}
	if !name.Valid || !token.Valid || !lease.Valid || token.Int64 <= 0 {
		return fence.Item{}, fmt.Errorf("%w: NULL or non-positive fence", ErrSchema)
	}
	return fence.Item{Value: v, Fence: fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}}, nil
}

// Delete removes key's value if f is admitted, as Put admits it, and records f as
// the key's fence, in one conditional UPDATE: the fence stays, so a stale writer
// is still refused, and Get returns the key with a nil value. It returns a
// *fence.StaleTokenError or *fence.NamespaceError if f is refused, then
// fence.ErrNotFound if key holds no value (never written, only fenced or already
// deleted); in each case nothing changed. It returns fence.ErrInvalid for a bad
// key or fence, and the database errors of Row.Update. A KV checks no issuance
// (P9): it grants no locks.
func (kv *KV[D]) Delete(ctx context.Context, key string, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return kv.d.errorf("delete: %w", err)
	}
	if err := f.Validate(); err != nil {
		return kv.d.errorf("delete %q: %w", key, err)
	}
	what := fmt.Sprintf("delete %q", key)
	args := append([]any{f.Name, f.LeaseID, int64(f.Token), key}, AdmitArgs(f)...)
	for range maxDeleteAttempts {
		n, err := kv.d.execRows(ctx, kv.db, what, kv.del, args...)
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		// Nothing changed: a refusal, or no value. The row may change between the
		// UPDATE and this read; a read that explains neither runs the UPDATE again.
		it, err := kv.read(ctx, key)
		if errors.Is(err, fence.ErrNotFound) {
			return kv.d.errorf("%s: %w", what, fence.ErrNotFound)
		}
		if err != nil {
			return kv.d.Wrap(what, err)
		}
		if it.Fence.Token > 0 {
			if err := fence.Admit(key, it.Fence, f); err != nil {
				return kv.d.Wrap(what, err)
			}
		}
		if it.Value == nil {
			return kv.d.errorf("%s: %w", what, fence.ErrNotFound)
		}
	}
	return kv.d.errorf("%s: %w: the row kept changing under concurrent writers", what, fence.ErrUnavailable)
}

// maxDeleteAttempts bounds the UPDATEs of one Delete whose refusal a read could
// not explain (the row changed in between).
const maxDeleteAttempts = 3

// Purge deletes key's row, its value and its fence (see fence.Purger), so the next
// write under any lock and token is admitted: the one way a key's fence goes back,
// for an administrator. It returns fence.ErrNotFound if key has no row,
// fence.ErrInvalid for a bad key, and the database errors of Row.Update.
func (kv *KV[D]) Purge(ctx context.Context, key string) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return kv.d.errorf("purge: %w", err)
	}
	what := fmt.Sprintf("purge %q", key)
	n, err := kv.d.execRows(ctx, kv.db, what, kv.purge, key)
	if err != nil {
		return err
	}
	if n == 0 {
		return kv.d.errorf("%s: %w", what, fence.ErrNotFound)
	}
	return nil
}

// Fence advances key's fence to f without writing a value (see Row.Fence). It
// returns what Put returns.
func (kv *KV[D]) Fence(ctx context.Context, key string, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return kv.d.errorf("fence: %w", err)
	}
	return kv.row.fenceOnly(ctx, kv.db, f, key)
}
