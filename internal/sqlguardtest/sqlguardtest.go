// Package sqlguardtest holds the tests and benchmarks of sqlguard that every
// dialect must pass: sqlguard's own tests run them with a Backend per dialect, each
// over its real database (MariaDB, SQLite files), so they are written once.
package sqlguardtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/sqlguard"
)

// Backend is one dialect under test: its database, and the bits of SQL its test
// tables need. Its methods make the sqlguard types of dialect D.
type Backend[D sqlguard.Dialector] struct {
	// Name is the dialect's name, for messages ("mysql").
	Name string
	// DB returns a database with the default fences and KV tables created (shared
	// or fresh per test), skipping t where the dialect skips integration tests.
	DB func(t testing.TB) *sql.DB
	// Open returns a new connection to that database, which the test may close.
	Open func(t testing.TB) *sql.DB
	// Schema is the dialect's DDL of the default fences table.
	Schema string
	// Types replaces the placeholders {INT}, {NAME}, {LEASE}, {BLOB} and {AUTOID}
	// (an auto-increment primary key column type) in test DDL.
	Types *strings.Replacer
	// Upsert returns the clause that makes an INSERT update cols on a conflict on
	// key (" ON DUPLICATE KEY UPDATE ..." or " ON CONFLICT ... DO UPDATE ...").
	Upsert func(key string, cols ...string) string
}

// NewRow returns a Row of D over table with key column key and value columns cols.
func (b *Backend[D]) NewRow(table, key string, cols ...string) *sqlguard.Row[D] {
	return &sqlguard.Row[D]{Table: table, Key: key, Columns: cols}
}

// NewGuard returns a Guard of D over d (a nil d as a nil DB) and table ("" for the
// default table).
func (b *Backend[D]) NewGuard(d *sql.DB, table string) *sqlguard.Guard[D] {
	if d == nil {
		return sqlguard.NewGuard[D](nil, &sqlguard.GuardOptions{Table: table})
	}
	return sqlguard.NewGuard[D](d, &sqlguard.GuardOptions{Table: table})
}

// NewKV returns a KV of D over d with the default table.
func (b *Backend[D]) NewKV(d *sql.DB) fencetest.Guarded { return sqlguard.NewKV[D](d, nil) }

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

// WantToken fails t unless the highest fence g holds for resource has token tok
// (the holder's fence stood).
func WantToken[D sqlguard.Dialector](t testing.TB, g *sqlguard.Guard[D], resource string, tok fence.Token) {
	t.Helper()
	if got, err := g.Highest(context.Background(), resource); err != nil || got.Token != tok {
		t.Fatalf("want the holder's fence %d to stand, got %v %v", tok, got, err)
	}
}

// UniqueTable returns a fresh table name for t (servertest.TableName), created in d by
// ddl (with %s for the quoted name) unless ddl is empty, and dropped in cleanup.
func UniqueTable(t testing.TB, d *sql.DB, ddl string) string {
	t.Helper()
	name := servertest.TableName(t)
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
func (b *Backend[D]) table(t testing.TB, d *sql.DB, ddl string) string {
	t.Helper()
	return UniqueTable(t, d, b.Types.Replace(ddl))
}

// tableWithRows creates a table for t by ddl, like table, and inserts into it the
// rows of values ("(cols) VALUES ..." or "VALUES ...").
func (b *Backend[D]) tableWithRows(t testing.TB, d *sql.DB, ddl, values string) string {
	t.Helper()
	table := b.table(t, d, ddl)
	if _, err := d.Exec("INSERT INTO `" + table + "` " + values); err != nil {
		t.Fatalf("insert into %s: %v", table, err)
	}
	return table
}

// AccountsDDL is the row-fence test table: id, balance, note and fence columns.
const AccountsDDL = "CREATE TABLE %s (id {INT} PRIMARY KEY, balance {INT} NOT NULL DEFAULT 0, note TEXT NULL," +
	" fence_name {NAME} NOT NULL, fence_token {INT} NOT NULL CHECK (fence_token > 0), fence_lease {LEASE} NOT NULL)"

// Accounts creates an AccountsDDL table in d and returns its name and Row.
func (b *Backend[D]) Accounts(t testing.TB, d *sql.DB, cols ...string) (string, *sqlguard.Row[D]) {
	t.Helper()
	table := b.table(t, d, AccountsDDL)
	return table, b.NewRow(table, "id", cols...)
}
