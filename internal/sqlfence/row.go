package sqlfence

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

// RowSpec describes a table whose rows carry their own fence columns; empty
// fence column names take the defaults.
type RowSpec struct {
	Table, Key                        string
	Columns                           []string
	FenceName, FenceToken, FenceLease string
}

// Row is the row fence compiled for a dialect. It is safe for concurrent use.
type Row struct {
	d       *Dialect
	table   string // as given, for messages
	columns int
	err     error

	update, upsert, fence, read, readLock, ddl string
}

// NewRow compiles spec for dialect d. A malformed spec is reported by every
// method as fence.ErrInvalid.
func NewRow(d *Dialect, spec RowSpec) *Row {
	r := &Row{d: d, table: spec.Table, columns: len(spec.Columns)}
	r.err = r.compile(spec)
	return r
}

func (r *Row) compile(spec RowSpec) error {
	orDefault := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	table, err := r.d.QuoteIdent(spec.Table)
	if err != nil {
		return err
	}
	names := append([]string{spec.Key}, spec.Columns...)
	names = append(names, orDefault(spec.FenceName, DefaultFenceName), orDefault(spec.FenceToken, DefaultFenceToken), orDefault(spec.FenceLease, DefaultFenceLease))
	q := make([]string, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		if q[i], err = r.d.QuoteIdent(n); err != nil {
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
	// table with rows, with the DDL's defaults): UpdateCond admits any fence.
	r.update = "UPDATE " + table + " SET " + strings.Join(set, ", ") + " WHERE " + key + " = ? AND " + r.d.UpdateCond(fn, ft, fl)
	r.ddl = fmt.Sprintf("%s %s NOT NULL DEFAULT '',\n%s %s NOT NULL DEFAULT 0 CHECK (%s >= 0),\n%s %s NOT NULL DEFAULT ''", fn, r.d.NameType, ft, r.d.TokenType, ft, fl, r.d.LeaseType)
	r.upsert = r.d.UpsertSQL(table, key, cols, fn, ft, fl)
	r.fence = r.d.UpsertSQL(table, key, nil, fn, ft, fl)
	r.read = "SELECT " + fn + ", " + ft + ", " + fl + " FROM " + table + " WHERE " + key + " = ?"
	r.readLock = r.read + r.d.LockSuffix
	return nil
}

// SQL returns the conditional UPDATE, the upsert and the fence-only upsert, or
// fence.ErrInvalid for a malformed spec.
func (r *Row) SQL() (update, upsert, fenceOnly string, err error) {
	if r.err != nil {
		return "", "", "", r.d.Errorf("row: %w", r.err)
	}
	return r.update, r.upsert, r.fence, nil
}

// FenceColumnsDDL returns the fence column definitions, or fence.ErrInvalid for a
// malformed spec.
func (r *Row) FenceColumnsDDL() (string, error) {
	if r.err != nil {
		return "", r.d.Errorf("row: %w", r.err)
	}
	return r.ddl, nil
}

// Update writes values to the existing row key if f is admitted. It returns nil
// if written, fence.ErrNotFound for no row, the error of fence.Admit if refused,
// fence.ErrInvalid for bad input, ErrSchema for a wrong table, and the translated
// database error otherwise.
func (r *Row) Update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("update %s key %v", r.table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return r.d.Errorf("%s: %w", what, err)
	}
	tok := int64(f.Token)
	args := make([]any, 0, len(values)+9)
	args = append(args, values...)
	args = append(args, f.Name, f.LeaseID, tok, key, f.Name, tok, tok, f.LeaseID, f.LeaseID)
	res, err := q.ExecContext(ctx, r.update, args...)
	if err != nil {
		return r.d.Wrap(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return r.d.Wrap(what, err)
	}
	switch {
	case n == 1:
		return nil
	case n > 1:
		return r.d.Errorf("%s: %w: %d rows matched, the key column is not unique", what, r.d.ErrSchema, n)
	}
	stored, err := r.d.ScanFence(q.QueryRowContext(ctx, r.readLock, key), true)
	if errors.Is(err, sql.ErrNoRows) {
		return r.d.Errorf("%s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return r.d.Wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return r.d.Wrap(what, err)
	}
	if r.d.FoundRowsErr != nil && stored == f {
		// The row matched but nothing changed, and the driver counted changed rows.
		return r.d.Errorf("%s: %w", what, r.d.FoundRowsErr)
	}
	// The row was missing when the UPDATE ran and was inserted since.
	return r.d.Errorf("%s: %w", what, fence.ErrNotFound)
}

// Upsert inserts row key with values and fence f, or updates it if its stored
// fence admits f, in one statement. It returns what Update returns, except that a
// missing row is inserted.
func (r *Row) Upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("upsert %s key %v", r.table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return r.d.Errorf("%s: %w", what, err)
	}
	return r.run(ctx, q, r.upsert, what, f, key, values)
}

// Fence advances the fence of row key to f without touching its values,
// inserting the row if it is missing. It returns what Upsert returns.
func (r *Row) Fence(ctx context.Context, q Querier, f fence.Fence, key any) error {
	what := fmt.Sprintf("fence %s key %v", r.table, key)
	if err := r.check(q, f, key, nil, false); err != nil {
		return r.d.Errorf("%s: %w", what, err)
	}
	return r.run(ctx, q, r.fence, what, f, key, nil)
}

func (r *Row) run(ctx context.Context, q Querier, stmt, what string, f fence.Fence, key any, values []any) error {
	accepted, err := r.d.Run(ctx, q, stmt, r.d.UpsertArgs(key, values, f))
	if err != nil {
		return r.d.Wrap(what, err)
	}
	if accepted {
		return nil
	}
	stored, err := r.d.ScanFence(q.QueryRowContext(ctx, r.readLock, key), true)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return r.d.Errorf("%s: %w: the row vanished after a rejection", what, r.d.ErrSchema)
		}
		return r.d.Wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return r.d.Wrap(what, err)
	}
	return r.d.Errorf("%s: %w: %s refused %v over %v, which the rule admits (do the fence columns compare bytes?)", what, r.d.ErrSchema, r.d.Refuser, f, stored)
}

func (r *Row) check(q Querier, f fence.Fence, key any, values []any, countValues bool) error {
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

// Highest returns the fence stored in row key, the zero Fence if never fenced.
// It returns fence.ErrNotFound for no row, ErrSchema for a NULL fence column or a
// wrong table, and fence.ErrInvalid for a malformed spec or nil q or key.
func (r *Row) Highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	what := fmt.Sprintf("highest %s key %v", r.table, key)
	if r.err != nil {
		return fence.Fence{}, r.d.Errorf("%s: %w", what, r.err)
	}
	if q == nil || key == nil {
		return fence.Fence{}, r.d.Errorf("%s: %w", what, &fence.InvalidError{Field: "querier", Value: "<nil>", Reason: "querier and key must not be nil"})
	}
	f, err := r.d.ScanFence(q.QueryRowContext(ctx, r.read, key), true)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, r.d.Errorf("%s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, r.d.Wrap(what, err)
	}
	return f, nil
}

// LazyRow compiles a Row on first use, for wrappers whose Row is a struct the
// caller fills in before the first call. Its zero value is ready; it is safe for
// concurrent use.
type LazyRow struct {
	once sync.Once
	r    *Row
}

// Get returns the Row of spec for d, compiled by the first call; later calls
// return that Row whatever they pass.
func (l *LazyRow) Get(d *Dialect, spec RowSpec) *Row {
	l.once.Do(func() { l.r = NewRow(d, spec) })
	return l.r
}
