package sqlite

import (
	"context"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlfence"
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
	kv *sqlfence.KV
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
	return &KV{kv: sqlfence.NewKV(dialect, db, table, KVSchema, DefaultKVTable, MaxValueLen)}
}

// CreateSchema creates the KV table if it does not exist. It returns an error
// matching ErrSchema or fence.ErrUnavailable if the server refuses.
func (kv *KV) CreateSchema(ctx context.Context) error { return kv.kv.CreateSchema(ctx) }

// Put stores value under key if f is admitted (see Row.Upsert). It returns a
// *fence.StaleTokenError or *fence.NamespaceError if f is refused (nothing
// changed), and fence.ErrInvalid for a bad key or fence or a value over MaxValueLen.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	return kv.kv.Put(ctx, key, value, f)
}

// Get returns the value under key and the fence that wrote it. It returns an error
// matching fence.ErrNotFound if key was never written nor fenced; a key that was
// only fenced has a nil Value.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	return kv.kv.Get(ctx, key)
}

// Fence advances key's fence to f without writing a value (see Row.Fence).
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	return kv.kv.Fence(ctx, key, f)
}
