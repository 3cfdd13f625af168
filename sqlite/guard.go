package sqlite

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Defaults of the guard's tables (the same for every dialect, see sqlguard).
const (
	// DefaultTable is the fences table a Guard uses when GuardOptions.Table is empty.
	DefaultTable = sqlguard.DefaultTable
	// DefaultKVTable is the table a KV uses when KVOptions.Table is empty.
	DefaultKVTable = sqlguard.DefaultKVTable
	// MaxValueLen is the largest value KV.Put accepts, in bytes.
	MaxValueLen = sqlguard.MaxValueLen
)

// Default fence column names of a Row.
const (
	DefaultFenceName  = sqlguard.DefaultFenceName
	DefaultFenceToken = sqlguard.DefaultFenceToken
	DefaultFenceLease = sqlguard.DefaultFenceLease
)

// Schema is the DDL of the default fences table, as CreateSchema runs it. The
// primary key on resource is the only index the guard needs. STRICT makes SQLite
// refuse a token that is not an integer; TEXT compares byte for byte (BINARY).
const Schema = `CREATE TABLE IF NOT EXISTS "fence_resources" (
  resource TEXT NOT NULL PRIMARY KEY,
  name     TEXT NOT NULL,
  token    INTEGER NOT NULL CHECK (token > 0),
  lease    TEXT NOT NULL
) STRICT, WITHOUT ROWID`

// KVSchema is the DDL of the default KV table. A NULL v marks a key that holds no
// value: only fenced (KV.Fence), or deleted (KV.Delete).
const KVSchema = `CREATE TABLE IF NOT EXISTS "fence_kv" (
  k           TEXT NOT NULL PRIMARY KEY,
  v           BLOB NULL,
  fence_name  TEXT NOT NULL,
  fence_token INTEGER NOT NULL CHECK (fence_token > 0),
  fence_lease TEXT NOT NULL
) STRICT, WITHOUT ROWID`

// The guard's types for SQLite: sqlguard's, over this package's Dialect. Their
// methods and errors are documented there; the SQL they run is in the package
// documentation.
type (
	// Guard is the resource fence (see sqlguard.Guard). SQLite has one writer at
	// a time, so the fenced check and write cannot interleave with another
	// writer's. It implements fence.Guard.
	Guard = sqlguard.Guard[Dialect]
	// KV is a fenced key-value table (see sqlguard.KV). It implements fence.KV
	// (Delete included), fence.Guard and fence.Purger. It grants no locks, so it
	// does not check that a fence's token was issued (P9).
	KV = sqlguard.KV[Dialect]
	// Row is the row fence over a table of the caller's (see sqlguard.Row): set
	// its fields, then use it.
	Row = sqlguard.Row[Dialect]
	// GuardOptions configure a Guard; the zero value (or nil) uses DefaultTable.
	// Table may be qualified by an attached schema ("main.fence_resources");
	// letters, digits and '_' only.
	GuardOptions = sqlguard.GuardOptions
	// KVOptions configure a KV; the zero value (or nil) uses DefaultKVTable.
	KVOptions = sqlguard.KVOptions
	// Querier runs statements: a *sql.Tx, *sql.DB or *sql.Conn.
	Querier = sqlguard.Querier
	// DB is what a Guard needs of the database: a *sql.DB of the
	// modernc.org/sqlite driver, ideally from Open.
	DB = sqlguard.DB
)

var (
	_ fence.Guard = (*Guard)(nil)
	_ fence.KV    = (*KV)(nil)
	_ fence.Guard = (*KV)(nil)

	_ fence.Purger = (*KV)(nil)
)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name
// or a nil db is reported by every method as an error matching fence.ErrInvalid.
func NewGuard(db DB, opts *GuardOptions) *Guard { return sqlguard.NewGuard[Dialect](db, opts) }

// NewKV returns a KV over db with the table of opts. A bad table name or a nil db
// is reported by every method as an error matching fence.ErrInvalid.
func NewKV(db DB, opts *KVOptions) *KV { return sqlguard.NewKV[Dialect](db, opts) }

// Open opens the SQLite database file at path for guarded writes: every
// transaction starts with BEGIN IMMEDIATE (_txlock=immediate), so a transaction
// takes the write lock when it begins instead of failing with SQLITE_BUSY when it
// first writes after a read; connections wait up to 10s for that lock
// (busy_timeout); and the journal is WAL, so readers do not block the writer.
// Writers are serialised by SQLite's database lock, which is what makes the check
// and the write of FenceTx atomic. It returns an error matching fence.ErrInvalid
// for an empty path or one containing '?', and fence.ErrUnavailable if the file
// cannot be opened.
func Open(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: open: %w", &fence.InvalidError{Field: "path", Value: path, Reason: "must be a non-empty file path without '?' or '#'"})
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, dialect.Wrap("open", err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w: %w", path, fence.ErrUnavailable, err)
	}
	return db, nil
}
