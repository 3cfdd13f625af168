package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/fencelock/fence"
)

// Default fence column names of a Row.
const (
	DefaultFenceName  = "fence_name"
	DefaultFenceToken = "fence_token"
	DefaultFenceLease = "fence_lease"
)

// Row is the row fence: a table whose rows carry their own fence in three
// columns (lock name, token, lease), written by one conditional statement together
// with the data that applies only if fence.Admit allows. Declare the fence columns
// as FenceColumnsDDL returns them, for MariaDB
//
//	fence_name  VARBINARY(255) NOT NULL DEFAULT '',
//	fence_token BIGINT NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
//	fence_lease VARBINARY(128) NOT NULL DEFAULT ''
//
// and for SQLite the same with TEXT, INTEGER and TEXT; the defaults let existing
// rows count as never fenced (a stored token of 0 admits any fence). Key must be
// the table's primary key or its only unique key: the upsert arbitrates on it (ON
// DUPLICATE KEY UPDATE fires on any unique key, ON CONFLICT names it), and every
// statement finds the row through it. No other index is needed. A row fence
// protects only rows the holder writes; a stale holder can still insert rows under
// new keys. Fence every write with Guard.FenceTx where that matters.
//
// Set the fields, then use the Row; its fields are read (and validated) at first
// use, and changing them afterwards has no effect. A Row is safe for concurrent
// use.
type Row[D Dialector] struct {
	Table      string   // table name, optionally qualified once (db.table, schema.table)
	Key        string   // key column
	Columns    []string // value columns, written by Update and Upsert in this order
	FenceName  string   // default DefaultFenceName
	FenceToken string   // default DefaultFenceToken
	FenceLease string   // default DefaultFenceLease

	once sync.Once
	c    *rowSQL
}

// compiled returns the Row's statements, compiled by the first call.
func (r *Row[D]) compiled() *rowSQL {
	r.once.Do(func() {
		r.c = newRowSQL(dialectOf[D](), r.Table, r.Key, r.Columns, r.FenceName, r.FenceToken, r.FenceLease)
	})
	return r.c
}

// SQL returns the three statements the row runs, for logs and review: the
// conditional UPDATE, the upsert, and the fence-only upsert. It returns
// fence.ErrInvalid for a malformed Row.
func (r *Row[D]) SQL() (update, upsert, fenceOnly string, err error) {
	return r.compiled().sql()
}

// FenceColumnsDDL returns the definitions of the fence columns, with the
// configured names, for a CREATE TABLE or ALTER TABLE ... ADD COLUMN (one column
// per ALTER in SQLite). Their defaults mark existing rows as never fenced. It
// returns fence.ErrInvalid for a malformed Row.
func (r *Row[D]) FenceColumnsDDL() (string, error) {
	return r.compiled().fenceColumnsDDL()
}

// Update writes values to the existing row key if f is admitted, in one statement:
//
//	UPDATE T SET col1 = ?, ..., fence_name = ?, fence_lease = ?, fence_token = ?
//	WHERE key = ? AND (fence_token = 0 OR (fence_name = ? AND (? > fence_token
//	      OR (? = fence_token AND ? <> '' AND ? = fence_lease))))
//
// When it changes no row, a read in the same transaction (locking on MariaDB)
// tells why. It returns nil if the row was written, an error matching
// fence.ErrNotFound if there is no row key, a *fence.StaleTokenError or
// *fence.NamespaceError if the stored fence refuses f (the row is unchanged),
// fence.ErrInvalid for a bad fence, a wrong number of values, or a connection that
// counts changed rows (the dialect's FoundRowsErr), ErrSchema for a wrong table or
// a NULL fence, and ErrConflict, fence.ErrUnavailable or fence.ErrClosed as
// Guard.FenceTx.
func (r *Row[D]) Update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.compiled().update(ctx, q, f, key, values...)
}

