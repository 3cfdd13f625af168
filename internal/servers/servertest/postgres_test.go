package servertest_test

import (
	"context"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fencelock/fence/internal/servers/servertest"
)

// TestPostgres runs its subtests against one server, as a backend's TestMain would.
func TestPostgres(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Postgres(t)
	wantOwnPort(t, srv.Port, 5432)
	s := &sqlServer{srv: srv, driver: "pgx", admin: srv.DSN("postgres"),
		dsnHas:       []string{"postgres://postgres@127.0.0.1:"},
		currentDB:    "SELECT current_database()",
		tablesNamedT: "SELECT count(*) FROM pg_tables WHERE tablename = 't'",
		dbExists:     "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
	}
	testSQLServer(t, s, subtest{"Restart_ClosesConnectionsKeepsData", func(t *testing.T) {
		ctx := context.Background()
		dsn := srv.CreateDatabase(t)
		exec(t, s.open(t, dsn), "CREATE TABLE t (v int)", "INSERT INTO t VALUES (7)")
		conn, err := s.open(t, dsn).Conn(ctx) // one connection, never replaced
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
			t.Fatal("old connection still works after Restart, want an error")
		}
		var v int
		if err := s.open(t, dsn).QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 7 {
			t.Fatalf("SELECT after restart = %d, %v; want 7, nil", v, err)
		}
	}})
}
