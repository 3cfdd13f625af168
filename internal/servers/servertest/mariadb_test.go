package servertest_test

import (
	"context"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence/internal/servers/servertest"
)

// TestMariaDB runs its subtests against one server, as a backend's TestMain would.
func TestMariaDB(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.MariaDB(t)
	wantOwnPort(t, srv.Port, 3306)
	s := &sqlServer{srv: srv, driver: "mysql", admin: srv.DSN(""),
		dsnHas:       []string{"root@tcp(127.0.0.1:", "clientFoundRows=true", "parseTime=true"},
		currentDB:    "SELECT DATABASE()",
		tablesNamedT: "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 't'",
		dbExists:     "SELECT COUNT(*) > 0 FROM information_schema.schemata WHERE schema_name = ?",
	}
	testSQLServer(t, s, subtest{"ClientFoundRows_UpdateSameValueCountsMatched", func(t *testing.T) {
		db := s.open(t, srv.CreateDatabase(t))
		exec(t, db, "CREATE TABLE t (k INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 5)")
		res, err := db.ExecContext(context.Background(), "UPDATE t SET v = 5 WHERE k = 1")
		if err != nil {
			t.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("RowsAffected = %d, %v; want 1 (matched rows)", n, err)
		}
	}})
}
