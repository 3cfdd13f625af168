package mysql_test

import (
	"database/sql"
	"flag"
	"os"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/internal/sqlguardtest"
)

// One MariaDB server serves the whole package; each test uses its own resources
// and tables, so tests never see each other's rows.
var (
	testDB *sql.DB // database fence_test, clientFoundRows=true
	dsn    string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Integration tests skip themselves; the examples need the server, so
		// -short runs only the tests unless -run says otherwise.
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
		os.Exit(m.Run())
	}
	os.Exit(sqlguardtest.RunWithMariaDB(m, "mysql", func(mdb *sqlguardtest.MariaDB) { testDB, dsn = mdb.DB, mdb.DSN }))
}

// db returns the shared database, skipping under -short.
func db(t testing.TB) *sql.DB {
	t.Helper()
	servertest.SkipIfShort(t)
	return testDB
}

// changedRowsConfig returns the shared database's DSN as a config with
// clientFoundRows off (a connection that counts changed rows), skipping under
// -short.
func changedRowsConfig(t testing.TB) *gomysql.Config {
	t.Helper()
	db(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = false
	return cfg
}

// uniqueTable returns a fresh table name for t, created by ddl (with %s for the
// name) and dropped in cleanup.
func uniqueTable(t testing.TB, ddl string) string {
	t.Helper()
	return sqlguardtest.UniqueTable(t, db(t), ddl)
}

// The helpers the package's tests share with sqlguard's suite (see sqlguardtest);
// that suite runs the guard, row and KV tests over MariaDB.
var (
	resource = sqlguardtest.Resource
	fenceOf  = sqlguardtest.FenceOf
)
