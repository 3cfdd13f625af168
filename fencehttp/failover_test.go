package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// Failover: fence servers over one etcd (as `fence serve --store etcd://` or the
// nodes of a cluster), and a Client that lists them all.

// etcdServers starts n fence servers, each on an etcd Store of its own (its own
// client, as separate processes have) on the one etcd member m, and returns
// their stores and HTTP servers.
func etcdServers(t *testing.T, endpoints []string, n int) ([]*etcd.Store, []*httptest.Server) {
	t.Helper()
	stores := make([]*etcd.Store, n)
	servers := make([]*httptest.Server, n)
	for i := range n {
		st, err := etcd.Open(ctxFor(t), endpoints, nil)
		if err != nil {
			t.Fatalf("etcd.Open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
		_, servers[i] = newServer(t, fencehttp.Config{Locker: st, KV: st})
	}
	return stores, servers
}

// kill ends a server as a crashed process would: its listener closes and so do
// its connections, long polls in flight included.
func kill(hs *httptest.Server) {
	hs.Listener.Close()
	hs.CloseClientConnections()
}

// Three servers on one etcd, a client listing all three: the server the client
// talks to is killed while a lease is held, a waiting acquire is in its long
// poll and a watch is in its blocking query; renewals, releases, new acquires,
// the waiter and the watch all go on through the other servers.
func TestClient_Failover_ServerKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	m := etcdtest.New(t)
	_, hss := etcdServers(t, m.Endpoints, 3)
	urls := []string{hss[0].URL, hss[1].URL, hss[2].URL}
	c := mustClient(t, strings.Join(urls, ","), &fencehttp.ClientOptions{AttemptTimeout: 2 * time.Second})
	if got := c.Servers(); len(got) != 3 || got[0] != urls[0] {
		t.Fatalf("Servers() = %q; want the three servers in order", got)
	}
	ctx := ctxFor(t)

	held := mustAcquire(t, c, "fo-held", 10*time.Second)
	blocker := mustAcquire(t, c, "fo-wait", 10*time.Second)

	// A waiter and a watch, both long-polling server 0 (the client sticks to it).
	type result struct {
		lease *fence.Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "fo-wait", 10*time.Second, fence.WithWait(20*time.Second))
		waited <- result{l, err}
	}()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	states := make(chan fence.LockInfo, 16)
	go func() {
		defer close(states)
		for info, err := range c.Watch(wctx, "fo-held") {
			if err == nil {
				states <- info
			}
		}
	}()
	select {
	case info := <-states:
		if !info.Held || info.Token != held.Token() {
			t.Fatalf("first watched state = %+v; want held with token %d", info, held.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch yielded no first state within 10s")
	}
	time.Sleep(300 * time.Millisecond) // the waiter's and the watch's polls reach server 0

	kill(hss[0])

	renewStart := time.Now()
	if err := held.Renew(ctx, 10*time.Second); err != nil {
		t.Fatalf("Renew after server 0 was killed = %v; want nil through another server", err)
	}
	t.Logf("the first renewal after the kill took %v (server 0 refused, server 1 renewed)", time.Since(renewStart).Round(time.Microsecond))
	fresh := mustAcquire(t, c, "fo-fresh", 10*time.Second)
	if err := fresh.Release(ctx); err != nil {
		t.Fatalf("Release after server 0 was killed = %v; want nil", err)
	}
	if err := c.Put(ctx, "fo-key", []byte("v"), fence.Fence{Name: "fo-held", Token: held.Token(), LeaseID: held.ID()}); err != nil {
		t.Fatalf("Put after server 0 was killed = %v; want nil", err)
	}
	if err := blocker.Release(ctx); err != nil {
		t.Fatalf("Release of the waiter's blocker = %v; want nil", err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiting acquire whose server was killed = %v; want the lock once its blocker was released", r.err)
		}
		if r.lease.Token() <= blocker.Token() {
			t.Fatalf("the waiter got token %d; want above the blocker's %d", r.lease.Token(), blocker.Token())
		}
		_ = r.lease.Release(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting acquire did not end within 15s of its blocker's release")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release of the held lease = %v; want nil", err)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case info, ok := <-states:
			if !ok {
				t.Fatal("the watch ended; want it to go on through another server")
			}
			if !info.Held {
				return // the release, seen through a surviving server
			}
		case <-deadline:
			t.Fatal("the watch did not report the release within 15s of server 0's death")
		}
	}
}

// An acquire whose first attempt is granted but whose answer is lost (the
// server grants, then drops the connection) is retried on the next server with
// the same request id and returns that same grant: the name has one holder and
// no other token was issued.
func TestClient_Failover_LostAnswerReturnsSameGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	m := etcdtest.New(t)
	stores, hss := etcdServers(t, m.Endpoints, 2)

	// A real fence server on the same etcd whose acquire answers are lost: the
	// handler lets the real one grant, keeps its answer, and aborts the
	// connection.
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: stores[0], KV: stores[0]})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		lost []map[string]any
	)
	dropper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/acquire") {
			s.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		var body map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		mu.Lock()
		lost = append(lost, body)
		mu.Unlock()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(dropper.Close)
	dropper.Config.ErrorLog = nil

	for i, tc := range []struct {
		name string
		opts []fence.AcquireOption
	}{
		{"fo-lost-lock", nil},
		{"fo-lost-sem", []fence.AcquireOption{fence.WithLimit(3)}},
		{"fo-lost-shared", []fence.AcquireOption{fence.WithShared()}},
	} {
		// A client of its own: after a failover a client sticks to the next server.
		c := mustClient(t, dropper.URL+","+hss[1].URL, nil)
		begin := time.Now()
		lease, err := c.Acquire(ctxFor(t), tc.name, 10*time.Second, tc.opts...)
		t.Logf("%s: acquire with its first answer lost took %v", tc.name, time.Since(begin).Round(time.Microsecond))
		if err != nil {
			t.Fatalf("%s: Acquire through a server that loses its answer = %v; want the grant through the next server", tc.name, err)
		}
		mu.Lock()
		if len(lost) != i+1 {
			t.Fatalf("%s: the dropping server lost %d answers in all; want %d (one per acquire)", tc.name, len(lost), i+1)
		}
		first := lost[i]
		mu.Unlock()
		if first["lease"] != lease.ID() || first["token"] != float64(lease.Token()) {
			t.Fatalf("%s: the retry returned token %d; want the lost answer's grant %v (same lease id: %v)",
				tc.name, lease.Token(), first["token"], first["lease"] == lease.ID())
		}
		info, err := stores[1].Inspect(ctxFor(t), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		holders := len(info.Holders)
		if info.Holders == nil && info.Held {
			holders = 1
		}
		if holders != 1 || info.Token != lease.Token() || info.LastToken != lease.Token() {
			t.Fatalf("%s: after the retry the name has %d holders, token %d, last token %d; want exactly one holder, token %d, no other token issued",
				tc.name, holders, info.Token, info.LastToken, lease.Token())
		}
		if err := lease.Release(ctxFor(t)); err != nil {
			t.Fatalf("%s: Release = %v; want nil", tc.name, err)
		}
	}
}

