// Package sqlfencetest holds the tests the mysql and sqlite guards share: each
// package's _test files call them with a Backend over its own real database, so the
// row, KV, concurrency and conformance tests are written once and run against both.
package sqlfencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
)

// Row is a package's *Row, whose methods take its Querier type Q.
type Row[Q any] interface {
	Update(ctx context.Context, q Q, f fence.Fence, key any, values ...any) error
	Upsert(ctx context.Context, q Q, f fence.Fence, key any, values ...any) error
	Fence(ctx context.Context, q Q, f fence.Fence, key any) error
	Highest(ctx context.Context, q Q, key any) (fence.Fence, error)
	FenceColumnsDDL() (string, error)
}

// Guard is a package's *Guard, whose FenceTx takes its Querier type Q.
type Guard[Q any] interface {
	FenceTx(ctx context.Context, tx Q, resource string, f fence.Fence) error
	Fence(ctx context.Context, resource string, f fence.Fence) error
	Highest(ctx context.Context, resource string) (fence.Fence, error)
	Do(ctx context.Context, resource string, f fence.Fence, write func(tx *sql.Tx) error) error
}

// Backend is one package under test: its constructors, its sentinels, and the
// bits of SQL its test tables need.
type Backend[Q any, R Row[Q], G Guard[Q]] struct {
	// Name is the package name, for messages ("mysql").
	Name string
	// DB returns a database with the default fences and KV tables created (shared
	// or fresh per test), skipping t where the package skips integration tests.
	DB func(t testing.TB) *sql.DB
	// NewRow, NewGuard and NewKV are the package's constructors. NewGuard passes
	// a nil d as a nil DB and table "" as the default table.
	NewRow   func(table, key string, cols ...string) R
	NewGuard func(d *sql.DB, table string) G
	NewKV    func(d *sql.DB) fencetest.Guarded
	// ErrSchema is the package's sentinel; MaxValueLen its KV limit.
	ErrSchema   error
	MaxValueLen int
	// Types replaces the placeholders {INT}, {NAME}, {LEASE}, {BLOB} and {AUTOID}
	// (an auto-increment primary key column type) in test DDL.
	Types *strings.Replacer
	// Upsert returns the clause that makes an INSERT update cols on a conflict on
	// key (" ON DUPLICATE KEY UPDATE ..." or " ON CONFLICT ... DO UPDATE ...").
	Upsert func(key string, cols ...string) string
}

// q converts a *sql.DB or *sql.Tx to the package's Querier.
func (b *Backend[Q, R, G]) q(x any) Q { return x.(Q) }

// FenceOf returns the fence name#tok under lease.
func FenceOf(name string, tok fence.Token, lease string) fence.Fence {
	return fence.Fence{Name: name, Token: tok, LeaseID: lease}
}

// WantStale fails t unless err is a *fence.StaleTokenError with that highest token
// and same-token flag.
func WantStale(t *testing.T, err error, highest fence.Token, same bool) {
	t.Helper()
	var st *fence.StaleTokenError
	if !errors.As(err, &st) {
		t.Fatalf("want *fence.StaleTokenError (highest %d), got %v", highest, err)
	}
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("want errors.Is(err, fence.ErrStaleToken), got %v", err)
	}
	if st.Highest != highest || st.SameToken != same {
		t.Fatalf("want highest %d same-token %v, got highest %d same-token %v (%v)", highest, same, st.Highest, st.SameToken, err)
	}
}

var tableSeq atomic.Int64

// UniqueTable returns a fresh table name for t, created in d by ddl (with %s for
// the quoted name) unless ddl is empty, and dropped in cleanup.
func UniqueTable(t testing.TB, d *sql.DB, ddl string) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", tableSeq.Add(1), strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	if ddl != "" {
		if _, err := d.Exec(fmt.Sprintf(ddl, "`"+name+"`")); err != nil {
			t.Fatalf("create table %s: %v", name, err)
		}
	}
	t.Cleanup(func() { _, _ = d.Exec("DROP TABLE IF EXISTS `" + name + "`") })
	return name
}

// Resource returns a resource name unique to this run of t, so that reruns
// against one server (-count=N) start from no fence.
func Resource(t testing.TB) string { return t.Name() + "/" + driver.NewLeaseID()[:12] }

// InTx runs f in a transaction, committing if it returns nil.
func InTx(ctx context.Context, d *sql.DB, f func(*sql.Tx) error) error {
	tx, err := d.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// table creates a table for t by ddl with the backend's types.
func (b *Backend[Q, R, G]) table(t testing.TB, d *sql.DB, ddl string) string {
	t.Helper()
	return UniqueTable(t, d, b.Types.Replace(ddl))
}

// AccountsDDL is the row-fence test table: id, balance, note and fence columns.
const AccountsDDL = "CREATE TABLE %s (id {INT} PRIMARY KEY, balance {INT} NOT NULL DEFAULT 0, note TEXT NULL," +
	" fence_name {NAME} NOT NULL, fence_token {INT} NOT NULL CHECK (fence_token > 0), fence_lease {LEASE} NOT NULL)"

// Accounts creates an AccountsDDL table in d and returns its name and Row.
func (b *Backend[Q, R, G]) Accounts(t testing.TB, d *sql.DB, cols ...string) (string, R) {
	t.Helper()
	table := b.table(t, d, AccountsDDL)
	return table, b.NewRow(table, "id", cols...)
}
