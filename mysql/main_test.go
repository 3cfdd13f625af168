package mysql_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fence/internal/sqlguardtest"
	"github.com/fencelock/fence/internal/testserv"
	"github.com/fencelock/fence/mysql"
)

// One MariaDB server serves the whole package; each test uses its own resources
// and tables, so tests never see each other's rows.
var (
	server *testserv.MariaDBServer
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	server, err = testserv.StartMariaDB()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests:", err)
		return 1
	}
	defer server.Close()
	root, err := mysql.Open(server.DSN(""))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests:", err)
		return 1
	}
	if _, err := root.Exec("CREATE DATABASE IF NOT EXISTS fence_test"); err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests: create database:", err)
		return 1
	}
	root.Close()
	dsn = server.DSN("fence_test")
	if testDB, err = mysql.Open(dsn); err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests:", err)
		return 1
	}
	defer testDB.Close()
	g := mysql.NewGuard(testDB, nil)
	if err := g.CreateSchema(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests:", err)
		return 1
	}
	if err := mysql.NewKV(testDB, nil).CreateSchema(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "mysql tests:", err)
		return 1
	}
	return m.Run()
}

// db returns the shared database, skipping under -short.
func db(t testing.TB) *sql.DB {
	t.Helper()
	testserv.SkipIfShort(t)
	return testDB
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
