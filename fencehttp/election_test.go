package fencehttp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// electingFront stands before a real server as a cluster node does while its
// cluster elects a leader: it answers the first n acquires 503 unavailable
// ("the cluster has no leader"), then passes requests on. It keeps the request
// id of every acquire it got.
type electingFront struct {
	mu    sync.Mutex
	n     int
	rids  []string
	proxy *httputil.ReverseProxy
}

func (f *electingFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/acquire") {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(body, &req)
		f.mu.Lock()
		f.rids = append(f.rids, req.RequestID)
		refuse := len(f.rids) <= f.n
		f.mu.Unlock()
		if refuse {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"acquire \"x\": store unavailable: the cluster has no leader","code":"unavailable"}`))
			return
		}
	}
	f.proxy.ServeHTTP(w, r)
}

// Item (issue 36, 6): the Go client retries a 503 within the caller's wait with
// one server as with a list, under one request id; without a wait it returns
// the 503 at once, whose message says why.
func TestClient_OneServer_503RiddenOutWithinTheWait_OneRequestID(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	target, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := &electingFront{n: 3, proxy: httputil.NewSingleHostReverseProxy(target)}
	front := httptest.NewServer(f)
	t.Cleanup(front.Close)
	c := mustClient(t, front.URL, nil)

	_, err = c.Acquire(ctxFor(t), "x", time.Minute)
	var se *fencehttp.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || !errors.Is(err, fence.ErrUnavailable) ||
		err.Error() != `acquire "x": store unavailable: the cluster has no leader` {
		t.Fatalf("Acquire without a wait from a node electing its leader: want its 503 at once, got %v", err)
	}

	lease, err := c.Acquire(ctxFor(t), "x", time.Minute, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Acquire waiting 10s from a node answering 503 twice more: want the grant, got %v", err)
	}
	defer lease.Release(ctxFor(t))
	f.mu.Lock()
	rids := f.rids[1:] // the waiting call's
	f.mu.Unlock()
	if len(rids) != 3 {
		t.Fatalf("the waiting call sent %d acquires; want 3 (two 503s, then the grant)", len(rids))
	}
	for _, rid := range rids {
		if rid == "" || rid != rids[0] {
			t.Fatalf("the waiting call's request ids: want one, the same on every retry; got %q", rids)
		}
	}
}
