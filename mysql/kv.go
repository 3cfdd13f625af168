package mysql

import (
	"context"
	"database/sql"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlfence"
)

// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
const DefaultKVTable = "fence_kv"

// MaxValueLen is the largest value KV.Put accepts, in bytes. It stays well below
// the server's default max_allowed_packet (16 MiB on MariaDB 10.11).
const MaxValueLen = 1 << 20

// KVSchema is the DDL of the default KV table. A NULL v marks a key that was only
// fenced (KV.Fence), never written.
const KVSchema = "CREATE TABLE IF NOT EXISTS `fence_kv` (\n" +
	"  k           VARBINARY(255) NOT NULL PRIMARY KEY,\n" +
	"  v           LONGBLOB NULL,\n" +
	"  fence_name  VARBINARY(255) NOT NULL,\n" +
	"  fence_token BIGINT NOT NULL CHECK (fence_token > 0),\n" +
	"  fence_lease VARBINARY(128) NOT NULL\n" +
	") ENGINE=InnoDB"

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

// Open opens a *sql.DB for a Guard: it parses dsn (go-sql-driver/mysql form, e.g.
// "user@tcp(127.0.0.1:3306)/app") and sets clientFoundRows=true, which the guard's
// conditional UPDATE needs to tell an unchanged write from a stale one. It returns
// an error matching fence.ErrInvalid for a malformed DSN.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w: %w", fence.ErrInvalid, err)
	}
	cfg.ClientFoundRows = true
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w: %w", fence.ErrInvalid, err)
	}
	return sql.OpenDB(conn), nil
}

// CheckDSN returns an error matching fence.ErrInvalid unless dsn parses and sets
// clientFoundRows=true.
func CheckDSN(dsn string) error {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("mysql: check dsn: %w: %w", fence.ErrInvalid, err)
	}
	if !cfg.ClientFoundRows {
		return fmt.Errorf("mysql: check dsn: %w", errNoFoundRows)
	}
	return nil
}
