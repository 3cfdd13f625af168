package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlfence"
)

// DefaultTable is the fences table a Guard uses when GuardOptions.Table is empty.
const DefaultTable = "fence_resources"

// Schema is the DDL of the default fences table, as CreateSchema runs it. The
// primary key on resource is the only index the guard needs. STRICT makes SQLite
// refuse a token that is not an integer; TEXT compares byte for byte (BINARY).
const Schema = `CREATE TABLE IF NOT EXISTS "fence_resources" (
  resource TEXT NOT NULL PRIMARY KEY,
  name     TEXT NOT NULL,
  token    INTEGER NOT NULL CHECK (token > 0),
  lease    TEXT NOT NULL
) STRICT, WITHOUT ROWID`

// Querier runs statements: a *sql.Tx for writes fenced together with the caller's
// own, or a *sql.DB or *sql.Conn for a single autocommitted statement.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is what a Guard needs of the database: a *sql.DB of the modernc.org/sqlite
// driver, ideally from Open.
type DB interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

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
		return nil, wrap("open", err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w: %w", path, fence.ErrUnavailable, err)
	}
	return db, nil
}

// GuardOptions configure a Guard. The zero value (or nil) uses DefaultTable.
type GuardOptions struct {
	// Table is the fences table, optionally qualified by an attached schema
	// ("main.fence_resources"). Letters, digits and '_' only.
	Table string
}

// Guard makes a SQLite database enforce fencing tokens: it keeps one row per
// resource in a fences table (resource, name, token, lease) and advances it in the
// caller's own transaction (FenceTx), so that any set of writes in that transaction
// is fenced together. SQLite has one writer at a time, so the fenced check and
// write cannot interleave with another writer's. For tables with their own fence
// columns, see Row.
//
// A Guard is safe for concurrent use.
type Guard struct {
	g *sqlfence.Guard
}

var _ fence.Guard = (*Guard)(nil)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name or
// a nil db is reported by every method as an error matching fence.ErrInvalid.
func NewGuard(db DB, opts *GuardOptions) *Guard {
	table := DefaultTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	return &Guard{g: sqlfence.NewGuard(dialect, db, table, Schema, DefaultTable)}
}

// Table returns the quoted name of the fences table.
func (g *Guard) Table() string { return g.g.Table() }

// SchemaSQL returns the DDL of the guard's fences table (Schema with its name).
func (g *Guard) SchemaSQL() string { return g.g.SchemaSQL() }

// CreateSchema creates the fences table if it does not exist. It returns an error
// matching ErrSchema or fence.ErrUnavailable if SQLite refuses.
func (g *Guard) CreateSchema(ctx context.Context) error { return g.g.CreateSchema(ctx) }

// FenceTx advances resource's fence to f inside tx, in one statement:
//
//	INSERT INTO T AS f (resource, name, token, lease) VALUES (?, ?, ?, ?)
//	ON CONFLICT (resource) DO UPDATE SET lease = excluded.lease, token = excluded.token
//	WHERE f.name = excluded.name AND (excluded.token > f.token
//	   OR (excluded.token = f.token AND excluded.lease <> '' AND excluded.lease = f.lease))
//	RETURNING 1
//
// A returned row means inserted or advanced; none means refused, and only then a
// second statement reads the stored fence to report it. The write lock SQLite takes
// for the statement is held until tx ends, so every later write of tx is fenced by f.
//
// It returns nil if f was accepted, a *fence.StaleTokenError (fence.ErrStaleToken)
// carrying the highest token if a higher token, or the same token under another or
// an empty lease, was accepted before, a *fence.NamespaceError (fence.ErrNamespace)
// if resource is fenced by another lock, fence.ErrInvalid for a bad resource or fence,
// ErrSchema for a wrong table, ErrConflict when the database stayed locked past the
// busy timeout, and fence.ErrUnavailable or fence.ErrClosed for an unusable
// database. On any error the caller rolls tx back; FenceTx itself changed nothing.
func (g *Guard) FenceTx(ctx context.Context, tx Querier, resource string, f fence.Fence) error {
	return g.g.FenceTx(ctx, tx, resource, f)
}

// Fence advances resource's fence to f in a transaction of its own (see FenceTx), so
// that a new holder fences off a paused predecessor before its first write. It
// returns what FenceTx returns.
func (g *Guard) Fence(ctx context.Context, resource string, f fence.Fence) error {
	return g.g.Fence(ctx, resource, f)
}

// Do runs write in a transaction fenced by f: it begins the transaction, runs
// FenceTx, then write, and commits only if both succeeded; otherwise it rolls
// back, so a refused fence or a failed write leaves nothing behind. Concurrent Do
// calls for one resource run one after the other.
//
// It returns the errors of FenceTx (the refusal, nothing written), write's error
// wrapped, fence.ErrInvalid for a nil write, and the translated error of a failed
// begin or commit (after a failed commit the transaction may or may not have
// committed only if the connection broke: fence.ErrUnavailable).
func (g *Guard) Do(ctx context.Context, resource string, f fence.Fence, write func(tx *sql.Tx) error) error {
	return g.g.Do(ctx, resource, f, write)
}

// Highest returns the highest fence accepted for resource. It returns an error
// matching fence.ErrNotFound if resource was never fenced, fence.ErrInvalid for a bad
// resource and ErrSchema for a wrong table.
func (g *Guard) Highest(ctx context.Context, resource string) (fence.Fence, error) {
	return g.g.Highest(ctx, resource)
}
