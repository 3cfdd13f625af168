package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
)

// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
const DefaultKVTable = "fence_kv"

// MaxValueLen is the largest value KV.Put accepts, in bytes.
const MaxValueLen = 1 << 20

// KVSchema is the DDL of the default KV table. A NULL v marks a key that was only
// fenced (KV.Fence), never written.
const KVSchema = `CREATE TABLE IF NOT EXISTS "fence_kv" (
  k           TEXT NOT NULL PRIMARY KEY,
  v           BLOB NULL,
  fence_name  TEXT NOT NULL,
  fence_token INTEGER NOT NULL CHECK (fence_token > 0),
  fence_lease TEXT NOT NULL
) STRICT, WITHOUT ROWID`

// KVOptions configure a KV. The zero value (or nil) uses DefaultKVTable.
type KVOptions struct {
	Table string // the KV table, optionally db.table
}

// KV is a fenced key-value table: a fence.KV and fence.Guard whose every key is a
// row with its own fence columns, written with Row.Upsert in one statement.
type KV struct {
	db     DB
	row    *Row
	schema string
	get    string
	err    error
}

var (
	_ fence.KV    = (*KV)(nil)
	_ fence.Guard = (*KV)(nil)
)

// NewKV returns a KV over db. A bad table name is reported by every method as an
// error matching fence.ErrInvalid.
func NewKV(db DB, opts *KVOptions) *KV {
	table := DefaultKVTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	kv := &KV{db: db, row: &Row{Table: table, Key: "k", Columns: []string{"v"}}}
	q, err := quoteIdent(table)
	switch {
	case err != nil:
		kv.err = fmt.Errorf("sqlite: new kv: %w", err)
	case db == nil:
		kv.err = fmt.Errorf("sqlite: new kv: %w", &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"})
	}
	kv.schema = strings.Replace(KVSchema, `"fence_kv"`, q, 1)
	kv.get = "SELECT v, fence_name, fence_token, fence_lease FROM " + q + " WHERE k = ?"
	return kv
}

// CreateSchema creates the KV table if it does not exist. It returns an error
// matching ErrSchema or fence.ErrUnavailable if the server refuses.
func (kv *KV) CreateSchema(ctx context.Context) error {
	if kv.err != nil {
		return kv.err
	}
	if _, err := kv.db.ExecContext(ctx, kv.schema); err != nil {
		return wrap("create kv schema", err)
	}
	return nil
}

// Put stores value under key if f is admitted (see Row.Upsert). It returns a
// *fence.StaleTokenError or *fence.NamespaceError if f is refused (nothing
// changed), and fence.ErrInvalid for a bad key or fence or a value over MaxValueLen.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("sqlite: put: %w", err)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("sqlite: put %q: %w", key, &fence.InvalidError{Field: "value", Value: fmt.Sprintf("%d bytes", len(value)), Reason: fmt.Sprintf("is longer than %d bytes", MaxValueLen)})
	}
	if value == nil {
		value = []byte{} // NULL means "fenced, never written"
	}
	return kv.row.Upsert(ctx, kv.db, f, key, value)
}

// Get returns the value under key and the fence that wrote it. It returns an error
// matching fence.ErrNotFound if key was never written nor fenced; a key that was
// only fenced has a nil Value.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("sqlite: get: %w", err)
	}
	var v []byte
	var name, lease sql.NullString
	var token sql.NullInt64
	err := kv.db.QueryRowContext(ctx, kv.get, key).Scan(&v, &name, &token, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Item{}, fmt.Errorf("sqlite: get %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Item{}, wrap(fmt.Sprintf("get %q", key), err)
	}
	if !name.Valid || !token.Valid || !lease.Valid || token.Int64 <= 0 {
		return fence.Item{}, fmt.Errorf("sqlite: get %q: %w: NULL or non-positive fence", key, ErrSchema)
	}
	return fence.Item{Value: v, Fence: fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}}, nil
}

// Fence advances key's fence to f without writing a value (see Row.Fence).
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if kv.err != nil {
		return kv.err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("sqlite: fence: %w", err)
	}
	return kv.row.Fence(ctx, kv.db, f, key)
}
