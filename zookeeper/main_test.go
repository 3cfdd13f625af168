package zookeeper_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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
	return start(t, zookeeper.Open, opts)
}

// start returns what open (Open, OpenStore) makes on the shared server, with its own
// session, closed at cleanup.
func start[T io.Closer](t testing.TB, open func([]string, *zookeeper.Options) (T, error), opts *zookeeper.Options) T {
	t.Helper()
	testserv.SkipIfShort(t)
	c, err := open([]string{srv.Addr}, opts)
	if err != nil {
		t.Fatalf("open(%s) = %v; want a connected locker", srv.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn returns a go-zookeeper connection of its own to the shared server, closed at
// cleanup.
func rawConn(t testing.TB) *zk.Conn {
	t.Helper()
	testserv.SkipIfShort(t)
	c, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
