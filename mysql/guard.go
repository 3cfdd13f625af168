package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/sqlfence"
)

// DefaultTable is the fences table a Guard uses when GuardOptions.Table is empty.
const DefaultTable = "fence_resources"

// Schema is the DDL of the default fences table, as CreateSchema runs it. The
// primary key on resource is the only index the guard needs: every statement looks
// a fence up by resource. The text columns are VARBINARY so that resources, lock
// names and lease ids compare byte for byte (no collation folds case or pads spaces).
const Schema = "CREATE TABLE IF NOT EXISTS `fence_resources` (\n" +
	"  resource VARBINARY(255) NOT NULL PRIMARY KEY,\n" +
	"  name     VARBINARY(255) NOT NULL,\n" +
	"  token    BIGINT NOT NULL CHECK (token > 0),\n" +
	"  lease    VARBINARY(128) NOT NULL\n" +
	") ENGINE=InnoDB"

// Querier runs statements: a *sql.Tx for writes fenced together with the caller's
// own, or a *sql.DB or *sql.Conn for a single autocommitted statement.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is what a Guard needs of the database: a *sql.DB opened with the
// go-sql-driver/mysql driver and a DSN that sets clientFoundRows=true (see Open).
type DB interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// GuardOptions configure a Guard. The zero value (or nil) uses DefaultTable.
type GuardOptions struct {
	// Table is the fences table, optionally qualified by a database
	// ("app.fence_resources"). Letters, digits, '_' and '$' only.
	Table string
}

// Guard makes a MariaDB or MySQL database enforce fencing tokens. It keeps one row
// per resource in a fences table (resource, name, token, lease) and advances it in
// the caller's own transaction (FenceTx), so that any set of writes in that
// transaction is fenced together; the fence row's lock serialises writers of one
// resource. For tables that carry their own fence columns, see Row.
//
// A Guard is safe for concurrent use.
type Guard struct {
	g *sqlfence.Guard
}

var _ fence.Guard = (*Guard)(nil)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name is
// reported by every method as an error matching fence.ErrInvalid.
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

// CreateSchema creates the fences table if it does not exist, then runs Check. It
// returns an error matching ErrSchema if a table of that name exists with another
// shape, and fence.ErrInvalid if the connection counts changed rather than found
// rows.
func (g *Guard) CreateSchema(ctx context.Context) error {
	if err := g.g.CreateSchema(ctx); err != nil {
		return err
	}
	return g.Check(ctx)
}

// Check verifies, in a transaction it rolls back, that the fences table accepts a
// fence row and that the connection reports found rows (clientFoundRows=true),
// which Row.Update needs to tell a stale write from a missing row. It returns an
// error matching ErrSchema for a missing or misshapen table and fence.ErrInvalid for
// a DSN without clientFoundRows=true.
func (g *Guard) Check(ctx context.Context) error {
	if err := g.g.Err(); err != nil {
		return err
	}
	tx, err := g.g.DB().BeginTx(ctx, nil)
	if err != nil {
		return wrap("check", err)
	}
	defer func() { _ = tx.Rollback() }()
	table := g.g.Table()
	probe := "fence/probe/" + driver.NewLeaseID()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (resource, name, token, lease) VALUES (?, ?, 1, '')", probe, probe); err != nil {
		return wrap("check "+table, err)
	}
	res, err := tx.ExecContext(ctx, "UPDATE "+table+" SET token = token WHERE resource = ?", probe)
	if err != nil {
		return wrap("check "+table, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("mysql: check: %w", errNoFoundRows)
	}
	return nil
}

var errNoFoundRows = &fence.InvalidError{Field: "dsn", Value: "clientFoundRows", Reason: "must be true: the connection counts changed rows, so an unchanged fenced write looks stale (use mysql.Open or add clientFoundRows=true)"}

// FenceTx advances resource's fence to f inside tx, in one statement: it inserts the
// fence row, or raises it if fence.Admit allows, and takes the row's lock until tx
// ends, so writers of one resource are serialised and every write tx makes after
// FenceTx is fenced by f. The statement (with T the table) is
//
//	INSERT INTO T (resource, name, token, lease) VALUES (?, ?, ?, ?)
//	ON DUPLICATE KEY UPDATE
//	  lease = IF(LAST_INSERT_ID(IF(<admit>, accepted, rejected)) = accepted, ?, lease),
//	  token = IF(<admit>, ?, token)
//	<admit>: name = ? AND (? > token OR (? = token AND ? <> '' AND ? = lease))
//
// and the marker it leaves in LAST_INSERT_ID tells accepted from rejected in the same
// round trip. Only a rejection reads the row again (SELECT ... FOR UPDATE) to report
// the highest fence. FenceTx sets the session's LAST_INSERT_ID().
//
// It returns nil if f was accepted, a *fence.StaleTokenError (fence.ErrStaleToken)
// carrying the highest token if a higher token, or the same token under another or
// an empty lease, was accepted before, a *fence.NamespaceError (fence.ErrNamespace)
// if resource is fenced by another lock, fence.ErrInvalid for a bad resource or fence,
// ErrSchema for a wrong table, ErrConflict for a deadlock or lock wait timeout, and
// fence.ErrUnavailable or fence.ErrClosed for a broken or closed connection. On any
// error the caller rolls tx back; FenceTx itself changed nothing.
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
