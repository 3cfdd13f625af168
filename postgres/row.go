package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fencelock/fence"
	"github.com/jackc/pgx/v5"
)

// Default fence column names of a Row.
const (
	DefaultFenceNameColumn  = "fence_name"
	DefaultFenceTokenColumn = "fence_token"
	DefaultFenceLeaseColumn = "fence_lease"
)

// Row is the row fence: a table whose rows carry their own fence in three
// columns (lock name, token, lease), written by one conditional statement
// together with the data. Describe the table once and share the *Row; it is safe
// for concurrent use. Its fields are read (and validated) at first use: changing
// them afterwards has no effect. Give the fence columns defaults that mean "never fenced":
//
//	fence_name  text   NOT NULL DEFAULT '',
//	fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
//	fence_lease text   NOT NULL DEFAULT ''
//
// (FenceColumnsDDL returns these lines with the configured names.) Key must be
// the primary key or carry a unique index: Upsert and Fence arbitrate on it, and
// every statement finds the row through it. No other index is needed.
//
// A row fence protects only rows the holder writes; a stale holder can still
// insert new rows elsewhere. Use a Guard (FenceTx) to fence a whole resource.
type Row struct {
	Table   string   // "table" or "schema.table"
	Key     string   // the key column (primary key or unique)
	Columns []string // the value columns Update and Upsert write, in the order of their values

	FenceName  string // default DefaultFenceNameColumn
	FenceToken string // default DefaultFenceTokenColumn
	FenceLease string // default DefaultFenceLeaseColumn

	once sync.Once
	err  error
	sql  rowSQL
}

type rowSQL struct {
	update, upsert, fence, read string
	fn, ft, fl                  string // quoted fence columns
}

// compile validates the description and builds its statements, once.
func (r *Row) compile() error {
	r.once.Do(func() { r.sql, r.err = r.build() })
	return r.err
}

func (r *Row) build() (rowSQL, error) {
	var s rowSQL
	table, err := quoteIdent("table", r.Table, true)
	if err != nil {
		return s, err
	}
	key, err := quoteIdent("key column", r.Key, false)
	if err != nil {
		return s, err
	}
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	names := []string{def(r.FenceName, DefaultFenceNameColumn), def(r.FenceToken, DefaultFenceTokenColumn), def(r.FenceLease, DefaultFenceLeaseColumn)}
	var fcols [3]string
	for i, n := range names {
		if fcols[i], err = quoteIdent("fence column", n, false); err != nil {
			return s, err
		}
	}
	s.fn, s.ft, s.fl = fcols[0], fcols[1], fcols[2]
	seen := map[string]bool{key: true, s.fn: true, s.ft: true, s.fl: true}
	if len(seen) != 4 {
		return s, fmt.Errorf("postgres: %w", &fence.InvalidError{Field: "row", Value: r.Table, Reason: "key and fence columns must be distinct"})
	}
	cols := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		if cols[i], err = quoteIdent("column", c, false); err != nil {
			return s, err
		}
		if seen[cols[i]] {
			return s, fmt.Errorf("postgres: %w", &fence.InvalidError{Field: "column", Value: c, Reason: "is listed twice or is the key or a fence column"})
		}
		seen[cols[i]] = true
	}
	// Parameters: $1 key, $2 fence name, $3 token, $4 lease, $5... values.
	param := func(i int) string { return "$" + strconv.Itoa(i+5) }

	var set strings.Builder
	for i, c := range cols {
		fmt.Fprintf(&set, "%s = %s, ", c, param(i))
	}
	fmt.Fprintf(&set, "%s = $2, %s = $3, %s = $4", s.fn, s.ft, s.fl)
	s.update = `UPDATE ` + table + ` SET ` + set.String() + `
WHERE ` + key + ` = $1 AND ` + admitSQL(s.fn, s.ft, s.fl, "$2", "$3", "$4")

	insCols := []string{key, s.fn, s.ft, s.fl}
	insVals := []string{"$1", "$2", "$3", "$4"}
	var upd strings.Builder
	for i, c := range cols {
		insCols = append(insCols, c)
		insVals = append(insVals, param(i))
		fmt.Fprintf(&upd, "%s = excluded.%s, ", c, c)
	}
	fenceSet := fmt.Sprintf("%[1]s = excluded.%[1]s, %[2]s = excluded.%[2]s, %[3]s = excluded.%[3]s", s.fn, s.ft, s.fl)
	where := admitSQL("r."+s.fn, "r."+s.ft, "r."+s.fl, "excluded."+s.fn, "excluded."+s.ft, "excluded."+s.fl)
	s.upsert = `INSERT INTO ` + table + ` AS r (` + strings.Join(insCols, ", ") + `) VALUES (` + strings.Join(insVals, ", ") + `)
ON CONFLICT (` + key + `) DO UPDATE SET ` + upd.String() + fenceSet + `
WHERE ` + where + `
RETURNING true`
	s.fence = `INSERT INTO ` + table + ` AS r (` + strings.Join(insCols[:4], ", ") + `) VALUES ($1, $2, $3, $4)
ON CONFLICT (` + key + `) DO UPDATE SET ` + fenceSet + `
WHERE ` + where + `
RETURNING true`
	s.read = `SELECT ` + s.fn + `, ` + s.ft + `, ` + s.fl + ` FROM ` + table + ` WHERE ` + key + ` = $1`
	return s, nil
}

