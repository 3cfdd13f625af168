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

// GuardOptions configure a Guard. The zero value (or nil) uses DefaultTable.
type GuardOptions struct {
	// Table is the fences table, optionally qualified once by a database or an
	// attached schema ("app.fence_resources"); the dialect says which characters
	// a name may hold.
	Table string
}

// Guard is the resource fence: a fences table with one row per resource
// (resource, name, token, lease) holding the highest fence accepted for it.
// FenceTx advances that row inside the caller's own transaction, so every write
// of the transaction is fenced together, inserts of new rows included, and is
// committed with the fence or not at all; the database's lock on the fence row
// (MariaDB's row lock, SQLite's one writer) serialises writers of one resource.
// For tables whose rows carry their own fence columns, see Row.
//
// Guard implements fence.Guard. It is safe for concurrent use.
type Guard[D Dialector] struct {
	d     *Dialect
	db    DB
	table string // quoted
	err   error  // a bad table name or nil db, returned by every method

	schemaSQL, fenceSQL, readSQL, readLockSQL string
}

// NewGuard returns a Guard of dialect D over db with the fences table of opts. A
// bad table name or a nil db is reported by every method as an error matching
// fence.ErrInvalid.
func NewGuard[D Dialector](db DB, opts *GuardOptions) *Guard[D] {
	d := dialectOf[D]()
	table := DefaultTable
	if opts != nil && opts.Table != "" {
		table = opts.Table
	}
	g := &Guard[D]{d: d, db: db}
	q, err := d.quoteIdent(table)
	if err != nil {
		g.err = d.errorf("new guard: %w", err)
		return g
	}
	if db == nil {
		g.err = d.errorf("new guard: %w", errNilDB)
		return g
	}
	g.table = q
	g.schemaSQL = strings.Replace(d.Schema, d.Quote+DefaultTable+d.Quote, q, 1)
	g.fenceSQL = d.FenceSQL(q)
	g.readSQL = "SELECT name, token, lease FROM " + q + " WHERE resource = ?"
	g.readLockSQL = g.readSQL + d.LockSuffix
	return g
}

// Table returns the quoted name of the fences table ("" for a bad name).
func (g *Guard[D]) Table() string { return g.table }

// SchemaSQL returns the DDL of the guard's fences table: the dialect's Schema
// under the guard's table name.
func (g *Guard[D]) SchemaSQL() string { return g.schemaSQL }

// CreateSchema creates the fences table if it does not exist, then runs Check. It
// returns an error matching ErrSchema if a table of that name exists with another
// shape, fence.ErrInvalid if the connection counts changed rather than found rows
// (see Check), and fence.ErrUnavailable if the database refuses.
func (g *Guard[D]) CreateSchema(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	if _, err := g.db.ExecContext(ctx, g.schemaSQL); err != nil {
		return g.d.Wrap("create schema "+g.table, err)
	}
	return g.Check(ctx)
}

// Check verifies, in a transaction it rolls back, that the fences table accepts a
// fence row and that an update which changes nothing is counted as a matched row,
// which Row.Update needs to tell a stale write from a missing row (MariaDB and
// MySQL count that way only with clientFoundRows=true). It returns an error
// matching ErrSchema for a missing or misshapen table and the dialect's
// FoundRowsErr (fence.ErrInvalid) for a connection that counts changed rows.
func (g *Guard[D]) Check(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return g.d.Wrap("check", err)
	}
	defer func() { _ = tx.Rollback() }()
	what := "check " + g.table
	probe := "fence/probe/" + driver.NewLeaseID()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+g.table+" (resource, name, token, lease) VALUES (?, ?, 1, '')", probe, probe); err != nil {
		return g.d.Wrap(what, err)
	}
	n, err := g.d.execRows(ctx, tx, what, "UPDATE "+g.table+" SET token = token WHERE resource = ?", probe)
	if err != nil {
		return err
	}
	if n != 1 {
		if g.d.FoundRowsErr != nil {
			return g.d.errorf("check: %w", g.d.FoundRowsErr)
		}
		return g.d.errorf("%s: %w: an update of the probe row counted %d rows", what, ErrSchema, n)
	}
	return nil
}

