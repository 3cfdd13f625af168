package fencehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// shared is the package's one live server over the reference store, started in
// TestMain; tests use unique names (uniq) so they can share it.
var shared struct {
	srv    *httptest.Server
	server *fencehttp.Server
	client *fencehttp.Client
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// runTests starts the shared server on the embedded bolt store (the default of
// `fence serve`) in a temporary directory.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fencehttp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer closeTestCluster()
	store, err := bolt.Open(filepath.Join(dir, "fence.db"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer store.Close()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: store, KV: store})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared.server = s
	shared.srv = startHTTP(s)
	defer shared.srv.Close()
	shared.client, err = fencehttp.NewClient(shared.srv.URL, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

var uniqSeq atomic.Int64

// uniq returns a lock name or key no other test uses.
func uniq(t testing.TB, what string) string {
	return fmt.Sprintf("%s/%s-%d", t.Name(), what, uniqSeq.Add(1))
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newServer starts a server of its own with cfg (Locker and KV default to fresh
// inmem ones) and returns it with its base URL.
func newServer(t testing.TB, cfg fencehttp.Config) (*fencehttp.Server, *httptest.Server) {
	t.Helper()
	if cfg.Locker == nil {
		cfg.Locker = inmem.NewLocker(inmem.Options{})
	}
	if cfg.KV == nil {
		cfg.KV = inmem.NewGuard()
	}
	s, err := fencehttp.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	hs := startHTTP(s)
	t.Cleanup(hs.Close)
	return s, hs
}

// startHTTP starts s over plain HTTP/1.1 and h2c, as fence serve does without TLS.
func startHTTP(s *fencehttp.Server) *httptest.Server {
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	return hs
}

func mustClient(t testing.TB, url string, opts *fencehttp.ClientOptions) *fencehttp.Client {
	t.Helper()
	c, err := fencehttp.NewClient(url, opts)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", url, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func mustAcquire(t testing.TB, l fence.Locker, name string, ttl time.Duration, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t), name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return lease
}