// Upsert inserts row key with values and fence f, or updates it if its stored
// fence admits f, in one statement (the dialect's UpsertSQL: INSERT ... ON
// DUPLICATE KEY UPDATE on MariaDB, INSERT ... ON CONFLICT DO UPDATE ... WHERE on
// SQLite). It returns nil if the row was written, a *fence.StaleTokenError (with
// the highest token) or *fence.NamespaceError if the stored fence refuses f (the
// row is unchanged), and the errors of Update otherwise.
func (r *Row[D]) Upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.compiled().upsert(ctx, q, f, key, values...)
}

// Fence advances the fence of row key to f without touching its values, inserting
// the row (with the value columns' defaults) if it is missing, so that a new
// holder fences off a paused predecessor before its first write. It returns what
// Upsert returns.
func (r *Row[D]) Fence(ctx context.Context, q Querier, f fence.Fence, key any) error {
	return r.compiled().fenceOnly(ctx, q, f, key)
}

// Highest returns the fence stored in row key, the zero Fence if the row was never
// fenced. It returns fence.ErrNotFound if there is no such row, ErrSchema for a
// NULL fence column or a wrong table, and fence.ErrInvalid for a malformed Row or
// a nil q or key.
func (r *Row[D]) Highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	return r.compiled().highest(ctx, q, key)
}

// rowSQL is a Row compiled for a dialect.
type rowSQL struct {
	d       *Dialect
	table   string // as given, for messages
	columns int
	err     error

	updateSQL, upsertSQL, fenceSQL, readSQL, readLockSQL, ddl string
}

func newRowSQL(d *Dialect, table, key string, columns []string, fn, ft, fl string) *rowSQL {
	r := &rowSQL{d: d, table: table, columns: len(columns)}
	r.err = r.compile(table, key, columns, fn, ft, fl)
	return r
}

func (r *rowSQL) compile(tableName, keyName string, columns []string, fenceName, fenceToken, fenceLease string) error {
	orDefault := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	table, err := r.d.quoteIdent(tableName)
	if err != nil {
		return err
	}
	names := append([]string{keyName}, columns...)
	names = append(names, orDefault(fenceName, DefaultFenceName), orDefault(fenceToken, DefaultFenceToken), orDefault(fenceLease, DefaultFenceLease))
	q := make([]string, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		if q[i], err = r.d.quoteIdent(n); err != nil {
			return err
		}
		if strings.Contains(n, ".") {
			return &fence.InvalidError{Field: "column", Value: n, Reason: "must not be qualified"}
		}
		if seen[strings.ToLower(n)] {
			return &fence.InvalidError{Field: "column", Value: n, Reason: "appears twice"}
		}
		seen[strings.ToLower(n)] = true
	}
	key, cols := q[0], q[1:len(q)-3]
	fn, ft, fl := q[len(q)-3], q[len(q)-2], q[len(q)-1]
	var set []string
	for _, c := range cols {
		set = append(set, c+" = ?")
	}
	set = append(set, fn+" = ?", fl+" = ?", ft+" = ?")
	// A token of 0 marks a row that was never fenced (fence columns added to a
	// table with rows, with the DDL's defaults): it admits any fence.
	r.updateSQL = "UPDATE " + table + " SET " + strings.Join(set, ", ") + " WHERE " + key + " = ? AND (" + ft + " = 0 OR " + AdmitSQL(fn, ft, fl) + ")"
	r.ddl = fmt.Sprintf("%s %s NOT NULL DEFAULT '',\n%s %s NOT NULL DEFAULT 0 CHECK (%s >= 0),\n%s %s NOT NULL DEFAULT ''", fn, r.d.NameType, ft, r.d.TokenType, ft, fl, r.d.LeaseType)
	r.upsertSQL = r.d.UpsertSQL(table, key, cols, fn, ft, fl)
	r.fenceSQL = r.d.UpsertSQL(table, key, nil, fn, ft, fl)
	r.readSQL = "SELECT " + fn + ", " + ft + ", " + fl + " FROM " + table + " WHERE " + key + " = ?"
	r.readLockSQL = r.readSQL + r.d.LockSuffix
	return nil
}

