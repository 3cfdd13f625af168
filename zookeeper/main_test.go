package zookeeper_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/testserv"
	"github.com/fencelock/fence/zookeeper"
)

// srv is the package's standalone ZooKeeper, shared by every test, example and
// benchmark (each uses its own lock names). Under -short none is started and the
// tests that need it skip.
var srv *testserv.ZooKeeperServer

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		var err error
		if srv, err = testserv.StartZooKeeper(); err != nil {
			fmt.Fprintln(os.Stderr, "zookeeper tests:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

// open returns a Locker on the shared server with its own session, closed at cleanup.
func open(t testing.TB, opts *zookeeper.Options) *zookeeper.Locker {
	t.Helper()
	testserv.SkipIfShort(t)
	l, err := zookeeper.Open([]string{srv.Addr}, opts)
	if err != nil {
		t.Fatalf("zookeeper.Open(%s) = %v; want a locker", srv.Addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
