package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/fencelock/fence/internal/sqlfence/sqlfencetest"
	"github.com/fencelock/fence/sqlite"
)

// BenchmarkFence compares, in one run, writes with and without their fence (see
// sqlfencetest.Benchmarks):
//
//	go test -run '^$' -bench . -benchtime 20000x ./sqlite/
func BenchmarkFence(b *testing.B) {
	sqlfencetest.Benchmarks(b, backend, benchDB)
}

// benchDB is db with synchronous=OFF: with a real fsync per commit the disk's
// variance swamps the cost of the statements being compared.
func benchDB(b *testing.B) *sql.DB {
	d, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "bench.db")+"?_txlock=immediate&_journal_mode=WAL&_pragma=synchronous(OFF)")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if err := sqlite.NewGuard(d, nil).CreateSchema(context.Background()); err != nil {
		b.Fatal(err)
	}
	return d
}
