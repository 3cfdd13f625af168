package etcd_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fence/internal/servers/etcdmember"
)

// srv is the package's single-member etcd, shared by every test and example (each
// uses its own lock names and keys). It is embedded, so it needs no binary and runs
// under -short too; only the multi-process cluster tests skip there.
var srv *etcdmember.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdmember.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

// client returns a client of the shared server, closed at the test's cleanup.
func client(t testing.TB) *clientv3.Client {
	t.Helper()
	return newClient(t, srv.Endpoints)
}

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New(%v) = %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exampleClient is a client of the shared server for the examples.
func exampleClient() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	return cli
}
