package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/fencelock/fence/internal/sqlfence/sqlfencetest"
)

// BenchmarkFence compares, in one run, writes with and without their fence on the
// package's MariaDB server (see sqlfencetest.Benchmarks):
//
//	go test -run '^$' -bench . -benchtime 2000x ./mysql/
func BenchmarkFence(b *testing.B) {
	sqlfencetest.Benchmarks(b, backend, func(b *testing.B) *sql.DB { return db(b) })
}
