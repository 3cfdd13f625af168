package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fence"
	"github.com/jackc/pgx/v5"
)

// DefaultGuardTable is the fences table a Guard uses when GuardOptions.Table is empty.
const DefaultGuardTable = "fence_resources"

// Schema is the DDL of the fences table under its default name (see
// Guard.CreateSchema, which uses the configured name). The primary key is the
// only index needed: every statement finds the row by resource, and its unique
// index is what ON CONFLICT arbitrates on and what the row lock hangs off.
const Schema = `CREATE TABLE IF NOT EXISTS fence_resources (
    resource text PRIMARY KEY,
    name     text   NOT NULL,
    token    bigint NOT NULL CHECK (token > 0),
    lease    text   NOT NULL
)`

// GuardOptions configure a Guard. The zero value (or nil) is usable.
type GuardOptions struct {
	// Table is the fences table, "table" or "schema.table" (ASCII letters, digits,
	// underscores). Default DefaultGuardTable.
	Table string
}

// Guard is the resource fence on PostgreSQL: a fences table with one row per
// resource holding the highest fence accepted for it (lock name, token, lease).
// FenceTx advances that row inside the caller's own transaction, so every write
// the transaction makes is fenced together and committed (or rolled back) with
// the fence; the row lock the statement takes serialises concurrent writers of
// the same resource until the transaction ends.
//
// Guard implements fence.Guard. It is safe for concurrent use.
type Guard struct {
	db    DB
	table string // quoted
	err   error  // a bad option, reported by every method

	fenceSQL, highestSQL string
}

var _ fence.Guard = (*Guard)(nil)

// NewGuard returns a Guard on db (usually a *pgxpool.Pool). A malformed
// GuardOptions.Table is reported, matching fence.ErrInvalid, by every method.
func NewGuard(db DB, opts *GuardOptions) *Guard {
	var o GuardOptions
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultGuardTable
	}
	g := &Guard{db: db}
	g.table, g.err = quoteIdent("table", o.Table, true)
	if db == nil && g.err == nil {
		g.err = fmt.Errorf("postgres: guard: nil DB: %w", fence.ErrInvalid)
	}
	// The upsert inserts the first fence, or advances the row only if fence.Admit
	// allows. When the WHERE clause is false PostgreSQL still locks the row (ON
	// CONFLICT DO UPDATE locks every conflicting row), so the fence that refused
	// us cannot change before the caller's transaction ends.
	g.fenceSQL = `INSERT INTO ` + g.table + ` AS r (resource, name, token, lease) VALUES ($1, $2, $3, $4)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, lease = excluded.lease
WHERE ` + admitSQL("r.name", "r.token", "r.lease", "excluded.name", "excluded.token", "excluded.lease") + `
RETURNING true`
	g.highestSQL = `SELECT name, token, lease FROM ` + g.table + ` WHERE resource = $1`
	return g
}

// CreateSchema creates the fences table if it does not exist (the DDL of
// Schema, under the configured name). It returns an error matching
// fence.ErrUnavailable if the database cannot be reached.
func (g *Guard) CreateSchema(ctx context.Context) error {
	if g.err != nil {
		return g.err
	}
	return createTable(ctx, g.db, Schema, DefaultGuardTable, g.table)
}

// createTable runs schema, the DDL of the table defaultName, for the quoted name
// table. It returns the translated error of a refused statement.
func createTable(ctx context.Context, db DB, schema, defaultName, table string) error {
	ddl := strings.Replace(schema, " EXISTS "+defaultName+" ", " EXISTS "+table+" ", 1)
	if _, err := db.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("postgres: create table %s: %w", table, dbErr(err))
	}
	return nil
}

// FenceTx advances resource's fence to f inside tx, the caller's transaction:
// the writes tx makes are then fenced together, and committed with the fence or
// not at all. It runs one statement (an INSERT ... ON CONFLICT DO UPDATE whose
// WHERE clause is fence.Admit's rule) that locks the fence row until tx ends, so
// concurrent writers of resource queue behind it.
//
// It returns nil if f was admitted, a *fence.StaleTokenError (fence.ErrStaleToken,
// carrying the highest token accepted) or a *fence.NamespaceError
// (fence.ErrNamespace) if not, fence.ErrInvalid for a bad resource or fence,
// ErrSchema if the table is missing or wrong, ErrConflict on a serialization
// failure, and fence.ErrUnavailable if the connection failed. On any error roll
// tx back; the guard wrote nothing:
//
//	if err := g.FenceTx(ctx, tx, "ledger", lease.Fence()); err != nil {
//		return errors.Join(err, tx.Rollback(ctx))
//	}
func (g *Guard) FenceTx(ctx context.Context, tx Querier, resource string, f fence.Fence) error {
	if err := checkFence(g.err, resource, f); err != nil {
		return fmt.Errorf("postgres: fence: %w", err)
	}
	if tx == nil {
		return fmt.Errorf("postgres: fence %q: nil transaction: %w", resource, fence.ErrInvalid)
	}
	if err := g.fence(ctx, tx, resource, f); err != nil {
		return fmt.Errorf("postgres: fence %q: %w", resource, err)
	}
	return nil
}

