package fencehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
)

func post(t testing.TB, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestServer_MaxWaiters_OneMoreIs503AtOnce(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv, hs := newServer(t, fencehttp.Config{Locker: store, KV: store, MaxWaiters: 1})
	name := fencehttp.EscapeName(uniq(t, "lock"))
	base := hs.URL + "/v1/locks/" + name
	if resp, body := post(t, base+"/acquire", `{"ttl_ms":30000}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: want 200, got %d %s", resp.StatusCode, body)
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	index := resp.Header.Get(fencehttp.HeaderIndex)

	// The one waiter allowed: a blocking query, until its client goes away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"?index="+index+"&wait_ms=30000", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the blocking query answered %d before it was cancelled", resp.StatusCode)
		}
		waited <- err
	}()
	waitGauge(t, srv, 1)

	start := time.Now()
	resp, body := post(t, base+"/acquire", `{"ttl_ms":1000,"wait_ms":20000}`)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "limit is 1 waiting") {
		t.Fatalf("a waiting acquire over MaxWaiters: want 503 with Retry-After and the limit, got %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a waiting acquire over MaxWaiters: want an answer at once, got it after %v", took)
	}
	resp, err = http.Get(base + "?index=" + index + "&wait_ms=20000")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a blocking query over MaxWaiters: want 503, got %d", resp.StatusCode)
	}
	// An acquire granted at once does not wait and is not refused.
	if resp, body := post(t, hs.URL+"/v1/locks/"+fencehttp.EscapeName(uniq(t, "free"))+"/acquire", `{"ttl_ms":1000,"wait_ms":20000}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("an acquire of a free lock at the waiters' limit: want 200, got %d %s", resp.StatusCode, body)
	}

	cancel()
	if err := <-waited; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("the blocking query: want it cancelled, got %v", err)
	}
	waitGauge(t, srv, 0)
	// Its place is free again: a waiter waits its whole wait and finds the lock held.
	if resp, body := post(t, base+"/acquire", `{"ttl_ms":1000,"wait_ms":100}`); resp.StatusCode != http.StatusConflict {
		t.Fatalf("a waiting acquire after the waiter left: want 409 (held after its wait), got %d %s", resp.StatusCode, body)
	}
}
