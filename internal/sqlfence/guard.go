package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Guard is the resource fence: one row per resource in a fences table, advanced in
// the caller's transaction. It is safe for concurrent use.
type Guard struct {
	d     *Dialect
	db    DB
	table string // quoted
	err   error  // a bad table name or nil db, returned by every method

	schemaSQL, fenceSQL, readSQL, readLockSQL string
}

// NewGuard returns a Guard of dialect d over db and table. schema is the DDL of
// the default table defaultTable, whose quoted name is replaced by table's. A bad
// table name or nil db is reported by every method as fence.ErrInvalid.
func NewGuard(d *Dialect, db DB, table, schema, defaultTable string) *Guard {
	g := &Guard{d: d, db: db}
	q, err := d.QuoteIdent(table)
	if err != nil {
		g.err = d.Errorf("new guard: %w", err)
		return g
	}
	if db == nil {
		g.err = d.Errorf("new guard: %w", ErrNilDB)
		return g
	}
	g.table = q
	g.schemaSQL = strings.Replace(schema, d.Quote+defaultTable+d.Quote, q, 1)
	g.fenceSQL = d.FenceSQL(q)
	g.readSQL = "SELECT name, token, lease FROM " + q + " WHERE resource = ?"
	g.readLockSQL = g.readSQL + d.LockSuffix
	return g
}

// Err returns the error of NewGuard (bad table or nil db), nil if none.
func (g *Guard) Err() error { return g.err }

// DB returns the database the guard was made over.
func (g *Guard) DB() DB { return g.db }

// Table returns the quoted name of the fences table.
func (g *Guard) Table() string { return g.table }

// SchemaSQL returns the DDL of the guard's fences table.
func (g *Guard) SchemaSQL() string { return g.schemaSQL }

// CreateSchema runs SchemaSQL. It returns the translated error of the database.
func (g *Guard) CreateSchema(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	if _, err := g.db.ExecContext(ctx, g.schemaSQL); err != nil {
		return g.d.Wrap("create schema "+g.table, err)
	}
	return nil
}

// FenceTx advances resource's fence to f inside tx in one statement (the
// dialect's FenceSQL); only a refusal reads the stored fence to report it. It
// returns nil if f was accepted, the error of fence.Admit if refused, and
// fence.ErrInvalid, ErrSchema, ErrConflict, fence.ErrUnavailable or
// fence.ErrClosed as Wrap translates them.
func (g *Guard) FenceTx(ctx context.Context, tx Querier, resource string, f fence.Fence) error {
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
	stored, err := g.d.ScanFence(tx.QueryRowContext(ctx, g.readLockSQL, resource), false)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return g.d.Errorf("%s: %w: the fence row vanished after a rejection", what, g.d.ErrSchema)
		}
		return g.d.Wrap(what, err)
	}
	if err := fence.Admit(resource, stored, f); err != nil {
		return g.d.Wrap(what, err)
	}
	return g.d.Errorf("%s: %w: %s refused %v over %v, which the rule admits %s", what, g.d.ErrSchema, g.d.Refuser, f, stored, g.d.GuardHint)
}

// Fence runs FenceTx in a transaction of its own and returns what it returns.
func (g *Guard) Fence(ctx context.Context, resource string, f fence.Fence) error {
	if err := g.validate(g.db, resource, f); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return g.d.Wrap(fmt.Sprintf("fence %q: begin", resource), err)
	}
	if err := g.FenceTx(ctx, tx, resource, f); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return g.d.Wrap(fmt.Sprintf("fence %q: commit", resource), err)
	}
	return nil
}

// Do runs write in a transaction fenced by f, committing only if FenceTx and
// write both succeed. It returns FenceTx's errors, write's error wrapped,
// fence.ErrInvalid for a nil write, and the translated begin or commit error.
func (g *Guard) Do(ctx context.Context, resource string, f fence.Fence, write func(tx *sql.Tx) error) error {
	if err := g.validate(g.db, resource, f); err != nil {
		return err
	}
	if write == nil {
		return g.d.Errorf("do %q: %w", resource, &fence.InvalidError{Field: "write", Value: "<nil>", Reason: "is nil"})
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return g.d.Wrap(fmt.Sprintf("do %q: begin", resource), err)
	}
	if err := g.FenceTx(ctx, tx, resource, f); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := write(tx); err != nil {
		_ = tx.Rollback()
		return g.d.Errorf("do %q: write failed, rolled back: %w", resource, err)
	}
	if err := tx.Commit(); err != nil {
		return g.d.Wrap(fmt.Sprintf("do %q: commit", resource), err)
	}
	return nil
}

// Highest returns the highest fence accepted for resource: fence.ErrNotFound if
// it was never fenced, fence.ErrInvalid for a bad resource, ErrSchema for a wrong
// table.
func (g *Guard) Highest(ctx context.Context, resource string) (fence.Fence, error) {
	if g.err != nil {
		return fence.Fence{}, g.err
	}
	if err := driver.ValidateKey(resource); err != nil {
		return fence.Fence{}, g.d.Errorf("highest: %w", err)
	}
	f, err := g.d.ScanFence(g.db.QueryRowContext(ctx, g.readSQL, resource), false)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, g.d.Errorf("highest %q: %w", resource, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, g.d.Wrap(fmt.Sprintf("highest %q", resource), err)
	}
	return f, nil
}

func (g *Guard) validate(q Querier, resource string, f fence.Fence) error {
	if g.err != nil {
		return g.err
	}
	if q == nil {
		return g.d.Errorf("fence %q: %w", resource, &fence.InvalidError{Field: "tx", Value: "<nil>", Reason: "is nil"})
	}
	if err := driver.ValidateKey(resource); err != nil {
		return g.d.Errorf("fence: %w", err)
	}
	if err := f.Validate(); err != nil {
		return g.d.Errorf("fence %q: %w", resource, err)
	}
	return nil
}
