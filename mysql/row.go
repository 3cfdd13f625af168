package mysql

import (
	"context"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sqlfence"
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
//	fence_name  VARBINARY(255) NOT NULL DEFAULT '',
//	fence_token BIGINT NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
//	fence_lease VARBINARY(128) NOT NULL DEFAULT ''
//
// (FenceColumnsDDL, whose defaults let existing rows count as never fenced: a
// stored token of 0 admits any fence), and Key must be the table's primary key (or its only unique key: ON DUPLICATE KEY
// UPDATE fires on any unique key). No index beyond the key is needed. A row fence
// protects only rows the holder writes; a stale holder can still insert rows under
// new keys. Fence every write with the Guard's FenceTx where that matters.
//
// Set the fields, then use the Row; do not change them after its first use. A Row
// is safe for concurrent use. Its statements need a DSN with clientFoundRows=true.
type Row struct {
	Table      string   // table name, optionally db.table
	Key        string   // key column
	Columns    []string // value columns, written by Update and Upsert in this order
	FenceName  string   // default DefaultFenceName
	FenceToken string   // default DefaultFenceToken
	FenceLease string   // default DefaultFenceLease

	lazy sqlfence.LazyRow
}

// row compiles the Row's fields on first use.
func (r *Row) row() *sqlfence.Row {
	return r.lazy.Get(dialect, sqlfence.RowSpec{Table: r.Table, Key: r.Key, Columns: r.Columns,
		FenceName: r.FenceName, FenceToken: r.FenceToken, FenceLease: r.FenceLease})
}

// SQL returns the three statements the row runs, for logs and review: the
// conditional UPDATE, the upsert, and the fence-only upsert.
func (r *Row) SQL() (update, upsert, fenceOnly string, err error) {
	return r.row().SQL()
}

// Update writes values to the existing row key if f is admitted, in one statement:
//
//	UPDATE T SET col1 = ?, ..., fence_name = ?, fence_lease = ?, fence_token = ?
//	WHERE key = ? AND (fence_token = 0 OR (fence_name = ? AND (? > fence_token
//	      OR (? = fence_token AND ? <> '' AND ? = fence_lease))))
//
// When it matches no row, a locking read tells why. It returns nil if the row was
// written, an error matching fence.ErrNotFound if there is no row key, a
// *fence.StaleTokenError or *fence.NamespaceError if the stored fence refuses f (the
// row is unchanged), fence.ErrInvalid for a bad fence, a wrong number of values, or
// a connection that counts changed rows (clientFoundRows not set), ErrSchema for a
// wrong table or a NULL fence, and ErrConflict or fence.ErrUnavailable as FenceTx.
func (r *Row) Update(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.row().Update(ctx, q, f, key, values...)
}

// Upsert inserts row key with values and fence f, or updates it if its stored fence
// admits f, in one INSERT ... ON DUPLICATE KEY UPDATE statement whose update clause
// guards every assignment with the admit condition and leaves a marker in
// LAST_INSERT_ID (see Guard.FenceTx). It returns nil if the row was written, a
// *fence.StaleTokenError (with the highest token) or *fence.NamespaceError if the
// stored fence refuses f (the row is unchanged), and the errors of Update otherwise.
func (r *Row) Upsert(ctx context.Context, q Querier, f fence.Fence, key any, values ...any) error {
	return r.row().Upsert(ctx, q, f, key, values...)
}

// Fence advances the fence of row key to f without touching its values, inserting
// the row (with the value columns' defaults) if it is missing: a new holder calls it
// to fence off a paused predecessor before its first write. It returns what Upsert
// returns.
func (r *Row) Fence(ctx context.Context, q Querier, f fence.Fence, key any) error {
	return r.row().Fence(ctx, q, f, key)
}

// FenceColumnsDDL returns the definitions of the fence columns, with the
// configured names, for a CREATE TABLE or ALTER TABLE ... ADD COLUMN. Their
// defaults mark existing rows as never fenced. It returns fence.ErrInvalid for a
// malformed Row.
func (r *Row) FenceColumnsDDL() (string, error) {
	return r.row().FenceColumnsDDL()
}

// Highest returns the fence stored in row key, the zero Fence if the row was never
// fenced. It returns fence.ErrNotFound if there is no such row, ErrSchema for a NULL
// fence column or a wrong table, and fence.ErrInvalid for a malformed Row or nil q.
func (r *Row) Highest(ctx context.Context, q Querier, key any) (fence.Fence, error) {
	return r.row().Highest(ctx, q, key)
}
