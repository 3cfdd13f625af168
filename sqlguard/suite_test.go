package sqlguard_test

import (
	"context"
	"database/sql"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/sqlguardtest"
	"github.com/fencelock/fence/mysql"
	"github.com/fencelock/fence/sqlguard"
	"github.com/fencelock/fence/sqlite"
)

// One MariaDB server serves the MariaDB dialect's tests; each test uses its own
// resources and tables. The SQLite dialect's tests each get a fresh file.
var (
	mariaDB *sql.DB // database fence_test, clientFoundRows=true
	dsn     string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the MariaDB tests skip themselves
	}
	os.Exit(sqlguardtest.RunWithMariaDB(m, "sqlguard", func(mdb *sqlguardtest.MariaDB) { mariaDB, dsn = mdb.DB, mdb.DSN }))
}

// The dialects under test.
var (
	mariadbBackend = sqlguardtest.Backend[mysql.Dialect]{
		Name: "mysql",
		DB: func(t testing.TB) *sql.DB {
			t.Helper()
			servertest.SkipIfShort(t)
			return mariaDB
		},
		Open: func(t testing.TB) *sql.DB {
			t.Helper()
			servertest.SkipIfShort(t)
			d, err := mysql.Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		},
		Schema: mysql.Schema,
		Types: strings.NewReplacer("{INT}", "BIGINT", "{NAME}", "VARBINARY(255)", "{LEASE}", "VARBINARY(128)",
			"{BLOB}", "LONGBLOB", "{AUTOID}", "BIGINT AUTO_INCREMENT PRIMARY KEY"),
		Upsert: func(key string, cols ...string) string {
			return " ON DUPLICATE KEY UPDATE " + setEach(cols, func(c string) string { return "VALUES(" + c + ")" })
		},
	}
	sqliteBackend = sqlguardtest.Backend[sqlite.Dialect]{
		Name:   "sqlite",
		DB:     sqliteDB,
		Open:   sqliteOpen,
		Schema: sqlite.Schema,
		Types: strings.NewReplacer("{INT}", "INTEGER", "{NAME}", "TEXT", "{LEASE}", "TEXT",
			"{BLOB}", "BLOB", "{AUTOID}", "INTEGER PRIMARY KEY AUTOINCREMENT"),
		Upsert: func(key string, cols ...string) string {
			return " ON CONFLICT (" + key + ") DO UPDATE SET " + setEach(cols, func(c string) string { return "excluded." + c })
		},
	}
)

// setEach returns the assignments "c = value(c)" of cols, comma-separated, for an
// upsert clause.
func setEach(cols []string, value func(c string) string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = " + value(c)
	}
	return strings.Join(set, ", ")
}

// sqliteOpen opens a fresh database file for t with sqlite.Open; it is closed in
// cleanup.
func sqliteOpen(t testing.TB) *sql.DB {
	t.Helper()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// sqliteDB is sqliteOpen with the fences and KV tables created.
func sqliteDB(t testing.TB) *sql.DB {
	t.Helper()
	d := sqliteOpen(t)
	ctx := context.Background()
	if err := sqlite.NewGuard(d, nil).CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.NewKV(d, nil).CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// suite is one dialect's tests and benchmarks, whatever its type.
type suite struct {
	name  string
	test  func(*testing.T)
	bench func(*testing.B)
}

func suiteOf[D sqlguard.Dialector](b sqlguardtest.Backend[D], db func(*testing.B) *sql.DB) suite {
	return suite{name: b.Name, test: func(t *testing.T) {
		t.Run("Guard", func(t *testing.T) { sqlguardtest.GuardTests(t, b) })
		t.Run("Row", func(t *testing.T) { sqlguardtest.RowTests(t, b) })
		t.Run("KV", func(t *testing.T) { sqlguardtest.KVTests(t, b) })
		t.Run("Concurrency", func(t *testing.T) { sqlguardtest.ConcurrencyTests(t, b) })
	}, bench: func(bb *testing.B) { sqlguardtest.Benchmarks(bb, b, db) }}
}

func suites() []suite {
	return []suite{
		suiteOf(mariadbBackend, func(b *testing.B) *sql.DB { return mariadbBackend.DB(b) }),
		suiteOf(sqliteBackend, sqliteBenchDB),
	}
}

// sqliteBenchDB is a fresh file with synchronous=OFF: with a real fsync per
// commit the disk's variance swamps the cost of the statements being compared.
func sqliteBenchDB(b *testing.B) *sql.DB {
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

// TestDialects runs the one suite over every dialect.
func TestDialects(t *testing.T) {
	for _, s := range suites() {
		t.Run(s.name, s.test)
	}
}

// BenchmarkFence compares, in one run per dialect, writes with and without their
// fence (see sqlguardtest.Benchmarks):
//
//	go test -run '^$' -bench . -benchtime 2000x ./sqlguard/
func BenchmarkFence(b *testing.B) {
	for _, s := range suites() {
		b.Run(s.name, s.bench)
	}
}
