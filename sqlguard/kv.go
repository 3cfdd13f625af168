package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// KVOptions configure a KV. The zero value (or nil) uses DefaultKVTable.
type KVOptions struct {
	Table string // the KV table, optionally qualified once
}

// KV is a fenced key-value table: a fence.KV and fence.Guard whose every key is a
// row (k, v, fence_name, fence_token, fence_lease) with its own fence, written
// with Row.Upsert in one statement. A NULL v marks a key that was only fenced. It
// is safe for concurrent use.
type KV[D Dialector] struct {
	d      *Dialect
	db     DB
	row    *rowSQL
	schema string
	get    string
	err    error
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
	if err := driver.ValidateKey(key); err != nil {
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
// error matching fence.ErrNotFound if key was never written nor fenced (a key
// only fenced has a nil Value), fence.ErrInvalid for a bad key, and ErrSchema for
// a NULL or non-positive fence.
func (kv *KV[D]) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return fence.Item{}, kv.d.errorf("get: %w", err)
	}
	var v []byte
	var name, lease sql.NullString
	var token sql.NullInt64
	err := kv.db.QueryRowContext(ctx, kv.get, key).Scan(&v, &name, &token, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Item{}, kv.d.errorf("get %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Item{}, kv.d.Wrap(fmt.Sprintf("get %q", key), err)
	}
	if !name.Valid || !token.Valid || !lease.Valid || token.Int64 <= 0 {
		return fence.Item{}, kv.d.errorf("get %q: %w: NULL or non-positive fence", key, ErrSchema)
	}
	return fence.Item{Value: v, Fence: fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}}, nil
}

// Fence advances key's fence to f without writing a value (see Row.Fence). It
// returns what Put returns.
func (kv *KV[D]) Fence(ctx context.Context, key string, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return kv.d.errorf("fence: %w", err)
	}
	return kv.row.fenceOnly(ctx, kv.db, f, key)
}
