package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/watchtest"
)

// watchWithin bounds how soon a blocking query or a Client's watch must see a
// change: well under driver.DefaultWatchPoll, so that only a watch woken by the
// store passes.
const watchWithin = 2 * time.Second

// noWatch is a store that reports lock state but cannot follow it: it hides the
// store's fence.Watcher.
type noWatch struct {
	fence.Locker
	fence.Inspector
}

// gauge returns the value of the server's gauge (or counter) name.
func gauge(t testing.TB, s *fencehttp.Server, name string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if c := mf.GetMetric()[0].GetCounter(); c != nil {
				return c.GetValue()
			}
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

const inFlight = "fence_blocking_queries_in_flight"

// waitGauge waits (at most watchWithin) until the server's blocking queries in
// flight are want.
func waitGauge(t testing.TB, s *fencehttp.Server, want float64) {
	t.Helper()
	deadline := time.Now().Add(watchWithin)
	for gauge(t, s, inFlight) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after %v; want %v", inFlight, gauge(t, s, inFlight), watchWithin, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// indexOf returns the Fence-Index of an answer of GET /v1/locks/{name}.
func indexOf(t testing.TB, a answer) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(a.header.Get(fencehttp.HeaderIndex), 10, 64)
	if err != nil {
		t.Fatalf("answer %d %s: Fence-Index %q is not an index", a.status, a.raw, a.header.Get(fencehttp.HeaderIndex))
	}
	return n
}

// timedCall is call, with how long the answer took.
func timedCall(t testing.TB, url string) (answer, time.Duration) {
	t.Helper()
	start := time.Now()
	a := call(t, "GET", url, "", nil)
	return a, time.Since(start)
}

// Every answer of GET /v1/locks/{name} carries its index; with index=N it
// answers at once when the lock's index differs, else at its next change (a
// release, an expiry) or, after wait_ms, with the state as it is then.
func TestServer_BlockingQuery_AnswersOnChangeOrAtTheWaitsEnd(t *testing.T) {
	srv, hs, _ := newBoltServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	ctx := ctxFor(t)
	name := "blocking"
	url := hs.URL + "/v1/locks/" + name

	a := call(t, "GET", url, "", nil)
	if a.status != 200 || indexOf(t, a) != 1 {
		t.Fatalf("state of a lock never acquired: want 200 with Fence-Index 1, got %d %v %s", a.status, a.header, a.raw)
	}
	lease := mustAcquire(t, c, name, time.Minute)
	held := call(t, "GET", url, "", nil)
	idx := indexOf(t, held)
	if want := 2 * uint64(lease.Token()); idx != want {
		t.Fatalf("held with token %d: Fence-Index %d, want %d", lease.Token(), idx, want)
	}

	// Unchanged: the answer comes after wait_ms, read afresh (its time left is
	// that much shorter).
	a, took := timedCall(t, fmt.Sprintf("%s?index=%d&wait_ms=200", url, idx))
	if a.status != 200 || indexOf(t, a) != idx || a.json["held"] != true || took < 200*time.Millisecond {
		t.Fatalf("blocking query on an unchanged lock: want 200, index %d, held, after at least 200ms; got %d %v %s after %v",
			idx, a.status, a.header.Get(fencehttp.HeaderIndex), a.raw, took)
	}
	if before, after := held.json["expires_in_ms"].(float64), a.json["expires_in_ms"].(float64); after > before-199 {
		t.Fatalf("expires_in_ms after a 200ms blocking query = %v, before it %v; want the time left read at the end", after, before)
	}

	// Another index: at once.
	a, took = timedCall(t, url+"?index=1&wait_ms=30000")
	if a.status != 200 || indexOf(t, a) != idx || took > watchWithin {
		t.Fatalf("blocking query with an old index: want 200 with index %d at once, got %d %s after %v", idx, a.status, a.raw, took)
	}
	a, took = timedCall(t, url+"?index=0")
	if a.status != 200 || indexOf(t, a) != idx || took > watchWithin {
		t.Fatalf("blocking query with index 0: want 200 with index %d at once, got %d %s after %v", idx, a.status, a.raw, took)
	}

	// A release wakes it.
	type result struct {
		a    answer
		took time.Duration
	}
	got := make(chan result, 1)
	go func() {
		a, took := timedCall(t, fmt.Sprintf("%s?index=%d&wait_ms=30000", url, idx))
		got <- result{a, took}
	}()
	waitGauge(t, srv, 1)
	released := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.a.status != 200 || r.a.json["held"] != false || indexOf(t, r.a) != idx+1 || time.Since(released) > watchWithin {
		t.Fatalf("blocking query woken by a release: want 200, free, index %d within %v, got %d %s %v after the release",
			idx+1, watchWithin, r.a.status, r.a.raw, time.Since(released))
	}
	waitGauge(t, srv, 0)

	// An expiry, which no request announces, too.
	short := mustAcquire(t, c, name, 300*time.Millisecond)
	a, took = timedCall(t, fmt.Sprintf("%s?index=%d", url, 2*uint64(short.Token())))
	if a.status != 200 || a.json["held"] != false || indexOf(t, a) != 2*uint64(short.Token())+1 || took > 300*time.Millisecond+watchWithin {
		t.Fatalf("blocking query on a lease of 300ms: want it free at the expiry, got %d %s after %v", a.status, a.raw, took)
	}
}

func TestServer_BlockingQuery_BadArguments400NamingTheParameter(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	for _, tc := range []struct{ query, field string }{
		{"index=-1", "index"},
		{"index=abc", "index"},
		{"index=1.5", "index"},
		{"index=18446744073709551616", "index"},
		{"index=1&index=2", "index"},
		{"index=1&wait_ms=-1", "wait_ms"},
		{"index=1&wait_ms=-99999999999999999999", "wait_ms"},
		{"index=1&wait_ms=1s", "wait_ms"},
		{"index=1&wait_ms=1&wait_ms=2", "wait_ms"},
		{"wait_ms=1000", "wait_ms"},
	} {
		a := call(t, "GET", hs.URL+"/v1/locks/x?"+tc.query, "", nil)
		wantError(t, tc.query, a, 400, "invalid")
		if a.json["field"] != tc.field {
			t.Errorf("%s: want field %q, got %s", tc.query, tc.field, a.raw)
		}
		if msg := a.json["error"].(string); !strings.HasPrefix(msg, `watch "x": invalid `+tc.field) {
			t.Errorf("%s: message %q; want it to start with %q", tc.query, msg, `watch "x": invalid `+tc.field)
		}
	}
}

// wait_ms is cut to the server's MaxWait; without wait_ms a blocking query
// waits DefaultBlockingWait, at most MaxWait.
func TestServer_BlockingQuery_WaitCutToMaxWait(t *testing.T) {
	const maxWait = 300 * time.Millisecond
	_, hs := newServer(t, fencehttp.Config{MaxWait: maxWait})
	for _, q := range []string{"index=1&wait_ms=600000", "index=1&wait_ms=99999999999999999999", "index=1"} {
		a, took := timedCall(t, hs.URL+"/v1/locks/never?"+q)
		if a.status != 200 || indexOf(t, a) != 1 || took < maxWait || took > maxWait+watchWithin {
			t.Errorf("%s with MaxWait %v: want 200 with index 1 after %v, got %d %s after %v", q, maxWait, maxWait, a.status, a.raw, took)
		}
	}
}

// A store that can report state but not watch it answers blocking queries 501,
// plain reads as before; a Client's watch ends with ErrNotImplemented.
func TestServer_BlockingQuery_StoreWithoutWatcher501(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	_, hs := newServer(t, fencehttp.Config{Locker: noWatch{l, l}})
	a := call(t, "GET", hs.URL+"/v1/locks/x?index=1", "", nil)
	wantError(t, "blocking query on a store without Watcher", a, 501, "not_implemented")
	if msg := a.json["error"].(string); !strings.Contains(msg, "blocking queries") {
		t.Errorf("501 message %q; want it to say blocking queries are what is not supported", msg)
	}
	if a := call(t, "GET", hs.URL+"/v1/locks/x", "", nil); a.status != 200 || indexOf(t, a) != 1 {
		t.Fatalf("plain read on a store without Watcher: want 200 with Fence-Index 1, got %d %s", a.status, a.raw)
	}
	var errs []error
	for _, err := range mustClient(t, hs.URL, nil).Watch(ctxFor(t), "x") {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], fencehttp.ErrNotImplemented) {
		t.Fatalf("Client.Watch on a store without Watcher: want one error matching ErrNotImplemented, then the end; got %v", errs)
	}
}

