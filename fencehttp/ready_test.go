package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
)

// GET /readyz answers 200 {"status":"ready"} while Config.Ready says the server
// can grant, and 503 "unavailable" with Ready's reason otherwise; HEAD as GET,
// without a body.
func TestServer_Readyz_FollowsTheReadyHook(t *testing.T) {
	var notReady atomic.Pointer[error]
	_, hs := newServer(t, fencehttp.Config{Ready: func(context.Context) error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}})
	a := call(t, "GET", hs.URL+"/readyz", "", nil)
	if a.status != 200 || a.json["status"] != "ready" {
		t.Fatalf("ready: want 200 {\"status\":\"ready\"}, got %d %s", a.status, a.raw)
	}
	if status := head(t, hs.URL+"/readyz"); status != 200 {
		t.Fatalf("HEAD ready: want 200, got %d", status)
	}
	reason := errors.New("the cluster has no leader")
	notReady.Store(&reason)
	a = call(t, "GET", hs.URL+"/readyz", "", nil)
	wantError(t, "not ready", a, 503, "unavailable")
	if msg := a.json["error"]; msg != "not ready: the cluster has no leader" {
		t.Fatalf("not ready: want the message %q, got %q", "not ready: the cluster has no leader", msg)
	}
	if status := head(t, hs.URL+"/readyz"); status != 503 {
		t.Fatalf("HEAD not ready: want 503, got %d", status)
	}
	// /healthz is liveness: the process serves, ready or not.
	if a := call(t, "GET", hs.URL+"/healthz", "", nil); a.status != 200 {
		t.Fatalf("healthz of a server not ready: want 200, got %d %s", a.status, a.raw)
	}
	notReady.Store(nil)
	if a := call(t, "GET", hs.URL+"/readyz", "", nil); a.status != 200 {
		t.Fatalf("ready again: want 200, got %d %s", a.status, a.raw)
	}
}

// A readiness check that does not answer is cut at fencehttp.ReadyTimeout: 503
// saying so, never a probe that hangs.
func TestServer_Readyz_HungCheckIs503InTime(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out fencehttp.ReadyTimeout")
	}
	_, hs := newServer(t, fencehttp.Config{Ready: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}})
	start := time.Now()
	a := call(t, "GET", hs.URL+"/readyz", "", nil)
	took := time.Since(start)
	wantError(t, "hung check", a, 503, "unavailable")
	if msg, _ := a.json["error"].(string); !strings.Contains(msg, "did not answer within") {
		t.Fatalf("hung check: want a message saying it timed out, got %q", msg)
	}
	if took < fencehttp.ReadyTimeout || took > fencehttp.ReadyTimeout+5*time.Second {
		t.Fatalf("hung check: answered after %v, want about %v", took, fencehttp.ReadyTimeout)
	}
}

// Without a Ready hook a server is ready until it drains; draining, /readyz is
// 503 whatever the hook says, as /healthz is.
func TestServer_Readyz_503WhileDraining(t *testing.T) {
	for _, hook := range []struct {
		what  string
		ready func(context.Context) error
	}{{"no hook", nil}, {"a hook saying ready", func(context.Context) error { return nil }}} {
		s, hs := newServer(t, fencehttp.Config{Ready: hook.ready})
		if a := call(t, "GET", hs.URL+"/readyz", "", nil); a.status != 200 || a.json["status"] != "ready" {
			t.Fatalf("%s: want 200 ready, got %d %s", hook.what, a.status, a.raw)
		}
		s.Drain()
		a := call(t, "GET", hs.URL+"/readyz", "", nil)
		wantError(t, hook.what+", draining", a, 503, "unavailable")
		if msg := a.json["error"]; msg != "the server is shutting down" {
			t.Fatalf("%s, draining: want %q, got %q", hook.what, "the server is shutting down", msg)
		}
	}
}

// /readyz needs no token on a server with auth, like /healthz (a load balancer
// has none), and serves GET and HEAD only: 405 with Allow otherwise.
func TestServer_Readyz_NoAuthAndMethods(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{AuthTokens: [][]byte{[]byte("s3cret")}})
	if a := call(t, "GET", hs.URL+"/readyz", "", nil); a.status != 200 {
		t.Fatalf("readyz without a token on a server with auth: want 200, got %d %s", a.status, a.raw)
	}
	wantError(t, "metrics without a token (auth is on)", call(t, "GET", hs.URL+"/metrics", "", nil), 401, "unauthorized")
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		a := call(t, m, hs.URL+"/readyz", "", nil)
		wantError(t, m+" /readyz", a, 405, "method_not_allowed")
		if got := a.header.Get("Allow"); got != "GET, HEAD" {
			t.Fatalf("%s /readyz: want Allow %q, got %q", m, "GET, HEAD", got)
		}
	}
}

// /readyz is counted under its own route label.
func TestServer_Readyz_MetricsLabel(t *testing.T) {
	s, hs := newServer(t, fencehttp.Config{Ready: func(context.Context) error { return errors.New("the cluster has no leader") }})
	call(t, "GET", hs.URL+"/readyz", "", nil)
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fence_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "readyz" && labels["code"] == "503" && m.GetCounter().GetValue() == 1 {
				return
			}
		}
	}
	t.Fatal(`fence_http_requests_total{route="readyz",code="503"}: want 1, not found`)
}

// head sends HEAD url and returns the status.
func head(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), http.MethodHead, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("HEAD %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
