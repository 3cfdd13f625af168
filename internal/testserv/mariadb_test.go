package testserv_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fence/internal/testserv"
)

func mysqlOpen(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestMariaDB runs its subtests against one server, as a backend's TestMain would.
func TestMariaDB(t *testing.T) {
	testserv.SkipIfShort(t)
	srv := testserv.MariaDB(t)
	if srv.Port == 0 || srv.Port == 3306 {
		t.Fatalf("Port = %d, want a free non-default port", srv.Port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("CreateDatabase_IsolatedAndDroppedAfterTest", func(t *testing.T) {
		var dbName string
		t.Run("inner", func(t *testing.T) {
			dsn := srv.CreateDatabase(t)
			for _, want := range []string{"root@tcp(127.0.0.1:", "clientFoundRows=true", "parseTime=true"} {
				if !strings.Contains(dsn, want) {
					t.Fatalf("DSN = %q, want it to contain %q", dsn, want)
				}
			}
			db := mysqlOpen(t, dsn)
			if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INT) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
			other := mysqlOpen(t, srv.CreateDatabase(t))
			var n int
			if err := other.QueryRowContext(ctx,
				"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 't'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("second database sees %d tables named t, want 0", n)
			}
		})
		admin := mysqlOpen(t, srv.DSN(""))
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", dbName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if dbName == "" || n != 0 {
			t.Fatalf("database %q: %d schemata after its test, want a dropped, non-empty name", dbName, n)
		}
	})

	t.Run("ClientFoundRows_UpdateSameValueCountsMatched", func(t *testing.T) {
		db := mysqlOpen(t, srv.CreateDatabase(t))
		if _, err := db.ExecContext(ctx, "CREATE TABLE t (k INT PRIMARY KEY, v INT)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 5)"); err != nil {
			t.Fatal(err)
		}
		res, err := db.ExecContext(ctx, "UPDATE t SET v = 5 WHERE k = 1")
		if err != nil {
			t.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("RowsAffected = %d, %v; want 1 (matched rows)", n, err)
		}
	})

	t.Run("KillThenRestart_KeepsCommittedData", func(t *testing.T) {
		dsn := srv.CreateDatabase(t)
		db := mysqlOpen(t, dsn)
		if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INT) ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (42)"); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := mysqlOpen(t, dsn).QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
			t.Fatalf("SELECT after kill+restart = %d, %v; want 42, nil", v, err)
		}
	})

	// Last: it closes the shared server (the registered cleanup then closes it again).
	t.Run("Close_TwiceThenRestartFails", func(t *testing.T) {
		closeTwiceThenRestartFails(t, srv, func() error {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			defer pcancel()
			return mysqlOpen(t, srv.DSN("")).PingContext(pctx)
		})
	})
}