// FenceColumnsDDL returns the column definitions of the fence columns, with the
// configured names, for a CREATE TABLE or ALTER TABLE ... ADD COLUMN. It returns
// fence.ErrInvalid for a malformed Row.
func (r *Row) FenceColumnsDDL() (string, error) {
	if err := r.compile(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s text NOT NULL DEFAULT '',\n%s bigint NOT NULL DEFAULT 0 CHECK (%s >= 0),\n%s text NOT NULL DEFAULT ''",
		r.sql.fn, r.sql.ft, r.sql.ft, r.sql.fl), nil
}

// Update writes values to the Columns of the existing row key, with f as its
// fence, if f is admitted by the row's fence (fence.Admit). It is one UPDATE
// whose WHERE clause is the rule; pass a pgx.Tx as q to make it part of a
// transaction.
//
// It returns nil if the row was written, an error matching fence.ErrNotFound if
// no row has that key (nothing is inserted), a *fence.StaleTokenError
// (fence.ErrStaleToken) or *fence.NamespaceError (fence.ErrNamespace) if f is
// refused, in which case nothing changed, fence.ErrInvalid for a bad fence, a
// malformed Row or a wrong number of values, ErrCorrupt for a NULL fence column,
// ErrSchema for a missing table or column, ErrConflict on a serialization
// failure and fence.ErrUnavailable if the connection failed.
func (r *Row) Update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.write(ctx, "update", "", q, f, key, values, func(s *rowSQL) string { return s.update })
}

// Upsert inserts the row key with values and fence f, or, if it exists,
// overwrites it if f is admitted by its fence. It is one INSERT ... ON CONFLICT
// DO UPDATE whose WHERE clause is the rule. It returns what Update returns,
// except fence.ErrNotFound.
func (r *Row) Upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.write(ctx, "upsert", "", q, f, key, values, func(s *rowSQL) string { return s.upsert })
}

// Fence advances the fence of row key to f without writing values, inserting
// the row with only its key and fence if it does not exist (the value columns
// then need defaults or must be nullable). A new holder calls it to fence off
// its predecessors before its first write to that row. It returns what Upsert
// returns.
func (r *Row) Fence(ctx context.Context, q Querier, f fence.Fence, key any) error {
	return r.write(ctx, "fence", "", q, f, key, nil, func(s *rowSQL) string { return s.fence })
}

// Highest returns the fence stored in row key (the zero Fence if the row was
// never fenced). It returns fence.ErrNotFound if there is no such row and
// ErrCorrupt if a fence column is NULL.
func (r *Row) Highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	if err := r.compile(); err != nil {
		return fence.Fence{}, err
	}
	if q == nil {
		return fence.Fence{}, fmt.Errorf("postgres: highest in %s: nil querier: %w", r.Table, fence.ErrInvalid)
	}
	f, err := r.highest(ctx, q, key)
	if err != nil {
		return fence.Fence{}, fmt.Errorf("postgres: highest in %s key %v: %w", r.Table, key, err)
	}
	return f, nil
}

func (r *Row) highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	var s storedFence
	err := q.QueryRow(ctx, r.sql.read, key).Scan(&s.name, &s.token, &s.lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return fence.Fence{}, fence.ErrNotFound
	}
	if err != nil {
		return fence.Fence{}, dbErr(err)
	}
	return s.fence()
}

// write runs one fenced statement. res names the resource in errors; "" means
// "table/key".
func (r *Row) write(ctx context.Context, op, res string, q Querier, f fence.Fence, key any, values []any, stmt func(*rowSQL) string) error {
	if err := r.compile(); err != nil {
		return err
	}
	// The key is reported by value in errors but not validated: its type is the
	// key column's. A fence's resource name in errors is the table and key.
	if res == "" {
		res = fmt.Sprintf("%s/%v", r.Table, key)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("postgres: %s %s: %w", op, res, err)
	}
	if q == nil || key == nil {
		return fmt.Errorf("postgres: %s %s: nil querier or key: %w", op, res, fence.ErrInvalid)
	}
	if op != "fence" && len(values) != len(r.Columns) {
		return fmt.Errorf("postgres: %s %s: %d values for %d columns: %w", op, res, len(values), len(r.Columns), fence.ErrInvalid)
	}
	args := make([]any, 0, 4+len(values))
	args = append(args, key, f.Name, int64(f.Token), f.LeaseID)
	args = append(args, values...)
	sql := stmt(&r.sql)
	for attempt := 1; ; attempt++ {
		var err error
		if op == "update" {
			var tag interface{ RowsAffected() int64 }
			tag, err = q.Exec(ctx, sql, args...)
			if err == nil && tag.RowsAffected() > 0 {
				return nil
			}
		} else {
			var ok bool
			err = q.QueryRow(ctx, sql, args...).Scan(&ok)
			if err == nil {
				return nil
			}
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("postgres: %s %s: %w", op, res, dbErr(err))
		}
		// Nothing written: tell a missing row, a corrupt fence, a stale token and
		// another namespace apart. Inside a transaction the upsert locked the row,
		// so this reads the fence that refused us; otherwise it may read a later
		// fence, which is only ever higher.
		highest, err := r.highest(ctx, q, key)
		switch {
		case errors.Is(err, fence.ErrNotFound) && op == "update":
			return fmt.Errorf("postgres: %s %s: no such row: %w", op, res, fence.ErrNotFound)
		case errors.Is(err, fence.ErrNotFound):
			// The conflicting row was deleted since: try again.
		case err != nil:
			return fmt.Errorf("postgres: %s %s: %w", op, res, err)
		default:
			if err := fence.Admit(res, highest, f); err != nil {
				return fmt.Errorf("postgres: %s: %w", op, err)
			}
		}
		if attempt == maxFenceAttempts {
			return fmt.Errorf("postgres: %s %s: %w: the row kept changing under concurrent writers", op, res, fence.ErrUnavailable)
		}
	}
}