// A release whose first attempt is applied but whose answer is lost is retried
// on the next server, which answers 410: the lease is over either way, so
// Release returns nil. A release of a lease that had already ended, with no
// attempt lost, still returns ErrNotHeld.
func TestClient_Failover_ReleaseRetriedAfterLostAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	m := etcdtest.New(t)
	stores, hss := etcdServers(t, m.Endpoints, 2)
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: stores[0], KV: stores[0]})
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int64
	dropper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/release") {
			s.Handler().ServeHTTP(w, r)
			return
		}
		s.Handler().ServeHTTP(httptest.NewRecorder(), r) // released, answer lost
		dropped.Add(1)
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(dropper.Close)

	c := mustClient(t, dropper.URL+","+hss[1].URL, nil)
	lease, err := c.Acquire(ctxFor(t), "fo-release", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctxFor(t), "fo-release", lease.ID()); err != nil {
		t.Fatalf("Release whose first attempt was applied and its answer lost = %v; want nil", err)
	}
	if dropped.Load() != 1 {
		t.Fatalf("the dropping server lost %d release answers; want 1", dropped.Load())
	}
	info, err := stores[1].Inspect(ctxFor(t), "fo-release")
	if err != nil || info.Held {
		t.Fatalf("after the release: Inspect = %+v, %v; want the lock free", info, err)
	}
	if err := c.Release(ctxFor(t), "fo-release", lease.ID()); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Release of an ended lease (the client now on the second server) = %v; want ErrNotHeld", err)
	}
}

// A server that answers 503 unavailable (its store is closed, as a node cut off
// from the majority refuses) moves the request to the next server, and the
// client then sticks to the one that answered.
func TestClient_Failover_503MovesOnAndSticks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	m := etcdtest.New(t)
	stores, hss := etcdServers(t, m.Endpoints, 2)
	if err := stores[0].Close(); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	target, err := url.Parse(hss[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target) // counts what reaches server 0
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(counted.Close)

	one := mustClient(t, counted.URL, nil)
	_, err = one.Acquire(ctxFor(t), "fo-503", 10*time.Second)
	var se *fencehttp.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Acquire on the closed store's server alone = %v; want its 503 unavailable", err)
	}
	sent.Store(0)

	c := mustClient(t, counted.URL+","+hss[1].URL, nil)
	lease, err := c.Acquire(ctxFor(t), "fo-503", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire with the 503 server first = %v; want the grant of the next server", err)
	}
	if got := sent.Load(); got != 1 {
		t.Fatalf("the 503 server got %d requests; want 1", got)
	}
	if err := lease.Renew(ctxFor(t), 10*time.Second); err != nil {
		t.Fatalf("Renew = %v; want nil", err)
	}
	if err := lease.Release(ctxFor(t)); err != nil {
		t.Fatalf("Release = %v; want nil", err)
	}
	if got := sent.Load(); got != 1 {
		t.Fatalf("after the failover the 503 server got %d requests in all; want 1: the client sticks to the server that answered", got)
	}
}

