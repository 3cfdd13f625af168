package servertest

import (
	"testing"

	"github.com/fencelock/fence/internal/servers/mariadb"
)

// MariaDBServer is a mariadb.Server (Port, Dir, DSN, Exec, Kill, Restart, Close) with
// CreateDatabase for a test.
type MariaDBServer struct {
	*mariadb.Server
}

// StartMariaDB is mariadb.Start, for a TestMain whose tests then call
// CreateDatabase. The caller must Close it. It returns mariadb.Start's errors.
func StartMariaDB() (*MariaDBServer, error) {
	s, err := mariadb.Start()
	if err != nil {
		return nil, err
	}
	return &MariaDBServer{s}, nil
}

// MariaDB starts a server like StartMariaDB for the test t, and stops it and removes
// its directory when t ends. It fails t if the server cannot start.
func MariaDB(t testing.TB) *MariaDBServer {
	t.Helper()
	return ForTest(t, StartMariaDB)
}

// CreateDatabase creates a database with a unique name for the test t and returns its
// DSN; it is dropped when t ends. It fails t if the database cannot be created.
func (s *MariaDBServer) CreateDatabase(t testing.TB) string {
	t.Helper()
	return createDatabase(t, s.Server)
}
