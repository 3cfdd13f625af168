package sqlite

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

// Row describes a table whose rows carry their own fence columns (the row fence):
// each write is one conditional statement that applies only if fence.Admit allows,
// and stores the new fence with the data. The fence columns should be declared
//
//	fence_name  TEXT NOT NULL DEFAULT '',
//	fence_token INTEGER NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
//	fence_lease TEXT NOT NULL DEFAULT ''
//
// (FenceColumnsDDL, whose defaults let existing rows count as never fenced: a
// stored token of 0 admits any fence), and Key must be the primary key or carry a UNIQUE constraint (Upsert's ON CONFLICT
// names it); no other index is needed. A row fence protects only rows the holder
// writes: a stale holder can still insert rows under new keys. Fence every write
// with the Guard's FenceTx where that matters.
//
// Set the fields, then use the Row; do not change them after its first use. A Row
// is safe for concurrent use.
type Row struct {
	Table      string   // table name, optionally schema.table
	Key        string   // key column
	Columns    []string // value columns, written by Update and Upsert in this order
	FenceName  string   // default DefaultFenceName
	FenceToken string   // default DefaultFenceToken
	FenceLease string   // default DefaultFenceLease

	once sync.Once
	s    rowSQL
	err  error
}

type rowSQL struct {
	update, upsert, fence, read, ddl string
}

func (r *Row) build() error {
	r.once.Do(func() { r.s, r.err = r.compile() })
	return r.err
}

func (r *Row) compile() (rowSQL, error) {
	var s rowSQL
	orDefault := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	table, err := quoteIdent(r.Table)
	if err != nil {
		return s, err
	}
	names := append([]string{r.Key}, r.Columns...)
	names = append(names, orDefault(r.FenceName, DefaultFenceName), orDefault(r.FenceToken, DefaultFenceToken), orDefault(r.FenceLease, DefaultFenceLease))
	q := make([]string, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		if strings.Contains(n, ".") {
			return s, &fence.InvalidError{Field: "column", Value: n, Reason: "must not be qualified"}
		}
		if q[i], err = quoteIdent(n); err != nil {
			return s, err
		}
		if seen[strings.ToLower(n)] {
			return s, &fence.InvalidError{Field: "column", Value: n, Reason: "appears twice"}
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
	// table with rows, with FenceColumnsDDL's defaults): any fence is admitted.
	// Update binds (values..., name, lease, token, key, name, token, token, lease, lease).
	s.update = "UPDATE " + table + " SET " + strings.Join(set, ", ") + " WHERE " + key + " = ? AND (" + ft + " = 0 OR (" +
		fn + " = ? AND (? > " + ft + " OR (? = " + ft + " AND ? <> '' AND ? = " + fl + "))))"
	s.ddl = fmt.Sprintf("%s TEXT NOT NULL DEFAULT '',\n%s INTEGER NOT NULL DEFAULT 0 CHECK (%s >= 0),\n%s TEXT NOT NULL DEFAULT ''", fn, ft, ft, fl)
	s.upsert = upsertSQL(table, key, cols, fn, ft, fl)
	s.fence = upsertSQL(table, key, nil, fn, ft, fl)
	s.read = "SELECT " + fn + ", " + ft + ", " + fl + " FROM " + table + " WHERE " + key + " = ?"
	return s, nil
}

func upsertSQL(table, key string, cols []string, fn, ft, fl string) string {
	all := append(append([]string{key}, cols...), fn, ft, fl)
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(all)), ", ")
	var set []string
	for _, c := range append(append([]string{}, cols...), fn, fl, ft) {
		set = append(set, c+" = excluded."+c)
	}
	return "INSERT INTO " + table + " AS f (" + strings.Join(all, ", ") + ") VALUES (" + ph + ")" +
		" ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE f." + ft + " = 0 OR " + admitCond("f."+fn, "f."+ft, "f."+fl) + " RETURNING 1"
}

// SQL returns the three statements the row runs, for logs and review: the
// conditional UPDATE, the upsert, and the fence-only upsert.
func (r *Row) SQL() (update, upsert, fenceOnly string, err error) {
	if err := r.build(); err != nil {
		return "", "", "", fmt.Errorf("sqlite: row: %w", err)
	}
	return r.s.update, r.s.upsert, r.s.fence, nil
}

// Update writes values to the existing row key if f is admitted, in one statement:
//
//	UPDATE T SET col1 = ?, ..., fence_name = ?, fence_lease = ?, fence_token = ?
//	WHERE key = ? AND (fence_token = 0 OR (fence_name = ? AND (? > fence_token
//	      OR (? = fence_token AND ? <> '' AND ? = fence_lease))))
//
// When it changes no row, a read in the same transaction tells why. It returns nil
// if the row was written, an error matching fence.ErrNotFound if there is no row
// key, a *fence.StaleTokenError or *fence.NamespaceError if the stored fence refuses
// f (the row is unchanged), fence.ErrInvalid for a bad fence or a wrong number of
// values, ErrSchema for a wrong table or a NULL fence, and ErrConflict,
// fence.ErrUnavailable or fence.ErrClosed as Guard.FenceTx.
func (r *Row) Update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("update %s key %v", r.Table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	tok := int64(f.Token)
	args := make([]any, 0, len(values)+8)
	args = append(args, values...)
	args = append(args, f.Name, f.LeaseID, tok, key, f.Name, tok, tok, f.LeaseID, f.LeaseID)
	res, err := q.ExecContext(ctx, r.s.update, args...)
	if err != nil {
		return wrap(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap(what, err)
	}
	switch {
	case n == 1:
		return nil
	case n > 1:
		return fmt.Errorf("sqlite: %s: %w: %d rows matched, the key column is not unique", what, ErrSchema, n)
	}
	stored, err := scanRowFence(q.QueryRowContext(ctx, r.s.read, key))
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: %s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return wrap(what, err)
	}
	// The row was missing when the UPDATE ran and was inserted since (q is not
	// a transaction).
	return fmt.Errorf("sqlite: %s: %w", what, fence.ErrNotFound)
}