func (r *rowSQL) sql() (update, upsert, fenceOnly string, err error) {
	if r.err != nil {
		return "", "", "", r.d.errorf("row: %w", r.err)
	}
	return r.updateSQL, r.upsertSQL, r.fenceSQL, nil
}

func (r *rowSQL) fenceColumnsDDL() (string, error) {
	if r.err != nil {
		return "", r.d.errorf("row: %w", r.err)
	}
	return r.ddl, nil
}

func (r *rowSQL) update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("update %s key %v", r.table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return r.d.errorf("%s: %w", what, err)
	}
	args := make([]any, 0, len(values)+9)
	args = append(args, values...)
	args = append(args, f.Name, f.LeaseID, int64(f.Token), key)
	args = append(args, AdmitArgs(f)...)
	n, err := r.d.execRows(ctx, q, what, r.updateSQL, args...)
	if err != nil {
		return err
	}
	switch {
	case n == 1:
		return nil
	case n > 1:
		return r.d.errorf("%s: %w: %d rows matched, the key column is not unique", what, ErrSchema, n)
	}
	stored, err := r.d.scanFence(q.QueryRowContext(ctx, r.readLockSQL, key), true)
	if errors.Is(err, sql.ErrNoRows) {
		return r.d.errorf("%s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return r.d.Wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return r.d.Wrap(what, err)
	}
	if r.d.FoundRowsErr != nil && stored == f {
		// The row matched but nothing changed, and the driver counted changed rows.
		return r.d.errorf("%s: %w", what, r.d.FoundRowsErr)
	}
	// The row was missing when the UPDATE ran and was inserted since.
	return r.d.errorf("%s: %w", what, fence.ErrNotFound)
}

func (r *rowSQL) upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("upsert %s key %v", r.table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return r.d.errorf("%s: %w", what, err)
	}
	return r.run(ctx, q, r.upsertSQL, what, f, key, values)
}

func (r *rowSQL) fenceOnly(ctx context.Context, q Querier, f fence.Fence, key any) error {
	what := fmt.Sprintf("fence %s key %v", r.table, key)
	if err := r.check(q, f, key, nil, false); err != nil {
		return r.d.errorf("%s: %w", what, err)
	}
	return r.run(ctx, q, r.fenceSQL, what, f, key, nil)
}

func (r *rowSQL) run(ctx context.Context, q Querier, stmt, what string, f fence.Fence, key any, values []any) error {
	accepted, err := r.d.Run(ctx, q, stmt, r.d.UpsertArgs(key, values, f))
	if err != nil {
		return r.d.Wrap(what, err)
	}
	if accepted {
		return nil
	}
	return r.d.refused(ctx, q, r.readLockSQL, key, true, f, what, "(do the fence columns compare bytes?)")
}

func (r *rowSQL) check(q Querier, f fence.Fence, key any, values []any, countValues bool) error {
	if r.err != nil {
		return r.err
	}
	if q == nil {
		return &fence.InvalidError{Field: "querier", Value: "<nil>", Reason: "is nil"}
	}
	if key == nil {
		return &fence.InvalidError{Field: "key", Value: "<nil>", Reason: "is nil"}
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if countValues && len(values) != r.columns {
		return &fence.InvalidError{Field: "values", Value: fmt.Sprint(len(values)), Reason: fmt.Sprintf("the row has %d value columns", r.columns)}
	}
	return nil
}

func (r *rowSQL) highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	what := fmt.Sprintf("highest %s key %v", r.table, key)
	if r.err != nil {
		return fence.Fence{}, r.d.errorf("%s: %w", what, r.err)
	}
	if q == nil || key == nil {
		return fence.Fence{}, r.d.errorf("%s: %w", what, &fence.InvalidError{Field: "querier", Value: "<nil>", Reason: "querier and key must not be nil"})
	}
	f, err := r.d.scanFence(q.QueryRowContext(ctx, r.readSQL, key), true)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, r.d.errorf("%s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, r.d.Wrap(what, err)
	}
	return f, nil
}
