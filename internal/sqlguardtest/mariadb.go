package sqlguardtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/mysql"
)

// MariaDB is the one MariaDB server of a test binary, with the database
// fence_test that its tests share (each test uses its own resources and tables).
type MariaDB struct {
	Server *servertest.MariaDBServer
	// DB is an open database fence_test (clientFoundRows=true) holding the mysql
	// dialect's default fences and KV tables.
	DB *sql.DB
	// DSN is the DSN of fence_test, for tests that open connections of their own.
	DSN string
}

// StartMariaDB starts a MariaDB server for a TestMain and creates the database
// fence_test with the default fences and KV tables. The caller must Close it. It
// returns servertest.StartMariaDB's error (matching servers.ErrNotFound if MariaDB
// is not installed), or one saying which step of the set-up failed.
func StartMariaDB() (*MariaDB, error) {
	server, err := servertest.StartMariaDB()
	if err != nil {
		return nil, err
	}
	m := &MariaDB{Server: server, DSN: server.DSN("fence_test")}
	if err := m.setUp(context.Background()); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// RunWithMariaDB is the body of a TestMain whose package shares one MariaDB: it
// starts the server (StartMariaDB), hands it to use, runs m and stops the server. It
// returns m's exit code, or 1 after printing the error (prefixed with pkg) if the
// server cannot start.
func RunWithMariaDB(m *testing.M, pkg string, use func(*MariaDB)) int {
	mdb, err := StartMariaDB()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: %v\n", pkg, err)
		return 1
	}
	defer mdb.Close()
	use(mdb)
	return m.Run()
}

func (m *MariaDB) setUp(ctx context.Context) error {
	if err := m.Server.Exec("CREATE DATABASE IF NOT EXISTS fence_test"); err != nil {
		return err
	}
	var err error
	if m.DB, err = mysql.Open(m.DSN); err != nil {
		return err
	}
	if err := mysql.NewGuard(m.DB, nil).CreateSchema(ctx); err != nil {
		return fmt.Errorf("sqlguardtest: create fences table: %w", err)
	}
	if err := mysql.NewKV(m.DB, nil).CreateSchema(ctx); err != nil {
		return fmt.Errorf("sqlguardtest: create KV table: %w", err)
	}
	return nil
}

// Close closes the database and stops the server, removing its directory.
func (m *MariaDB) Close() {
	if m.DB != nil {
		m.DB.Close()
	}
	m.Server.Close()
}
