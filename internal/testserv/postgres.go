package testserv

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// PostgresServer is a throwaway PostgreSQL server on 127.0.0.1 (servers.Postgres: Port,
// Dir, DSN, Exec, Kill, Restart, Close, PauseWALWriter) with trust authentication for
// the superuser "postgres", plus CreateDatabase for a test. Its fields are fixed for
// its whole life, across Kill and Restart.
type PostgresServer struct {
	*servers.Postgres
}

// StartPostgres is servers.StartPostgres: a fresh cluster in a temporary directory and
// a postgres server for it on a free port of 127.0.0.1, ready for connections. The
// caller must Close it. It returns an error matching ErrNotFound if PostgreSQL is not
// installed, or one with the tail of the log if the server does not start.
func StartPostgres() (*PostgresServer, error) {
	s, err := servers.StartPostgres(nil)
	if err != nil {
		return nil, err
	}
	return &PostgresServer{s}, nil
}

// Postgres starts a server like StartPostgres for the test t, and stops it and removes
// its directory when t ends. It fails t if the server cannot start.
func Postgres(t testing.TB) *PostgresServer {
	t.Helper()
	return ForTest(t, StartPostgres)
}

// CreateDatabase creates a database with a unique name for the test t and returns its
// DSN; it is dropped (WITH (FORCE), closing leftover connections) when t ends. It fails
// t if the database cannot be created.
func (s *PostgresServer) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := servers.UniqueName("test")
	var dsn string
	create := func() (err error) { dsn, err = s.Postgres.CreateDatabase(name); return err }
	createDatabase(t, s.Running, create, func() error { return s.DropDatabase(name) })
	return dsn
}
