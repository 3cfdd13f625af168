package fencehttp_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// connServer is a fence server that counts the connections it accepted and the
// acquire requests it answered.
type connServer struct {
	hs       *httptest.Server
	conns    atomic.Int64
	acquires atomic.Int64
}

func newConnServer(t *testing.T) *connServer {
	t.Helper()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	cs := &connServer{}
	h := s.Handler()
	cs.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && len(r.URL.Path) > len("/acquire") && r.URL.Path[len(r.URL.Path)-len("/acquire"):] == "/acquire" {
			cs.acquires.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	startCounting(t, cs.hs, &cs.conns)
	return cs
}

// The Client keeps its connections: sequential requests share one.
func TestClient_KeepsConnections(t *testing.T) {
	cs := newConnServer(t)
	c := mustClient(t, cs.hs.URL, nil)
	ctx := ctxFor(t)
	for range 20 {
		l := mustAcquire(t, c, "keep", time.Minute)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.conns.Load(); n != 1 {
		t.Fatalf("40 sequential requests took %d connections, want 1", n)
	}
}

// A connection the server closed while it was idle is never written to: the
// next acquire goes, once, on a new connection, and succeeds.
func TestClient_IdleConnectionClosedByServer(t *testing.T) {
	cs := newConnServer(t)
	c := mustClient(t, cs.hs.URL, nil)
	ctx := ctxFor(t)
	for round := range 5 {
		l := mustAcquire(t, c, "idle", time.Minute)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cs.hs.CloseClientConnections() // as an idle timeout or a graceful shutdown does
		// Let the server's FIN reach the client's socket (on a loaded machine the
		// kernel may deliver it late): a request written before it arrives is lost
		// with net/http's Transport as with this one.
		time.Sleep(20 * time.Millisecond)
		before := cs.acquires.Load()
		l, err := c.Acquire(ctx, "idle", time.Minute)
		if err != nil {
			t.Fatalf("round %d: acquire after the server closed the idle connection: %v", round, err)
		}
		if got := cs.acquires.Load() - before; got != 1 {
			t.Fatalf("round %d: the server answered %d acquires for one call, want 1", round, got)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.conns.Load(); n != 6 {
		t.Fatalf("5 closes took %d connections, want 6", n)
	}
}

// A context that ends during a long poll ends the request at once with its
// error, and the connection, with an answer maybe on its way, is not reused.
func TestClient_ContextEndsLongPoll(t *testing.T) {
	cs := newConnServer(t)
	c := mustClient(t, cs.hs.URL, nil)
	ctx := ctxFor(t)
	holder := mustAcquire(t, c, "polled", time.Minute)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "polled", time.Minute, fence.WithWait(time.Minute))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // in its long poll (or about to be: either way it must end)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, fence.ErrNotAcquired) {
			t.Fatalf("cancelled wait: want context.Canceled and ErrNotAcquired, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled wait did not end within 10s")
	}
	// The client works on after it. (Not on "polled": a release now could still
	// be granted to the abandoned wait if the server has not yet seen its client
	// go, whichever transport the client has.)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, c, "after-poll", time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Concurrent callers share the client's pool: connections are kept and reused,
// not opened per request. net/http's Transport may dial a connection for a
// request while another is on its way back to the pool (it then keeps both), so
// the bound is twice the workers, not the workers: without pooling the 400
// requests below open hundreds.
func TestClient_ConcurrentRequestsShareThePool(t *testing.T) {
	cs := newConnServer(t)
	c := mustClient(t, cs.hs.URL, nil)
	ctx := ctxFor(t)
	const workers, pairs = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "pool/" + string(rune('a'+i))
			for range pairs {
				l, err := c.Acquire(ctx, name, time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := cs.conns.Load(); n > 2*workers {
		t.Fatalf("%d workers took %d connections for %d requests, want at most %d", workers, n, 2*workers*pairs, 2*workers)
	}
}

// startCounting starts hs, counting in conns the connections it accepts.
func startCounting(t *testing.T, hs *httptest.Server, conns *atomic.Int64) {
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
}