// Fence advances resource's fence to f without writing data, so a new holder
// fences off paused predecessors before its first write. It runs the statement
// of FenceTx as a transaction of its own. It returns what FenceTx returns.
func (g *Guard) Fence(ctx context.Context, resource string, f fence.Fence) error {
	if err := checkFence(g.err, resource, f); err != nil {
		return fmt.Errorf("postgres: fence: %w", err)
	}
	if err := g.fence(ctx, g.db, resource, f); err != nil {
		return fmt.Errorf("postgres: fence %q: %w", resource, err)
	}
	return nil
}

// Do runs write in a new transaction on the Guard's DB, fenced by f: it begins
// the transaction, runs FenceTx, then write, and commits only if both
// succeeded; otherwise it rolls back, so a refused fence or a failed write
// leaves nothing behind. Concurrent Do calls for one resource run one after the
// other (the fence row's lock).
//
// It returns the errors of FenceTx (the refusal, with nothing written), write's
// error wrapped, fence.ErrInvalid for a nil write, ErrConflict if the commit
// failed with a serialization failure, and fence.ErrUnavailable if the
// connection failed (during the commit, the transaction may or may not have
// committed).
func (g *Guard) Do(ctx context.Context, resource string, f fence.Fence, write func(tx pgx.Tx) error) (err error) {
	if err := checkFence(g.err, resource, f); err != nil {
		return fmt.Errorf("postgres: do: %w", err)
	}
	if write == nil {
		return fmt.Errorf("postgres: do %q: nil write function: %w", resource, fence.ErrInvalid)
	}
	tx, err := g.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: do %q: begin: %w", resource, dbErr(err))
	}
	defer func() {
		if err != nil {
			// The rollback's own error adds nothing: the transaction is gone either way.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := g.fence(ctx, tx, resource, f); err != nil {
		return fmt.Errorf("postgres: do %q: %w", resource, err)
	}
	if err := write(tx); err != nil {
		return fmt.Errorf("postgres: do %q: write failed, rolled back: %w", resource, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: do %q: commit: %w", resource, dbErr(err))
	}
	return nil
}

// Highest returns the highest fence resource has accepted (with its lease id).
// It returns fence.ErrNotFound if resource was never fenced, ErrCorrupt if its
// row was edited into something the guard never writes, and the errors of
// FenceTx for bad input and database failures.
func (g *Guard) Highest(ctx context.Context, resource string) (fence.Fence, error) {
	if g.err != nil {
		return fence.Fence{}, g.err
	}
	if err := fence.ValidateKey(resource); err != nil {
		return fence.Fence{}, fmt.Errorf("postgres: highest: %w", err)
	}
	f, err := g.highest(ctx, g.db, resource)
	if err != nil {
		return fence.Fence{}, fmt.Errorf("postgres: highest %q: %w", resource, err)
	}
	return f, nil
}

// checkFence returns setupErr (a bad option of the Guard or KV) if not nil, else
// what validateFence says of resource and f.
func checkFence(setupErr error, resource string, f fence.Fence) error {
	if setupErr != nil {
		return setupErr
	}
	return validateFence(resource, f)
}

// maxFenceAttempts bounds the retries of a fence statement whose refusal could
// not be explained (the row vanished or changed between two autocommit
// statements).
const maxFenceAttempts = 3

func (g *Guard) fence(ctx context.Context, q Querier, resource string, f fence.Fence) error {
	for attempt := 1; ; attempt++ {
		var ok bool
		err := q.QueryRow(ctx, g.fenceSQL, resource, f.Name, int64(f.Token), f.LeaseID).Scan(&ok)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return dbErr(err)
		}
		// Refused. Inside the caller's transaction the row is locked by the
		// statement above, so this reads the fence that refused us. In autocommit
		// it may read a later one, which can only be higher.
		highest, err := g.highest(ctx, q, resource)
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			return err
		}
		if err == nil {
			if err := fence.Admit(resource, highest, f); err != nil {
				return err
			}
		}
		if attempt == maxFenceAttempts {
			return fmt.Errorf("%w: the fence row kept changing under concurrent writers (deleted by hand?)", fence.ErrUnavailable)
		}
	}
}

func (g *Guard) highest(ctx context.Context, q Querier, resource string) (fence.Fence, error) {
	var s storedFence
	err := q.QueryRow(ctx, g.highestSQL, resource).Scan(&s.name, &s.token, &s.lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Fence{}, fence.ErrNotFound
	}
	if err != nil {
		return fence.Fence{}, dbErr(err)
	}
	return s.fence()
}
