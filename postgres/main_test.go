package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence/postgres"
)

// pgServer is the part of servertest.PostgresServer the tests use.
type pgServer interface {
	DSN(db string) string
	CreateDatabase(t testing.TB) string
	Restart() error
	Kill()
	Close()
}

var (
	// server is the one PostgreSQL all tests of the package share.
	server pgServer
	// sharedPool is a pool on a database with the default schema created; tests
	// that only use unique names share it.
	sharedPool *pgxpool.Pool
	sharedDSN  string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	srv, err := startPostgres()
	if err != nil {
		fmt.Fprintf(os.Stderr, "postgres tests: cannot start PostgreSQL: %v\n", err)
		return 1
	}
	defer srv.Close()
	server = srv
	sharedDSN = srv.DSN("postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, sharedDSN)
	if err != nil {
		fmt.Fprintf(os.Stderr, "postgres tests: connect: %v\n", err)
		return 1
	}
	defer pool.Close()
	if err := createSchemas(ctx, pool); err != nil {
		fmt.Fprintf(os.Stderr, "postgres tests: create schema: %v\n", err)
		return 1
	}
	sharedPool = pool
	return m.Run()
}

// newPool returns a pool on dsn, closed when t ends.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New(%q): %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// freshDB returns a pool on a new, empty database of the shared server, for
// tests that change the schema.
func freshDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPool(t, server.CreateDatabase(t))
}

// ctxT returns a context bounded by a generous timeout, cancelled when t ends.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uniq returns a name unique within the run, for locks, resources and keys.
func uniq(t testing.TB, what string) string {
	return fmt.Sprintf("%s/%s/%d.%d", t.Name(), what, runID, uniqSeq.Add(1))
}

// runID tells apart the names of several runs (-count) on one database.
var runID = time.Now().UnixNano()

var uniqSeq atomic.Int64

// accountsDDL is the test table of the row fence: a balance per account id.
const accountsDDL = `CREATE TABLE IF NOT EXISTS accounts (
    id          text PRIMARY KEY,
    balance     bigint NOT NULL DEFAULT 0,
    fence_name  text   NOT NULL DEFAULT '',
    fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    fence_lease text   NOT NULL DEFAULT ''
)`

// plainAccountsDDL is the same table without fence columns, for benchmarks.
const plainAccountsDDL = `CREATE TABLE IF NOT EXISTS plain_accounts (
    id      text PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
)`

// entriesDDL is an unfenced table written under the resource fence.
const entriesDDL = `CREATE TABLE IF NOT EXISTS entries (
    id       bigserial PRIMARY KEY,
    resource text   NOT NULL,
    token    bigint NOT NULL,
    note     text   NOT NULL
)`

// guardedKVDDL holds the values of the resource-fenced KV used by the conformance
// suite (its fences live in the Guard's table).
const guardedKVDDL = `CREATE TABLE IF NOT EXISTS guarded_kv (
    key   text PRIMARY KEY,
    value bytea NOT NULL
)`

// createSchemas creates every table the shared database needs.
func createSchemas(ctx context.Context, pool *pgxpool.Pool) error {
	if err := postgres.NewGuard(pool, nil).CreateSchema(ctx); err != nil {
		return err
	}
	if err := postgres.NewKV(pool, nil).CreateSchema(ctx); err != nil {
		return err
	}
	if err := postgres.NewLocker(pool, nil).CreateSchema(ctx); err != nil {
		return err
	}
	for _, ddl := range []string{accountsDDL, plainAccountsDDL, entriesDDL, guardedKVDDL} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	return nil
}
