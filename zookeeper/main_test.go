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

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/zookeeper"
)

// srv is the package's standalone ZooKeeper, shared by every test, example and
// benchmark (each uses its own lock names). Under -short none is started and the
// tests that need it skip.
var srv *servers.ZooKeeper

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		var err error
		if srv, err = servers.StartZooKeeper(); err != nil {
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
	servertest.SkipIfShort(t)
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
	servertest.SkipIfShort(t)
	c, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// mustAcquire returns the lease of name that l grants (no wait), failing t if it
// does not.
func mustAcquire(t testing.TB, ctx context.Context, l fence.Locker, name string, ttl time.Duration) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %v) = %v; want a lease", name, ttl, err)
	}
	return lease
}

// freshRoot returns a lock root of its own, for a test that reads the lock nodes.
func freshRoot(what string) string { return "/fence-test/" + what + "-" + driver.NewLeaseID()[:8] }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
