package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/jackc/pgx/v5"
)

// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
const DefaultKVTable = "fence_kv"

// MaxValueLen is the largest value KV.Put stores, in bytes (1 MiB).
const MaxValueLen = 1 << 20

// KVSchema is the DDL of a KV's table under its default name (see
// KV.CreateSchema). A NULL value marks a key that was fenced but never written.
const KVSchema = `CREATE TABLE IF NOT EXISTS fence_kv (
    key         text PRIMARY KEY,
    value       bytea,
    fence_name  text   NOT NULL DEFAULT '',
    fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    fence_lease text   NOT NULL DEFAULT ''
)`

// KVOptions configure a KV. The zero value (or nil) is usable.
type KVOptions struct {
	// Table is the table, "table" or "schema.table". Default DefaultKVTable.
	Table string
}

// KV is a fenced key-value table on PostgreSQL, built on a Row fence: each key's
// row holds its value and the fence that wrote it, and Put is one upsert that
// writes both only if the fence is admitted. It implements fence.KV and
// fence.Guard (Fence advances a key's fence, keeping its value). It is safe for
// concurrent use.
type KV struct {
	db    DB
	row   *Row
	table string // quoted, or "" with err set
	err   error
	get   string
}

var (
	_ fence.KV    = (*KV)(nil)
	_ fence.Guard = (*KV)(nil)
)

// NewKV returns a KV on db. A malformed KVOptions.Table is reported, matching
// fence.ErrInvalid, by every method.
func NewKV(db DB, opts *KVOptions) *KV {
	var o KVOptions
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultKVTable
	}
	kv := &KV{db: db, row: &Row{Table: o.Table, Key: "key", Columns: []string{"value"}}}
	kv.table, kv.err = quoteIdent("table", o.Table, true)
	if kv.err == nil && db == nil {
		kv.err = fmt.Errorf("postgres: kv: nil DB: %w", fence.ErrInvalid)
	}
	kv.get = `SELECT value, fence_name, fence_token, fence_lease FROM ` + kv.table + ` WHERE key = $1`
	return kv
}

// CreateSchema creates the KV's table if it does not exist (KVSchema under the
// configured name). It returns fence.ErrUnavailable if the database cannot be
// reached.
func (kv *KV) CreateSchema(ctx context.Context) error {
	if kv.err != nil {
		return kv.err
	}
	return createTable(ctx, kv.db, KVSchema, DefaultKVTable, kv.table)
}

// Put stores value under key with fence f if f is admitted for key, in one
// statement. It returns a *fence.StaleTokenError (fence.ErrStaleToken) or
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, in which case
// nothing changed, fence.ErrInvalid for a bad key or fence or a value longer than
// MaxValueLen, and the database errors of Row.Upsert.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := checkFence(kv.err, key, f); err != nil {
		return fmt.Errorf("postgres: put: %w", err)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("postgres: put %q: value is %d bytes, more than %d: %w", key, len(value), MaxValueLen, fence.ErrInvalid)
	}
	if value == nil {
		value = []byte{} // NULL means "fenced, never written"
	}
	return kv.row.write(ctx, "put", key, kv.db, f, key, []any{value}, func(s *rowSQL) string { return s.upsert })
}

// Fence advances key's fence to f without changing its value. It returns what
// Put returns.
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := checkFence(kv.err, key, f); err != nil {
		return fmt.Errorf("postgres: fence: %w", err)
	}
	return kv.row.write(ctx, "fence", key, kv.db, f, key, nil, func(s *rowSQL) string { return s.fence })
}

// Get returns the value under key and the fence that last wrote or fenced it (a
// key only fenced has a nil value). It returns fence.ErrNotFound if key was never
// written nor fenced, fence.ErrInvalid for a bad key, ErrCorrupt for a row edited
// into something KV never writes, and the database errors of Row.Upsert.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if kv.err != nil {
		return fence.Item{}, kv.err
	}
	if err := driver.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("postgres: get: %w", err)
	}
	var (
		value []byte
		s     storedFence
	)
	err := kv.db.QueryRow(ctx, kv.get, key).Scan(&value, &s.name, &s.token, &s.lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Item{}, fmt.Errorf("postgres: get %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("postgres: get %q: %w", key, dbErr(err))
	}
	f, err := s.fence()
	if err == nil && f.Token == 0 {
		err = fmt.Errorf("%w: the row has no fence", ErrCorrupt)
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("postgres: get %q: %w", key, err)
	}
	return fence.Item{Value: value, Fence: f}, nil
}
