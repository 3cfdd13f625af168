package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/fencelock/fence/internal/sqlfence/sqlfencetest"
	"github.com/fencelock/fence/sqlite"
)

// db returns a fresh database file for t, opened with sqlite.Open, with the
// fences and KV tables created; it is closed in cleanup.
func db(t testing.TB) *sql.DB {
	t.Helper()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	if err := sqlite.NewGuard(d, nil).CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.NewKV(d, nil).CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// uniqueTable creates a table in d by ddl (with %s for the name) and returns its name.
func uniqueTable(t testing.TB, d *sql.DB, ddl string) string {
	t.Helper()
	return sqlfencetest.UniqueTable(t, d, ddl)
}

// The helpers the package's tests share with mysql's (see sqlfencetest).
var (
	resource  = sqlfencetest.Resource
	fenceOf   = sqlfencetest.FenceOf
	wantStale = sqlfencetest.WantStale
)