// Upsert inserts row key with values and fence f, or updates it if its stored fence
// admits f, in one INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE <admit>
// RETURNING 1 statement (see Guard.FenceTx). It returns nil if the row was written,
// a *fence.StaleTokenError (with the highest token) or *fence.NamespaceError if the
// stored fence refuses f (the row is unchanged), and the errors of Update otherwise.
func (r *Row) Upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	what := fmt.Sprintf("upsert %s key %v", r.Table, key)
	if err := r.check(q, f, key, values, true); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return r.upsert(ctx, q, r.s.upsert, what, f, key, values)
}

// Fence advances the fence of row key to f without touching its values, inserting
// the row (with the value columns' defaults) if it is missing, so that a new holder
// fences off a paused predecessor before its first write. It returns what Upsert
// returns.
func (r *Row) Fence(ctx context.Context, q Querier, f fence.Fence, key any) error {
	what := fmt.Sprintf("fence %s key %v", r.Table, key)
	if err := r.check(q, f, key, nil, false); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return r.upsert(ctx, q, r.s.fence, what, f, key, nil)
}

func (r *Row) upsert(ctx context.Context, q Querier, stmt, what string, f fence.Fence, key any, values []any) error {
	args := make([]any, 0, len(values)+4)
	args = append(args, key)
	args = append(args, values...)
	args = append(args, f.Name, int64(f.Token), f.LeaseID)
	var one int
	err := q.QueryRowContext(ctx, stmt, args...).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return wrap(what, err)
	}
	stored, err := scanRowFence(q.QueryRowContext(ctx, r.s.read, key))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: %s: %w: the row vanished after a rejection", what, ErrSchema)
		}
		return wrap(what, err)
	}
	if err := fence.Admit(fmt.Sprint(key), stored, f); err != nil {
		return wrap(what, err)
	}
	return fmt.Errorf("sqlite: %s: %w: SQLite refused %v over %v, which the rule admits (do the fence columns compare bytes?)", what, ErrSchema, f, stored)
}

func (r *Row) check(q Querier, f fence.Fence, key any, values []any, countValues bool) error {
	if err := r.build(); err != nil {
		return err
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
	if countValues && len(values) != len(r.Columns) {
		return &fence.InvalidError{Field: "values", Value: fmt.Sprint(len(values)), Reason: fmt.Sprintf("the row has %d value columns", len(r.Columns))}
	}
	return nil
}

// FenceColumnsDDL returns the definitions of the fence columns, with the
// configured names, for a CREATE TABLE or ALTER TABLE ... ADD COLUMN (one column
// per ALTER in SQLite). Their defaults mark existing rows as never fenced. It
// returns fence.ErrInvalid for a malformed Row.
func (r *Row) FenceColumnsDDL() (string, error) {
	if err := r.build(); err != nil {
		return "", fmt.Errorf("sqlite: row: %w", err)
	}
	return r.s.ddl, nil
}

// Highest returns the fence stored in row key, the zero Fence if the row was never
// fenced. It returns fence.ErrNotFound if there is no such row, ErrSchema for a NULL
// fence column or a wrong table, and fence.ErrInvalid for a malformed Row or nil q.
func (r *Row) Highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	what := fmt.Sprintf("highest %s key %v", r.Table, key)
	if err := r.build(); err != nil {
		return fence.Fence{}, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if q == nil || key == nil {
		return fence.Fence{}, fmt.Errorf("sqlite: %s: %w", what, &fence.InvalidError{Field: "querier", Value: "<nil>", Reason: "querier and key must not be nil"})
	}
	f, err := scanRowFence(q.QueryRowContext(ctx, r.s.read, key))
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Fence{}, fmt.Errorf("sqlite: %s: %w", what, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Fence{}, wrap(what, err)
	}
	return f, nil
}

// scanRowFence is scanFence for a row fence, where a token of 0 means never
// fenced (the zero Fence, which fence.Admit admits anything over).
func scanRowFence(row *sql.Row) (fence.Fence, error) {
	var name, lease sql.NullString
	var token sql.NullInt64
	if err := row.Scan(&name, &token, &lease); err != nil {
		return fence.Fence{}, err
	}
	if !name.Valid || !token.Valid || !lease.Valid {
		return fence.Fence{}, fmt.Errorf("%w: a fence column is NULL (name %v, token %v, lease %v); declare them NOT NULL", ErrSchema, name.Valid, token.Valid, lease.Valid)
	}
	if token.Int64 == 0 {
		return fence.Fence{}, nil
	}
	if token.Int64 < 0 || uint64(token.Int64) > uint64(fence.MaxToken) {
		return fence.Fence{}, fmt.Errorf("%w: stored token %d is outside [0, %d]", ErrSchema, token.Int64, uint64(fence.MaxToken))
	}
	return fence.Fence{Name: name.String, Token: fence.Token(token.Int64), LeaseID: lease.String}, nil
}