// Drain ends blocking queries in flight with 503, as it ends long polls.
func TestServer_BlockingQuery_EndsWith503OnDrain(t *testing.T) {
	srv, hs, _ := newBoltServer(t, fencehttp.Config{})
	got := make(chan answer, 1)
	go func() { got <- call(t, "GET", hs.URL+"/v1/locks/x?index=1&wait_ms=30000", "", nil) }()
	waitGauge(t, srv, 1)
	srv.Drain()
	select {
	case a := <-got:
		wantError(t, "blocking query at Drain", a, 503, "unavailable")
	case <-time.After(watchWithin):
		t.Fatalf("blocking query still open %v after Drain", watchWithin)
	}
	waitGauge(t, srv, 0)
}

// olderServer answers as a server before blocking queries did: it ignores the
// query of GET /v1/locks/{name} and sends no Fence-Index.
func olderServer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.RawQuery = ""
		next.ServeHTTP(noIndexWriter{w}, r)
	})
}

type noIndexWriter struct{ http.ResponseWriter }

func (w noIndexWriter) WriteHeader(status int) {
	w.Header().Del(fencehttp.HeaderIndex)
	w.ResponseWriter.WriteHeader(status)
}

func (w noIndexWriter) Write(b []byte) (int, error) {
	w.Header().Del(fencehttp.HeaderIndex)
	return w.ResponseWriter.Write(b)
}

