// Package testserv starts throwaway real servers (Redis, PostgreSQL, MariaDB,
// ZooKeeper) for integration tests: each on a free port of 127.0.0.1, with its data in a
// fresh temporary directory, in its own process group, stopped and removed by Close.
// etcd is in internal/testserv/etcdserv, so that only the tests that start etcd link
// the etcd server.
//
// It is the testing layer: the process machinery (and Redis, PostgreSQL and ZooKeeper)
// live in internal/servers, which programs may use too; this package adds the helpers
// that take a testing.TB, fail the test and register the cleanup. Production code must not import it.
//
// Start one server per test package in TestMain with the Start* functions, or one per
// test with the helpers that take a testing.TB and register their own cleanup:
//
//	var srv *testserv.RedisServer
//
//	func TestMain(m *testing.M) {
//		var err error
//		if srv, err = testserv.StartRedis(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		srv.Close()
//		os.Exit(code)
//	}
//
// A missing server binary is an error that says which Debian package to apt-get install
// (scripts/install-deps.sh installs them all). The servers never use the well-known ports
// 6379, 5432 and 3306, so the machine's own services are left alone. They are started with
// a parent-death signal, so a test binary that dies (a panic, a -timeout) takes its
// servers with it.
package testserv

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fence/internal/servers"
)

// ErrNotFound matches (errors.Is) the errors of Start* and FindBinary when a server
// binary is missing; their message names the Debian package that provides it.
var ErrNotFound = servers.ErrNotFound

// SkipIfShort skips the test under go test -short: integration tests that start servers
// use it so that -short runs stay fast and need no server binaries.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("testserv: integration test skipped in -short mode")
	}
}

// RequireBinary returns the path of the executable name (searched in PATH, then in the
// usual sbin and PostgreSQL directories). If it is missing, the test fails with a message
// naming aptPackage, the Debian package to install.
func RequireBinary(t testing.TB, name, aptPackage string) string {
	t.Helper()
	path, err := FindBinary(name, aptPackage)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// FindBinary is servers.FindBinary: the path of the executable name, or an error
// matching ErrNotFound that names aptPackage.
func FindBinary(name, aptPackage string) (string, error) {
	return servers.FindBinary(name, aptPackage)
}

// FreePort is servers.FreePort: a TCP port of 127.0.0.1 that was free a moment ago,
// never a well-known one and none it returned recently.
func FreePort() (int, error) { return servers.FreePort() }

// ForTest returns the server start makes for the test t, closed when t ends: the
// helpers that take a testing.TB (Redis, Postgres, MariaDB, ZooKeeper, etcdserv.New)
// are start wrapped by it. It fails t with start's error if the server cannot start.
func ForTest[S interface{ Close() }](t testing.TB, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// createDatabase calls create, failing t if it fails, and when t ends calls drop,
// failing t if that fails, unless running reports the server no longer running
// (killed: nothing to drop now; closed: Close removed it all).
func createDatabase(t testing.TB, running func() bool, create, drop func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !running() {
			return
		}
		if err := drop(); err != nil {
			t.Errorf("testserv: drop test database: %v", err)
		}
	})
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
