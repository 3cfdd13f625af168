package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/fencelock/fence"
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
	db    DB
	table string // quoted
	err   error  // a bad table name, returned by every method

	fenceSQL, readSQL, readLockSQL, schemaSQL string
}

var _ fence.Guard = (*Guard)(nil)

// NewGuard returns a Guard over db with the fences table of opts. A bad table name is
// reported by every method as an error matching fence.ErrInvalid.
func NewGuard(db DB, opts *GuardOptions) *Guard {
	table := DefaultTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	g := &Guard{db: db}
	q, err := quoteIdent(table)
	if err != nil {
		g.err = fmt.Errorf("mysql: new guard: %w", err)
		return g
	}
	if db == nil {
		g.err = fmt.Errorf("mysql: new guard: %w", &fence.InvalidError{Field: "db", Value: "<nil>", Reason: "is nil"})
		return g
	}
	g.table = q
	g.schemaSQL = strings.Replace(Schema, "`fence_resources`", q, 1)
	g.fenceSQL = "INSERT INTO " + q + " (resource, name, token, lease) VALUES (?, ?, ?, ?)" +
		" ON DUPLICATE KEY UPDATE lease = IF(LAST_INSERT_ID(IF(" + admitCond("name", "token", "lease") + ", " + markAccepted + ", " + markRejected + ")) = " + markAccepted + ", ?, lease)," +
		" token = IF(" + admitCond("name", "token", "lease") + ", ?, token)"
	g.readSQL = "SELECT name, token, lease FROM " + q + " WHERE resource = ?"
	g.readLockSQL = g.readSQL + " FOR UPDATE"
	return g
}

// Table returns the quoted name of the fences table.
func (g *Guard) Table() string { return g.table }

// SchemaSQL returns the DDL of the guard's fences table (Schema with its name).
func (g *Guard) SchemaSQL() string { return g.schemaSQL }

// CreateSchema creates the fences table if it does not exist, then runs Check. It
// returns an error matching ErrSchema if a table of that name exists with another
// shape, and fence.ErrInvalid if the connection counts changed rather than found
// rows.
func (g *Guard) CreateSchema(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	if _, err := g.db.ExecContext(ctx, g.schemaSQL); err != nil {
		return wrap("create schema "+g.table, err)
	}
	return g.Check(ctx)
}

// Check verifies, in a transaction it rolls back, that the fences table accepts a
// fence row and that the connection reports found rows (clientFoundRows=true),
// which Row.Update needs to tell a stale write from a missing row. It returns an
// error matching ErrSchema for a missing or misshapen table and fence.ErrInvalid for
// a DSN without clientFoundRows=true.
func (g *Guard) Check(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("check", err)
	}
	defer func() { _ = tx.Rollback() }()
	probe := "fence/probe/" + fence.NewLeaseID()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+g.table+" (resource, name, token, lease) VALUES (?, ?, 1, '')", probe, probe); err != nil {
		return wrap("check "+g.table, err)
	}
	res, err := tx.ExecContext(ctx, "UPDATE "+g.table+" SET token = token WHERE resource = ?", probe)
	if err != nil {
		return wrap("check "+g.table, err)
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
	if err := g.validate(tx, resource, f); err != nil {
		return err
	}
	what := fmt.Sprintf("fence %q", resource)
	tok := int64(f.Token)
	c := condArgs(f)
	args := make([]any, 0, 4+2*len(c)+2)
	args = append(args, resource, f.Name, tok, f.LeaseID)
	args = append(args, c...)
	args = append(args, f.LeaseID)
	args = append(args, c...)
	args = append(args, tok)
	res, err := tx.ExecContext(ctx, g.fenceSQL, args...)
	if err != nil {
		return wrap(what, err)
	}
	accepted, err := outcome(res)
	if err != nil {
		return wrap(what, err)
	}
	if accepted {
		return nil
	}
	return g.rejection(ctx, tx, resource, f)
}

// rejection reads the fence that refused f and returns the error fence.Admit gives.
func (g *Guard) rejection(ctx context.Context, q Querier, resource string, f fence.Fence) error {
	what := fmt.Sprintf("fence %q", resource)
	stored, err := scanFence(q.QueryRowContext(ctx, g.readLockSQL, resource))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("mysql: %s: %w: the fence row vanished after a rejection", what, ErrSchema)
		}
		return wrap(what, err)
	}
	if err := fence.Admit(resource, stored, f); err != nil {
		return wrap(what, err)
	}
	return fmt.Errorf("mysql: %s: %w: the database refused %v over %v, which the rule admits (does the table compare bytes?)", what, ErrSchema, f, stored)
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
		return fmt.Errorf("mysql: do %q: %w", resource, &fence.InvalidError{Field: "write", Value: "<nil>", Reason: "is nil"})
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
		return fmt.Errorf("mysql: do %q: write failed, rolled back: %w", resource, err)
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
		return fence.Fence{}, fmt.Errorf("mysql: highest: %w", err)
	}
	f, err := scanFence(g.db.QueryRowContext(ctx, g.readSQL, resource))
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, fmt.Errorf("mysql: highest %q: %w", resource, fence.ErrNotFound)
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
		return fmt.Errorf("mysql: fence %q: %w", resource, &fence.InvalidError{Field: "tx", Value: "<nil>", Reason: "is nil"})
	}
	if err := fence.ValidateKey(resource); err != nil {
		return fmt.Errorf("mysql: fence: %w", err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("mysql: fence %q: %w", resource, err)
	}
	return nil
}

// The markers FenceTx and Row leave in LAST_INSERT_ID. They are far above any
// AUTO_INCREMENT value a table reaches, so an insert into a table with one is not
// mistaken for an update.
const (
	markAcceptedID int64 = 9223372036854775001
	markRejectedID int64 = 9223372036854775002
)

var (
	markAccepted = strconv.FormatInt(markAcceptedID, 10)
	markRejected = strconv.FormatInt(markRejectedID, 10)
)

// outcome reads the marker of an INSERT ... ON DUPLICATE KEY UPDATE whose update
// clause sets LAST_INSERT_ID(IF(admit, markAccepted, markRejected)).
func outcome(res sql.Result) (accepted bool, err error) {
	id, err := res.LastInsertId()
	if err != nil {
		return false, err
	}
	switch id {
	case markAcceptedID:
		return true, nil
	case markRejectedID:
		return false, nil
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n != 1 {
		return false, fmt.Errorf("%w: the upsert affected %d rows without leaving a marker (is the key the only unique key?)", ErrSchema, n)
	}
	return true, nil // inserted: the update clause did not run
}

// admitCond is fence.Admit's rule in SQL over the stored columns, for a fence
// bound as (name, token, token, lease, lease) by condArgs. A NULL column makes it
// NULL, which refuses the write.
func admitCond(name, token, lease string) string {
	return name + " = ? AND (? > " + token + " OR (? = " + token + " AND ? <> '' AND ? = " + lease + "))"
}

func condArgs(f fence.Fence) []any {
	t := int64(f.Token)
	return []any{f.Name, t, t, f.LeaseID, f.LeaseID}
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

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,63}$`)

// quoteIdent validates a table or column name (optionally db.name) and quotes it.
// Names are never user data: they come from options and Row descriptions.
func quoteIdent(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: "has more than one '.'"}
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", &fence.InvalidError{Field: "identifier", Value: s, Reason: "must be 1 to 64 letters, digits, '_' or '$', not starting with a digit"}
		}
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, "."), nil
}
