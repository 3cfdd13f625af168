package fencehttp_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestServer_LeaseIDsNeverLogged(t *testing.T) {
	var logs syncBuffer
	_, hs := newServer(t, fencehttp.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := mustClient(t, hs.URL, nil)
	ctx := ctxFor(t)
	a := mustAcquire(t, c, "l", time.Minute)
	if err := c.Renew(ctx, "l", a.ID(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "k", []byte("v"), a.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, "l", time.Minute)
	_ = c.Put(ctx, "k", []byte("stale"), a.Fence())                                         // refused: logged
	_ = c.Renew(ctx, "l", a.ID(), time.Minute)                                              // 410: logged
	_ = c.Release(ctx, "l", strings.Repeat("z", 200))                                       // 400 with a long lease id
	call(t, "POST", hs.URL+"/v1/locks/l/renew", `{"lease":"`+b.ID()+`","ttl_ms":"x"}`, nil) // 400 with a body
	if logs.String() == "" {
		t.Fatalf("no logs at debug level: the check below would prove nothing")
	}
	for _, id := range []string{a.ID(), b.ID()} {
		if strings.Contains(logs.String(), id) {
			t.Fatalf("a lease id is in the logs:\n%s", logs.String())
		}
	}
}

func TestClient_TLS_TrustsOnlyTheGivenCA(t *testing.T) {
	s, _ := newServer(t, fencehttp.Config{})
	hs := httptest.NewTLSServer(s.Handler())
	t.Cleanup(hs.Close)

	untrusting := mustClient(t, hs.URL, nil)
	_, err := untrusting.Acquire(ctxFor(t), "tls", time.Minute)
	if !errors.Is(err, fence.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client without the server's CA: want ErrUnavailable about the certificate, got %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(hs.Certificate())
	c := mustClient(t, hs.URL, &fencehttp.ClientOptions{TLSConfig: &tls.Config{RootCAs: pool}})
	lease := mustAcquire(t, c, "tls", time.Minute)
	if err := lease.Release(ctxFor(t)); err != nil {
		t.Fatalf("Release over TLS: %v", err)
	}
}

func TestClient_ProxyErrorPage_Unavailable(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	c := mustClient(t, proxy.URL, nil)
	_, err := c.Acquire(ctxFor(t), "p", time.Minute)
	var se *fencehttp.ServerError
	if !errors.Is(err, fence.ErrUnavailable) || !errors.As(err, &se) || se.Status != http.StatusBadGateway {
		t.Fatalf("a proxy's 502 page: want a *ServerError with status 502 matching ErrUnavailable, got %v", err)
	}
	if err := c.Renew(ctxFor(t), "p", driver.NewLeaseID(), time.Minute); errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("a proxy's 502 on renew must not say the lease is gone: %v", err)
	}
}
