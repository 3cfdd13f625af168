package testserv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fence/internal/testserv"
)

func pgConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestPostgres runs its subtests against one server, as a backend's TestMain would.
func TestPostgres(t *testing.T) {
	testserv.SkipIfShort(t)
	srv := testserv.Postgres(t)
	if srv.Port == 0 || srv.Port == 5432 {
		t.Fatalf("Port = %d, want a free non-default port", srv.Port)
	}
	ctx := context.Background()

	t.Run("CreateDatabase_IsolatedAndDroppedAfterTest", func(t *testing.T) {
		var dbName string
		t.Run("inner", func(t *testing.T) {
			dsn := srv.CreateDatabase(t)
			if !strings.HasPrefix(dsn, "postgres://postgres@127.0.0.1:") {
				t.Fatalf("DSN = %q, want a postgres:// URL on 127.0.0.1", dsn)
			}
			conn := pgConnect(t, dsn)
			if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			other := pgConnect(t, srv.CreateDatabase(t))
			var n int
			if err := other.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("second database sees %d tables named t, want 0", n)
			}
		})
		admin := pgConnect(t, srv.DSN("postgres"))
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", dbName).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if dbName == "" || exists {
			t.Fatalf("database %q exists after its test = %v, want a dropped, non-empty name", dbName, exists)
		}
	})

	t.Run("KillThenRestart_KeepsCommittedData", func(t *testing.T) {
		dsn := srv.CreateDatabase(t)
		conn := pgConnect(t, dsn)
		if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		if err := conn.Ping(ctx); err == nil {
			t.Fatal("Ping after Kill succeeded, want an error")
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := pgConnect(t, dsn).QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil {
			t.Fatalf("SELECT after kill+restart: %v", err)
		}
		if v != 42 {
			t.Fatalf("v = %d after kill+restart, want 42", v)
		}
	})

	t.Run("Restart_ClosesConnectionsKeepsData", func(t *testing.T) {
		dsn := srv.CreateDatabase(t)
		conn := pgConnect(t, dsn)
		if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)"); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctx, "SELECT 1")
		if err == nil {
			t.Fatal("old connection still works after Restart, want an error")
		}
		var v int
		if err := pgConnect(t, dsn).QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 7 {
			t.Fatalf("SELECT after restart = %d, %v; want 7, nil", v, err)
		}
	})

	// Last: it closes the shared server (the registered cleanup then closes it again).
	t.Run("Close_TwiceThenRestartFails", func(t *testing.T) {
		closeTwiceThenRestartFails(t, srv, func() error { return pgConnect0(srv.DSN("postgres")) })
	})
}

func pgConnect0(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		conn.Close(ctx)
	}
	return err
}
