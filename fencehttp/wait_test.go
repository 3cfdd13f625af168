package fencehttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
)

// Long polls in plain handlers: the answers, the connection's reuse, a client
// going away, pipelining, the drain and the order of waiters, over the embedded
// store.

// waitServer starts a server over a fresh bolt store.
func waitServer(t *testing.T) (*fencehttp.Server, string) {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s, hs := newServer(t, fencehttp.Config{Locker: store, KV: store})
	return s, hs.URL
}

// waitUntil polls cond for up to 10s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func postJSON(t testing.TB, hc *http.Client, u, body string) (int, map[string]any) {
	t.Helper()
	resp, err := hc.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("POST %s: status %d, body: %v", u, resp.StatusCode, err)
	}
	return resp.StatusCode, v
}

// countingClient is an http.Client that counts the connections it dials.
func countingClient(t testing.TB) (*http.Client, *atomic.Int64) {
	var dials atomic.Int64
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, &dials
}

func TestServer_WaitingAcquire_WokenByRelease_ConnectionReused(t *testing.T) {
	s, base := waitServer(t)
	name := url.PathEscape(uniq(t, "lock"))
	holder := &http.Client{Timeout: 10 * time.Second}
	code, held := postJSON(t, holder, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	if code != http.StatusOK {
		t.Fatalf("first acquire: want 200, got %d %v", code, held)
	}
	waiter, dials := countingClient(t)
	waits := gauge(t, s, "fence_waits_total")
	type result struct {
		code int
		body map[string]any
	}
	got := make(chan result, 1)
	go func() {
		resp, err := waiter.Post(base+"/v1/locks/"+name+"/acquire", "application/json", strings.NewReader(`{"ttl_ms":60000,"wait_ms":20000}`))
		if err != nil {
			got <- result{code: -1, body: map[string]any{"err": err.Error()}}
			return
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		got <- result{resp.StatusCode, v}
	}()
	waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
	released := time.Now()
	if code, body := postJSON(t, holder, base+"/v1/locks/"+name+"/release", fmt.Sprintf(`{"lease":%q}`, held["lease"])); code != http.StatusOK {
		t.Fatalf("release: want 200, got %d %v", code, body)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting acquire was not granted within 10s of the release")
	}
	if r.code != http.StatusOK || r.body["token"] != held["token"].(float64)+1 {
		t.Fatalf("waiting acquire after the release: want 200 with token %v, got %d %v", held["token"].(float64)+1, r.code, r.body)
	}
	t.Logf("granted %v after the release", time.Since(released))
	// The client goes on over the same connection.
	if code, body := postJSON(t, waiter, base+"/v1/locks/"+name+"/release", fmt.Sprintf(`{"lease":%q}`, r.body["lease"])); code != http.StatusOK {
		t.Fatalf("release by the waiter: want 200, got %d %v", code, body)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the waiter's connection after its long poll: want it reused (1 dial), got %d dials", n)
	}
}

// rawRequest writes req on a new connection and returns it with a reader.
func rawRequest(t testing.TB, base, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

func acquireRequest(name, body string, extra string) string {
	return fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: fence\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", name, extra, len(body), body)
}

func TestServer_WaitingAcquire_ClientGone_NothingGrantedToIt(t *testing.T) {
	s, base := waitServer(t)
	raw := uniq(t, "lock")
	name := url.PathEscape(raw)
	hc := &http.Client{Timeout: 10 * time.Second}
	_, held := postJSON(t, hc, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	waits := gauge(t, s, "fence_waits_total")
	c, _ := rawRequest(t, base, acquireRequest(name, `{"ttl_ms":60000,"wait_ms":20000}`, ""))
	waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
	c.Close()
	// The wait ends when the client goes: its metric of waits ended is observed.
	waitUntil(t, "the gone client's wait ends", func() bool { return waitsEnded(t, s) >= 1 })
	postJSON(t, hc, base+"/v1/locks/"+name+"/release", fmt.Sprintf(`{"lease":%q}`, held["lease"]))
	time.Sleep(100 * time.Millisecond)
	resp, err := hc.Get(base + "/v1/locks/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&info)
	if info["held"] == true {
		t.Fatalf("after the release: want the lock free (its waiter went away), got %v", info)
	}
}

// waitsEnded is how many waiting acquires ended (the wait histogram's count).
func waitsEnded(t testing.TB, s *fencehttp.Server) uint64 {
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fence_wait_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no fence_wait_seconds")
	return 0
}

func TestServer_BlockingQuery_PipelinedRequestAnsweredAfterIt(t *testing.T) {
	s, base := waitServer(t)
	name := url.PathEscape(uniq(t, "lock"))
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(base + "/v1/locks/" + name)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	index := resp.Header.Get("Fence-Index")
	// A blocking query and, in the same write, the next request.
	_, br := rawRequest(t, base, fmt.Sprintf("GET /v1/locks/%s?index=%s&wait_ms=20000 HTTP/1.1\r\nHost: fence\r\n\r\nGET /healthz HTTP/1.1\r\nHost: fence\r\n\r\n", name, index))
	waitGauge(t, s, 1)
	postJSON(t, hc, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the blocking query's answer: %v", err)
	}
	b, _ := io.ReadAll(first.Body)
	if first.StatusCode != http.StatusOK || first.Header.Get("Fence-Index") == index || !strings.Contains(string(b), `"held":true`) {
		t.Fatalf("blocking query after an acquire: want 200 held with a new index, got %d index %s %s", first.StatusCode, first.Header.Get("Fence-Index"), b)
	}
	if first.Header.Get("Content-Type") != "application/json" || first.Header.Get("Cache-Control") != "no-store" || first.Header.Get("Date") == "" {
		t.Fatalf("blocking query's headers: want JSON, no-store and a Date, got %v", first.Header)
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the pipelined request's answer: %v", err)
	}
	b, _ = io.ReadAll(second.Body)
	if second.StatusCode != http.StatusOK || !strings.Contains(string(b), `"ok"`) {
		t.Fatalf("pipelined /healthz: want 200 ok, got %d %s", second.StatusCode, b)
	}
}

func TestServer_WaitingAcquire_Drain503(t *testing.T) {
	s, base := waitServer(t)
	name := url.PathEscape(uniq(t, "lock"))
	hc := &http.Client{Timeout: 10 * time.Second}
	postJSON(t, hc, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	waits := gauge(t, s, "fence_waits_total")
	_, br := rawRequest(t, base, acquireRequest(name, `{"ttl_ms":60000,"wait_ms":20000}`, ""))
	waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
	s.Drain()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the waiting acquire at the drain: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"unavailable"`) {
		t.Fatalf("waiting acquire at the drain: want 503 unavailable, got %d %s", resp.StatusCode, b)
	}
}

// Waiting acquires of one lock are served in the order they came, each release
// handing the lock to the next; one whose wait ends first answers 409 with the
// holder's time left and leaves the others waiting.
func TestServer_WaitingAcquires_InOrder_ShortWaitEndsAlone(t *testing.T) {
	s, base := waitServer(t)
	name := url.PathEscape(uniq(t, "lock"))
	hc := &http.Client{Timeout: 10 * time.Second}
	_, held := postJSON(t, hc, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	const n = 4
	var readers []*bufio.Reader
	for i := range n {
		wait := 20000
		if i == 1 {
			wait = 300 // ends before any release
		}
		waits := gauge(t, s, "fence_waits_total")
		_, br := rawRequest(t, base, acquireRequest(name, fmt.Sprintf(`{"ttl_ms":60000,"wait_ms":%d,"owner":"w%d"}`, wait, i), ""))
		waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
		readers = append(readers, br)
	}
	answer := func(i int) (int, map[string]any) {
		t.Helper()
		resp, err := http.ReadResponse(readers[i], nil)
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		return resp.StatusCode, v
	}
	code, v := answer(1)
	if left, _ := v["expires_in_ms"].(float64); code != http.StatusConflict || v["code"] != "held" || left < 50000 {
		t.Fatalf("the short wait: want 409 held with about a minute left, got %d %v", code, v)
	}
	lease := held["lease"]
	for _, i := range []int{0, 2, 3} {
		if code, body := postJSON(t, hc, base+"/v1/locks/"+name+"/release", fmt.Sprintf(`{"lease":%q}`, lease)); code != http.StatusOK {
			t.Fatalf("release before waiter %d: want 200, got %d %v", i, code, body)
		}
		code, v := answer(i)
		if code != http.StatusOK {
			t.Fatalf("waiter %d after the release: want 200, got %d %v", i, code, v)
		}
		lease = v["lease"]
		resp, err := hc.Get(base + "/v1/locks/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var info map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if info["owner"] != fmt.Sprintf("w%d", i) {
			t.Fatalf("after release %d: want the lock held by w%d (in order), got %v", i, i, info)
		}
	}
}

// A queued acquire whose client goes away leaves the queue: the next one gets
// the lock.
func TestServer_WaitingAcquires_GoneClientSkipped(t *testing.T) {
	s, base := waitServer(t)
	name := url.PathEscape(uniq(t, "lock"))
	hc := &http.Client{Timeout: 10 * time.Second}
	_, held := postJSON(t, hc, base+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range 3 {
		waits := gauge(t, s, "fence_waits_total")
		c, br := rawRequest(t, base, acquireRequest(name, fmt.Sprintf(`{"ttl_ms":60000,"wait_ms":20000,"owner":"w%d"}`, i), ""))
		waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
		conns, readers = append(conns, c), append(readers, br)
	}
	// The head and the second go away.
	ended := waitsEnded(t, s)
	conns[0].Close()
	conns[1].Close()
	waitUntil(t, "the gone clients' waits end", func() bool { return waitsEnded(t, s) >= ended+2 })
	postJSON(t, hc, base+"/v1/locks/"+name+"/release", fmt.Sprintf(`{"lease":%q}`, held["lease"]))
	resp, err := http.ReadResponse(readers[2], nil)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the third waiter after the release: want 200, got %d %v", resp.StatusCode, v)
	}
}

// panicOnWait is the embedded store, whose waiting grants panic.
type panicOnWait struct{ *bolt.Store }

func (p panicOnWait) Grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	if driver.ApplyOptions(opts...).Wait > 0 {
		panic("store bug")
	}
	return p.Store.Grant(ctx, name, ttl, opts...)
}

// A store that panics in a wait costs that request a 500, not the process.
func TestServer_WaitingAcquire_StorePanic500(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	_, hs := newServer(t, fencehttp.Config{Locker: panicOnWait{store}, KV: store})
	name := url.PathEscape(uniq(t, "lock"))
	hc := &http.Client{Timeout: 10 * time.Second}
	postJSON(t, hc, hs.URL+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000}`)
	code, v := postJSON(t, hc, hs.URL+"/v1/locks/"+name+"/acquire", `{"ttl_ms":60000,"wait_ms":5000}`)
	if code != http.StatusInternalServerError || v["code"] != "internal" {
		t.Fatalf("a waiting acquire whose store panics: want 500 internal, got %d %v", code, v)
	}
}
