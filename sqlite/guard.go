package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/fencelock/fence"
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
	db    DB
	table string
	err   error

	schemaSQL, fenceSQL, readSQL string
}

var _ fence.Guard = (*Guard)(nil)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name or
// a nil db is reported by every method as an error matching fence.ErrInvalid.
func NewGuard(db DB, opts *GuardOptions) *Guard {
	table := DefaultTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	g := &Guard{db: db}
	q, err := quoteIdent(table)
	if err != nil {
		g.err = fmt.Errorf("sqlite: new guard: %w", err)
		return g
	}
	if db == nil {
		g.err = fmt.Errorf("sqlite: new guard: %w", &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"})
		return g
	}
	g.table = q
	g.schemaSQL = strings.Replace(Schema, `"fence_resources"`, q, 1)
	g.fenceSQL = "INSERT INTO " + q + " AS f (resource, name, token, lease) VALUES (?, ?, ?, ?)" +
		" ON CONFLICT (resource) DO UPDATE SET lease = excluded.lease, token = excluded.token" +
		" WHERE " + admitCond("f.name", "f.token", "f.lease") + " RETURNING 1"
	g.readSQL = "SELECT name, token, lease FROM " + q + " WHERE resource = ?"
	return g
}

// Table returns the quoted name of the fences table.
func (g *Guard) Table() string { return g.table }

// SchemaSQL returns the DDL of the guard's fences table (Schema with its name).
func (g *Guard) SchemaSQL() string { return g.schemaSQL }

// CreateSchema creates the fences table if it does not exist. It returns an error
// matching ErrSchema or fence.ErrUnavailable if SQLite refuses.
func (g *Guard) CreateSchema(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	if _, err := g.db.ExecContext(ctx, g.schemaSQL); err != nil {
		return wrap("create schema "+g.table, err)
	}
	return nil
}

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
	if err := g.validate(tx, resource, f); err != nil {
		return err
	}
	what := fmt.Sprintf("fence %q", resource)
	var one int
	err := tx.QueryRowContext(ctx, g.fenceSQL, resource, f.Name, int64(f.Token), f.LeaseID).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return wrap(what, err)
	}
	stored, err := scanFence(tx.QueryRowContext(ctx, g.readSQL, resource))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: %s: %w: the fence row vanished after a rejection", what, ErrSchema)
		}
		return wrap(what, err)
	}
	if err := fence.Admit(resource, stored, f); err != nil {
		return wrap(what, err)
	}
	return fmt.Errorf("sqlite: %s: %w: SQLite refused %v over %v, which the rule admits (do the columns compare bytes?)", what, ErrSchema, f, stored)
}

// Fence advances resource's fence to f in a transaction of its own (see FenceTx), so
// that a new holder fences off a paused predecessor before its first write. It
// returns what FenceTx returns.
func (g *Guard) Fence(ctx context.Context, resource string, f fence.Fence) error {
	if err := g.validate(g.db, resource, f); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(fmt.Sprintf("fence %q: begin", resource), err)
	}
	if err := g.FenceTx(ctx, tx, resource, f); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return wrap(fmt.Sprintf("fence %q: commit", resource), err)
	}
	return nil
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
	if err := g.validate(g.db, resource, f); err != nil {
		return err
	}
	if write == nil {
		return fmt.Errorf("sqlite: do %q: %w", resource, &fence.InvalidError{Field: "write", Value: "<nil>", Reason: "is nil"})
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(fmt.Sprintf("do %q: begin", resource), err)
	}
	if err := g.FenceTx(ctx, tx, resource, f); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := write(tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("sqlite: do %q: write failed, rolled back: %w", resource, err)
	}
	if err := tx.Commit(); err != nil {
		return wrap(fmt.Sprintf("do %q: commit", resource), err)
	}
	return nil
}

// Highest returns the highest fence accepted for resource. It returns an error
// matching fence.ErrNotFound if resource was never fenced, fence.ErrInvalid for a bad
// resource and ErrSchema for a wrong table.
func (g *Guard) Highest(ctx context.Context, resource string) (fence.Fence, error) {
	if g.err != nil {
		return fence.Fence{}, g.err
	}
	if err := fence.ValidateKey(resource); err != nil {
		return fence.Fence{}, fmt.Errorf("sqlite: highest: %w", err)
	}
	f, err := scanFence(g.db.QueryRowContext(ctx, g.readSQL, resource))
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, fmt.Errorf("sqlite: highest %q: %w", resource, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, wrap(fmt.Sprintf("highest %q", resource), err)
	}
	return f, nil
}

func (g *Guard) validate(q Querier, resource string, f fence.Fence) error {
	if g.err != nil {
		return g.err
	}
	if q == nil {
		return fmt.Errorf("sqlite: fence %q: %w", resource, &fence.InvalidError{Field: "tx", Value: "<nil>", Reason: "is nil"})
	}
	if err := fence.ValidateKey(resource); err != nil {
		return fmt.Errorf("sqlite: fence: %w", err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("sqlite: fence %q: %w", resource, err)
	}
	return nil
}

// admitCond is fence.Admit's rule over the stored columns and the excluded (new)
// row. A NULL stored column makes it NULL, which refuses the write.
func admitCond(name, token, lease string) string {
	return name + " = excluded." + unqualified(name) + " AND (excluded." + unqualified(token) + " > " + token +
		" OR (excluded." + unqualified(token) + " = " + token + " AND excluded." + unqualified(lease) + " <> '' AND excluded." + unqualified(lease) + " = " + lease + "))"
}

func unqualified(col string) string {
	if i := strings.LastIndexByte(col, '.'); i >= 0 {
		return col[i+1:]
	}
	return col
}

// scanFence reads (name, token, lease) into a fence, refusing NULLs and tokens out
// of range with ErrSchema.
func scanFence(row *sql.Row) (fence.Fence, error) {
	var name, lease sql.NullString
	var token sql.NullInt64
	if err := row.Scan(&name, &token, &lease); err != nil {
		return fence.Fence{}, err
	}
	if !name.Valid || !token.Valid || !lease.Valid {
		return fence.Fence{}, fmt.Errorf("%w: a fence column is NULL (name %v, token %v, lease %v); declare them NOT NULL", ErrSchema, name.Valid, token.Valid, lease.Valid)
	}
	if token.Int64 <= 0 || uint64(token.Int64) > uint64(fence.MaxToken) {
		return fence.Fence{}, fmt.Errorf("%w: stored token %d is outside [1, %d]", ErrSchema, token.Int64, uint64(fence.MaxToken))
	}
	return fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}, nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// quoteIdent validates a table or column name (optionally schema.name) and quotes
// it. Names are never user data: they come from options and Row descriptions.
func quoteIdent(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: "has more than one '.'"}
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: "must be 1 to 64 letters, digits or '_', not starting with a digit"}
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}
