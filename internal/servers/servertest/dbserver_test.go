package servertest_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

// sqlServer is a database server under test (MariaDBServer, PostgresServer) with what
// its lifecycle tests need to talk to it through database/sql.
type sqlServer struct {
	srv interface {
		CreateDatabase(t testing.TB) string
		Kill()
		Restart() error
		Close()
	}
	driver string   // database/sql driver name
	admin  string   // DSN of a database that is always there
	dsnHas []string // what every DSN of CreateDatabase contains
	// currentDB selects the connection's database; tablesNamedT counts the tables
	// named t in it; dbExists selects whether the database named by its one
	// parameter exists.
	currentDB, tablesNamedT, dbExists string
}

// subtest is a named subtest of a server's lifecycle tests.
type subtest struct {
	name string
	run  func(t *testing.T)
}

// wantOwnPort fails t unless the server got a port of its own: set, and not standard,
// the port of the machine's own service of that kind.
func wantOwnPort(t *testing.T, port, standard int) {
	t.Helper()
	if port == 0 || port == standard {
		t.Fatalf("Port = %d, want a free port other than %d", port, standard)
	}
}

// open opens dsn with the server's driver, closed when t ends.
func (s *sqlServer) open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// exec runs each statement on db, failing t at the first error.
func exec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// testSQLServer runs the lifecycle subtests every database server passes, then the
// server's own (more), against the one server s, as a backend's TestMain would share
// it; last, Close_TwiceThenRestartFails closes it.
func testSQLServer(t *testing.T, s *sqlServer, more ...subtest) {
	ctx := context.Background()
	all := append([]subtest{
		{"CreateDatabase_IsolatedAndDroppedAfterTest", func(t *testing.T) {
			var dbName string
			t.Run("inner", func(t *testing.T) {
				dsn := s.srv.CreateDatabase(t)
				for _, want := range s.dsnHas {
					if !strings.Contains(dsn, want) {
						t.Fatalf("DSN = %q, want it to contain %q", dsn, want)
					}
				}
				db := s.open(t, dsn)
				if err := db.QueryRowContext(ctx, s.currentDB).Scan(&dbName); err != nil {
					t.Fatal(err)
				}
				exec(t, db, "CREATE TABLE t (v INT)")
				var n int
				if err := s.open(t, s.srv.CreateDatabase(t)).QueryRowContext(ctx, s.tablesNamedT).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Fatalf("second database sees %d tables named t, want 0", n)
				}
			})
			var exists bool
			if err := s.open(t, s.admin).QueryRowContext(ctx, s.dbExists, dbName).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if dbName == "" || exists {
				t.Fatalf("database %q exists after its test = %v, want a dropped, non-empty name", dbName, exists)
			}
		}},
		{"KillThenRestart_KeepsCommittedData", func(t *testing.T) {
			dsn := s.srv.CreateDatabase(t)
			db := s.open(t, dsn)
			exec(t, db, "CREATE TABLE t (v INT)", "INSERT INTO t VALUES (42)")
			s.srv.Kill()
			if err := db.PingContext(ctx); err == nil {
				t.Fatal("Ping after Kill succeeded, want an error")
			}
			if err := s.srv.Restart(); err != nil {
				t.Fatal(err)
			}
			var v int
			if err := s.open(t, dsn).QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
				t.Fatalf("SELECT after kill+restart = %d, %v; want 42, nil", v, err)
			}
		}},
	}, more...)
	all = append(all, subtest{"Close_TwiceThenRestartFails", func(t *testing.T) {
		s.srv.Close()
		s.srv.Close()
		if err := s.srv.Restart(); err == nil {
			t.Fatal("Restart after Close succeeded, want an error")
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := s.open(t, s.admin).PingContext(pctx); err == nil {
			t.Fatal("connecting after Close succeeded, want an error")
		}
	}})
	for _, st := range all {
		t.Run(st.name, st.run)
	}
}
