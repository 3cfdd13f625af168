package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// Fair waiting (P10) over each protocol fence serve speaks: waiters are granted
// in the order they arrived, and a newcomer never jumps the queue.

// wakeOnCue is the embedded store whose waiting grants are woken by the test
// (wake) rather than by the release: between a release and the wake the lock is
// free while waiters queue, which is when a newcomer could jump the queue.
type wakeOnCue struct {
	*bolt.Store
	wake chan struct{}
}

func (s wakeOnCue) Grant(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, error) {
	o := driver.ApplyOptions(opts...)
	if o.Wait <= 0 {
		return s.Store.Grant(ctx, name, ttl, opts...)
	}
	t := time.NewTimer(o.Wait)
	defer t.Stop()
	for {
		g, err := s.Store.Grant(ctx, name, ttl, append(opts, fence.WithWait(0))...)
		if !errors.Is(err, fence.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-s.wake:
		case <-t.C:
			return g, err
		case <-ctx.Done():
			return driver.Grant{}, errors.Join(err, ctx.Err())
		}
	}
}

// protoServer starts a server over store as fence serve does for proto: "http1"
// (plain HTTP/1.1), "tls" (HTTP/2 negotiated over TLS) or "h2c" (HTTP/2
// without TLS); it returns the server, its URL, an http.Client that speaks
// proto to it, and the count of requests the server got in another protocol.
func protoServer(t *testing.T, store fence.Locker, kv fence.KV, proto string) (*fencehttp.Server, string, *http.Client, *atomic.Int64) {
	t.Helper()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: store, KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	wantMajor := 2
	if proto == "http1" {
		wantMajor = 1
	}
	var other atomic.Int64
	h := s.Handler()
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != wantMajor || (proto == "tls") != (r.TLS != nil) {
			other.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	var hc *http.Client
	switch proto {
	case "http1":
		hs.Start()
		hc = &http.Client{Transport: &http.Transport{}}
	case "tls":
		hs.EnableHTTP2 = true
		hs.StartTLS()
		hc = hs.Client()
	case "h2c":
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		hc = &http.Client{Transport: &http.Transport{Protocols: p}}
	}
	hc.Timeout = 30 * time.Second
	t.Cleanup(hs.Close)
	t.Cleanup(hc.CloseIdleConnections)
	return s, hs.URL, hc, &other
}

// acquireAnswer is a waiter's answer.
type acquireAnswer struct {
	status int
	proto  int
	body   map[string]any
	err    error
}

func postAcquire(hc *http.Client, url, body string) acquireAnswer {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return acquireAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := acquireAnswer{status: resp.StatusCode, proto: resp.ProtoMajor, err: err}
	if err == nil {
		a.err = json.Unmarshal(b, &a.body)
	}
	return a
}

// N waiters that arrive in a known order (each starts once the previous one is
// seen waiting) are granted in that order, one release after another; between a
// release and the head's grant, while the lock is free, a newcomer that does not
// wait is answered held rather than granted.
func TestServer_FairWaiting_ArrivalOrder_NoJump(t *testing.T) {
	for _, proto := range []string{"http1", "tls", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			bs, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bs.Close() })
			store := wakeOnCue{Store: bs, wake: make(chan struct{})}
			s, base, hc, other := protoServer(t, store, bs, proto)
			wantMajor := 2
			if proto == "http1" {
				wantMajor = 1
			}
			acquire := base + "/v1/locks/" + fencehttp.EscapeName(uniq(t, "lock")) + "/acquire"
			release := strings.TrimSuffix(acquire, "/acquire") + "/release"

			holder := postAcquire(hc, acquire, `{"ttl_ms":60000,"owner":"holder"}`)
			if holder.err != nil || holder.status != http.StatusOK || holder.proto != wantMajor {
				t.Fatalf("first acquire: want 200 over HTTP/%d, got %d over HTTP/%d %v %v", wantMajor, holder.status, holder.proto, holder.body, holder.err)
			}
			const n = 5
			answers := make([]chan acquireAnswer, n)
			for i := range n {
				answers[i] = make(chan acquireAnswer, 1)
				waits := gauge(t, s, "fence_waits_total")
				go func() {
					answers[i] <- postAcquire(hc, acquire, fmt.Sprintf(`{"ttl_ms":60000,"wait_ms":20000,"owner":"w%d"}`, i))
				}()
				waitUntil(t, fmt.Sprintf("waiter %d waits", i), func() bool { return gauge(t, s, "fence_waits_total") > waits })
			}
			lease := holder.body["lease"]
			for i := range n {
				postRelease(t, hc, release, lease)
				// The lock is free; its head waits for the wake (or got it at once,
				// if it became the head after the release).
				if late := postAcquire(hc, acquire, `{"ttl_ms":60000,"wait_ms":0,"owner":"late"}`); late.err != nil || late.status != http.StatusConflict || late.body["code"] != "held" {
					t.Fatalf("round %d: a newcomer with wait_ms 0 while %d wait: want 409 held, got %d %v %v", i, n-i, late.status, late.body, late.err)
				}
				var got acquireAnswer
				select {
				case store.wake <- struct{}{}:
					got = <-answers[i]
				case got = <-answers[i]:
				case <-time.After(20 * time.Second):
					t.Fatalf("round %d: waiter %d neither woken nor answered within 20s", i, i)
				}
				if got.err != nil || got.status != http.StatusOK || got.proto != wantMajor {
					t.Fatalf("round %d: want waiter w%d granted over HTTP/%d, got %d over HTTP/%d %v %v", i, i, wantMajor, got.status, got.proto, got.body, got.err)
				}
				for j := i + 1; j < n; j++ {
					select {
					case a := <-answers[j]:
						t.Fatalf("round %d: waiter w%d answered before w%d's turn: %d %v", i, j, j, a.status, a.body)
					default:
					}
				}
				if owner := ownerOf(t, hc, strings.TrimSuffix(acquire, "/acquire")); owner != fmt.Sprintf("w%d", i) {
					t.Fatalf("round %d: want the lock held by w%d, got owner %q", i, i, owner)
				}
				lease = got.body["lease"]
			}
			if n := other.Load(); n != 0 {
				t.Fatalf("the server got %d requests in another protocol than %s", n, proto)
			}
		})
	}
}

// ownerOf returns the owner of the lock at url (GET /v1/locks/{name}).
func ownerOf(t *testing.T, hc *http.Client, url string) any {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return info["owner"]
}

func postRelease(t *testing.T, hc *http.Client, url string, lease any) {
	t.Helper()
	a := postAcquire(hc, url, fmt.Sprintf(`{"lease":%q}`, lease))
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("release: want 200, got %d %v %v", a.status, a.body, a.err)
	}
}

// The Go client speaks HTTP/2 to an https server by default, and h2c when
// asked (ClientOptions.H2C).
func TestClient_HTTP2_OverTLSByDefault_H2CWhenAsked(t *testing.T) {
	for _, proto := range []string{"tls", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			_, base, hc, other := protoServer(t, store, store, proto)
			opts := &fencehttp.ClientOptions{H2C: proto == "h2c"}
			if proto == "tls" {
				opts.TLSConfig = hc.Transport.(*http.Transport).TLSClientConfig // trusts the test's CA
			}
			c := mustClient(t, base, opts)
			l := mustAcquire(t, c, uniq(t, "lock"), time.Minute)
			if err := l.Release(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
			if n := other.Load(); n != 0 {
				t.Fatalf("the client sent %d requests in another protocol than HTTP/2 (%s)", n, proto)
			}
		})
	}
}
