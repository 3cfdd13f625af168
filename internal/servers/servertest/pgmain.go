package servertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RunWithPostgres is the body of TestMain for a package whose tests share one
// PostgreSQL server and one database db on it (each test keeps to its own rows or
// tables). Under -short it runs m without a server and leaves *dsn empty. Otherwise
// it starts a server (StartPostgres), creates db, sets *dsn to db's DSN, runs m and
// closes the server. It returns m's exit code for os.Exit, or 1 without running m,
// with the reason on stderr, if the server does not start or db cannot be created.
func RunWithPostgres(m *testing.M, db string, dsn *string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return m.Run()
	}
	srv, err := StartPostgres()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: cannot start PostgreSQL: %v\n", db, err)
		return 1
	}
	defer srv.Close()
	if err := srv.Exec("postgres", "CREATE DATABASE "+db); err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: %v\n", db, err)
		return 1
	}
	*dsn = srv.DSN(db)
	return m.Run()
}

// Pool returns a pgx pool on dsn (the database of RunWithPostgres) for the test t,
// closed when t ends. It skips t under -short, where there is no server, and fails t
// if dsn does not parse.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	SkipIfShort(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("servertest: pool on %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}