// NewClient takes a comma-separated list of servers and ClientOptions.Servers,
// and refuses a bad URL anywhere in them.
func TestNewClient_ServerList(t *testing.T) {
	c, err := fencehttp.NewClient("http://a:1, http://b:2/", &fencehttp.ClientOptions{Servers: []string{"https://c:3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(c.Servers(), " "), "http://a:1 http://b:2 https://c:3"; got != want {
		t.Fatalf("Servers() = %q; want %q", got, want)
	}
	for _, bad := range []string{"http://a:1,", "http://a:1,b:2", ",http://a:1", ""} {
		if _, err := fencehttp.NewClient(bad, nil); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("NewClient(%q) = %v; want ErrInvalid", bad, err)
		}
	}
	if _, err := fencehttp.NewClient("", &fencehttp.ClientOptions{Servers: []string{"http://a:1"}}); err != nil {
		t.Errorf("NewClient(\"\", Servers: [http://a:1]) = %v; want a client of that server", err)
	}
}

// A retry of an acquire (same request id) that arrives while other acquires of
// the name wait at the server gets its grant at once: it neither queues behind
// waiters who wait for that very grant, nor is answered held.
func TestServer_RetryWhileOthersWait_GetsItsGrant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		locker func(t *testing.T) fence.Locker
	}{
		{"inmem", func(t *testing.T) fence.Locker { return inmem.NewLocker(inmem.Options{}) }},
		{"etcd", func(t *testing.T) fence.Locker {
			if testing.Short() {
				t.Skip("starts etcd")
			}
			stores, _ := etcdServers(t, etcdtest.New(t).Endpoints, 1)
			return stores[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hs := newServer(t, fencehttp.Config{Locker: tc.locker(t)})
			c := mustClient(t, hs.URL, nil)
			const rid = "retry-while-others-wait-0123456789abcdef"
			for _, kind := range [][]fence.AcquireOption{nil, {fence.WithLimit(1)}, {fence.WithShared()}} {
				name := "fo-queue-" + kindName(kind)
				first := mustAcquire(t, c, name, 10*time.Second, append([]fence.AcquireOption{fence.WithRequestID(rid)}, kind...)...)
				wctx, cancel := context.WithCancel(ctxFor(t))
				waiterDone := make(chan error, 1)
				go func() {
					_, err := c.Acquire(wctx, name, 10*time.Second, fence.WithWait(20*time.Second))
					waiterDone <- err
				}()
				time.Sleep(300 * time.Millisecond) // the waiter is in the server's queue
				retry, err := c.Acquire(ctxFor(t), name, 10*time.Second, append([]fence.AcquireOption{fence.WithRequestID(rid), fence.WithWait(0)}, kind...)...)
				if err != nil {
					t.Fatalf("%s: a retry with the grant's request id while another acquire waits = %v; want that grant", name, err)
				}
				if retry.ID() != first.ID() || retry.Token() != first.Token() {
					t.Fatalf("%s: the retry got token %d; want the first grant's %d and lease id", name, retry.Token(), first.Token())
				}
				cancel()
				<-waiterDone
				if err := first.Release(ctxFor(t)); err != nil {
					t.Fatalf("%s: Release = %v", name, err)
				}
			}
		})
	}
}

// kindName names a kind of acquire options, for a lock name.
func kindName(opts []fence.AcquireOption) string {
	var o fence.AcquireOptions
	for _, f := range opts {
		f(&o)
	}
	return fmt.Sprintf("l%d-s%v", o.Limit, o.Shared)
}

// A server that accepts connections and never answers (a hung node) costs a
// request its AttemptTimeout, then the request moves to the next server.
func TestClient_Failover_HungServerCostsOneAttemptTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	stop, accepting := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-accepting // no Add after this
		close(stop)
		conns.Wait()
	})
	go func() {
		defer close(accepting)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { // read the request, never answer
				defer conns.Done()
				defer conn.Close()
				go func() { _, _ = io.Copy(io.Discard, conn) }()
				<-stop
			}()
		}
	}()
	_, good := newServer(t, fencehttp.Config{})
	const attempt = 300 * time.Millisecond
	c := mustClient(t, "http://"+ln.Addr().String()+","+good.URL, &fencehttp.ClientOptions{AttemptTimeout: attempt})
	begin := time.Now()
	lease, err := c.Acquire(ctxFor(t), "fo-hung", 10*time.Second)
	took := time.Since(begin)
	if err != nil {
		t.Fatalf("Acquire with a hung server first = %v; want the next server's grant", err)
	}
	t.Logf("acquire past a hung server took %v (attempt timeout %v)", took.Round(time.Millisecond), attempt)
	if took < attempt || took > attempt+5*time.Second {
		t.Fatalf("Acquire took %v; want about the attempt timeout %v", took, attempt)
	}
	begin = time.Now()
	if err := lease.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took >= attempt {
		t.Fatalf("Release took %v; want it sent straight to the server that answered, well under %v", took, attempt)
	}
}
