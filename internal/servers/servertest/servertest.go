// Package servertest is the test-only wrapper of internal/servers: helpers that take
// a testing.TB, start a throwaway server for one test, fail the test if it cannot
// start, and register its Close with t.Cleanup. The servers themselves, their
// process machinery and the functions that start them (servers.StartRedis,
// servers.StartZooKeeper, mariadb.Start, etcdmember.Start, ...) live in
// internal/servers and its subpackages, which programs such as fence chaos use too;
// this package adds nothing but the testing glue. Production code must not import
// it. The etcd helpers are in servertest/etcdtest, so that only the tests that start
// etcd link the etcd server.
//
// Start one server per test package in TestMain with the servers' Start functions,
// or one per test with the helpers here:
//
//	var srv *servers.Redis
//
//	func TestMain(m *testing.M) {
//		var err error
//		if srv, err = servers.StartRedis(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		srv.Close()
//		os.Exit(code)
//	}
//
//	func TestCrash(t *testing.T) {
//		servertest.SkipIfShort(t)
//		r := servertest.Redis(t) // closed when t ends
//		...
//	}
//
// A missing server binary is an error that says which Debian package to apt-get install
// (scripts/install-deps.sh installs them all). The servers never use the well-known ports
// 6379, 5432 and 3306, so the machine's own services are left alone.
package servertest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// SkipIfShort skips the test under go test -short: integration tests that start servers
// use it so that -short runs stay fast and need no server binaries.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("servertest: integration test skipped in -short mode")
	}
}

// RequireBinary returns the path of the executable name (servers.FindBinary). If it
// is missing, the test fails with a message naming aptPackage, the Debian package to
// install.
func RequireBinary(t testing.TB, name, aptPackage string) string {
	t.Helper()
	path, err := servers.FindBinary(name, aptPackage)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// ForTest returns the server start makes for the test t, closed when t ends: every
// helper here that takes a testing.TB is start wrapped by it. It fails t with start's
// error if the server cannot start.
func ForTest[S interface{ Close() }](t testing.TB, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// sqlServer is a database server that makes and drops databases by name
// (servers.Postgres, mariadb.Server).
type sqlServer interface {
	CreateDatabase(name string) (dsn string, err error)
	DropDatabase(name string) error
	Running() bool
}

// createDatabase creates a database with a unique name on s for the test t and
// returns its DSN; when t ends it drops it, failing t if that fails, unless s no
// longer runs (killed: nothing to drop now; closed: Close removed it all). It fails
// t if the database cannot be created.
func createDatabase(t testing.TB, s sqlServer) string {
	t.Helper()
	name := servers.UniqueName("test")
	dsn, err := s.CreateDatabase(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.Running() {
			return
		}
		if err := s.DropDatabase(name); err != nil {
			t.Errorf("servertest: drop test database: %v", err)
		}
	})
	return dsn
}

var tableSeq atomic.Int64

// TableName returns a table name for t that is unique within this process and says
// which test made it: "t", a counter, '_', then t's name with every character other
// than an ASCII letter or digit as '_', all lower-case and cut to 60 bytes, which
// PostgreSQL, MariaDB and SQLite all accept unquoted. The caller creates and drops
// the table.
func TableName(t testing.TB) string {
	name := fmt.Sprintf("t%d_%s", tableSeq.Add(1), strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r - 'A' + 'a'
		}
		return '_'
	}, t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	return name
}