// FenceTx advances resource's fence to f inside tx, in one statement (the
// dialect's FenceSQL): it inserts the fence row, or raises it if fence.Admit
// allows, and the database holds the row's lock until tx ends, so writers of one
// resource are serialised and every write tx makes after FenceTx is fenced by f.
// Only a refusal reads the row again to report the highest fence.
//
// It returns nil if f was accepted, a *fence.StaleTokenError (fence.ErrStaleToken)
// carrying the highest token if a higher token, or the same token under another
// or an empty lease, was accepted before, a *fence.NamespaceError
// (fence.ErrNamespace) if resource is fenced by another lock, fence.ErrInvalid for
// a bad resource or fence or a nil tx, ErrSchema for a wrong table, ErrConflict
// for a deadlock, lock wait timeout or busy database, and fence.ErrUnavailable or
// fence.ErrClosed for a broken or closed connection. On any error the caller rolls
// tx back; FenceTx itself changed nothing.
func (g *Guard[D]) FenceTx(ctx context.Context, tx Querier, resource string, f fence.Fence) error {
	if err := g.validate(tx, resource, f); err != nil {
		return err
	}
	what := fmt.Sprintf("fence %q", resource)
	accepted, err := g.d.Run(ctx, tx, g.fenceSQL, g.d.FenceArgs(resource, f))
	if err != nil {
		return g.d.Wrap(what, err)
	}
	if accepted {
		return nil
	}
	return g.d.refused(ctx, tx, g.readLockSQL, resource, false, f, what, g.d.GuardHint)
}

// Fence advances resource's fence to f in a transaction of its own (see FenceTx),
// so that a new holder fences off a paused predecessor before its first write. It
// returns what FenceTx returns, and the translated error of a failed begin or
// commit.
func (g *Guard[D]) Fence(ctx context.Context, resource string, f fence.Fence) error {
	return g.inTx(ctx, "fence", resource, f, nil)
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
func (g *Guard[D]) Do(ctx context.Context, resource string, f fence.Fence, write func(tx *sql.Tx) error) error {
	if write == nil {
		if err := g.validate(g.db, resource, f); err != nil {
			return err
		}
		return g.d.errorf("do %q: %w", resource, &fence.InvalidError{Field: "write", Value: "<nil>", Reason: "is nil"})
	}
	return g.inTx(ctx, "do", resource, f, write)
}

// inTx runs FenceTx and then write (if not nil) in a transaction of its own; op
// names the method in errors.
func (g *Guard[D]) inTx(ctx context.Context, op, resource string, f fence.Fence, write func(tx *sql.Tx) error) error {
	if err := g.validate(g.db, resource, f); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return g.d.Wrap(fmt.Sprintf("%s %q: begin", op, resource), err)
	}
	if err := g.FenceTx(ctx, tx, resource, f); err != nil {
		_ = tx.Rollback()
		return err
	}
	if write != nil {
		if err := write(tx); err != nil {
			_ = tx.Rollback()
			return g.d.errorf("%s %q: write failed, rolled back: %w", op, resource, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return g.d.Wrap(fmt.Sprintf("%s %q: commit", op, resource), err)
	}
	return nil
}

// Highest returns the highest fence accepted for resource. It returns an error
// matching fence.ErrNotFound if resource was never fenced, fence.ErrInvalid for a
// bad resource, and ErrSchema for a wrong table.
func (g *Guard[D]) Highest(ctx context.Context, resource string) (fence.Fence, error) {
	if g.err != nil {
		return fence.Fence{}, g.err
	}
	if err := fence.ValidateKey(resource); err != nil {
		return fence.Fence{}, g.d.errorf("highest: %w", err)
	}
	f, err := g.d.scanFence(g.db.QueryRowContext(ctx, g.readSQL, resource), false)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, g.d.errorf("highest %q: %w", resource, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, g.d.Wrap(fmt.Sprintf("highest %q", resource), err)
	}
	return f, nil
}

func (g *Guard[D]) validate(q Querier, resource string, f fence.Fence) error {
	if g.err != nil {
		return g.err
	}
	if q == nil {
		return g.d.errorf("fence %q: %w", resource, &fence.InvalidError{Field: "tx", Value: "<nil>", Reason: "is nil"})
	}
	if err := fence.ValidateKey(resource); err != nil {
		return g.d.errorf("fence: %w", err)
	}
	if err := f.Validate(); err != nil {
		return g.d.errorf("fence %q: %w", resource, err)
	}
	return nil
}
