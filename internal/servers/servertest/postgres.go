package servertest

import (
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// PostgresServer is a servers.Postgres (Port, Dir, DSN, Exec, Kill, Restart, Close,
// PauseWALWriter) with CreateDatabase for a test.
type PostgresServer struct {
	*servers.Postgres
}

// StartPostgres is servers.StartPostgres, for a TestMain whose tests then call
// CreateDatabase. The caller must Close it. It returns servers.StartPostgres's
// errors.
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
	return createDatabase(t, s.Postgres)
}
