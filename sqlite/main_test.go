package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fence"
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

var tableSeq atomic.Int64

// uniqueTable creates a table in d by ddl (with %s for the name) and returns its name.
func uniqueTable(t testing.TB, d *sql.DB, ddl string) string {
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
	if _, err := d.Exec(fmt.Sprintf(ddl, `"`+name+`"`)); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return name
}

func resource(t testing.TB) string { return t.Name() + "/" + fence.NewLeaseID()[:12] }