// A Client's watch of a server older than blocking queries ends with an error
// matching ErrNotImplemented instead of asking again and again.
func TestClient_Watch_OlderServer_EndsWithNotImplemented(t *testing.T) {
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(olderServer(s.Handler()))
	t.Cleanup(hs.Close)
	var errs []error
	n := 0
	for info, err := range mustClient(t, hs.URL, nil).Watch(ctxFor(t), "x") {
		if n++; n > 3 {
			t.Fatalf("Watch of an older server goes on yielding (%+v, %v)", info, err)
		}
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], fencehttp.ErrNotImplemented) || !strings.Contains(errs[0].Error(), "older") {
		t.Fatalf("Client.Watch of an older server: want one error matching ErrNotImplemented saying the server is older; got %v", errs)
	}
}

// A Client's watch rides out a restart of the server: while it is down the
// watch yields errors matching fence.ErrUnavailable, and once it is back the
// watch sees the changes made since.
func TestClient_Watch_ServerRestart_YieldsUnavailableThenSeesTheChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	start := func(addr string) (*fencehttp.Server, *httptest.Server, *bolt.Store) {
		t.Helper()
		store, err := bolt.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fencehttp.NewServer(fencehttp.Config{Locker: store, KV: store})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewUnstartedServer(s.Handler())
		var ln net.Listener
		for try := 0; ; try++ { // the port of the first server, once it is free again
			if ln, err = net.Listen("tcp", addr); err == nil || try == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		hs.Listener.Close()
		hs.Listener = ln
		hs.Start()
		return s, hs, store
	}
	srv, hs, store := start("127.0.0.1:0")
	stop := func() {
		srv.Drain() // as fence serve stops: blocking queries end with 503
		hs.Close()
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
	}
	addr := hs.Listener.Addr().String()
	c := mustClient(t, hs.URL, nil)
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	f := watchtest.Follow(ctx, c, "restarted")
	f.MustUntil(t, watchWithin, "the first state", watchtest.Any)

	stop()
	select {
	case err := <-f.Errs():
		if !errors.Is(err, fence.ErrUnavailable) {
			t.Fatalf("watch while the server is down: yielded %v; want an error matching fence.ErrUnavailable", err)
		}
	case <-time.After(watchWithin):
		t.Fatalf("watch yielded no error within %v of the server going down", watchWithin)
	}
	srv, hs, store = start(addr)
	defer stop()
	lease := mustAcquire(t, c, "restarted", time.Minute)
	// Within the longest backoff (1s) and a change's latency.
	f.MustUntil(t, time.Second+watchWithin, "the grant after the restart", func(i fence.LockInfo) bool {
		return i.Held && i.Token == lease.Token()
	})
	cancel()
	<-f.Done()
}

// Many watches of one name through one Client all see a release; once their
// contexts end, no blocking query is left at the server and no goroutine on
// either side.
func TestClient_Watch_ManyWatchersOfOneName_NothingLeftAfterCancel(t *testing.T) {
	srv, hs, _ := newBoltServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	base := runtime.NumGoroutine()
	const n = 40
	lease := mustAcquire(t, c, "crowd", time.Minute)
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	var all []*watchtest.Follower
	for range n {
		all = append(all, watchtest.Follow(ctx, c, "crowd"))
	}
	for _, f := range all {
		f.MustUntil(t, watchWithin, "the lock held", watchtest.Held(true))
	}
	waitGauge(t, srv, n)
	if err := lease.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, f := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Until(watchWithin, "the release", watchtest.Held(false)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	cancel()
	for _, f := range all {
		<-f.Done()
	}
	waitGauge(t, srv, 0)
	c.CloseIdleConnections() // the keep-alive connections the watches used
	n2 := runtime.NumGoroutine()
	for deadline := time.Now().Add(watchWithin); n2 > base && time.Now().Before(deadline); n2 = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n2 > base {
		t.Errorf("%d goroutines run after the watches ended; %d did before they started", n2, base)
	}
}
