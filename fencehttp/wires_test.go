package fencehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/service"
)

// Waiters over HTTP and over another wire of the same process (which calls the
// server's service, as the Redis protocol's adapter does) share one queue per
// name: they are granted in the order they arrived, whatever their wire, and a
// newcomer of either wire that does not wait is answered held while they wait.
func TestServer_FairWaiting_OneQueueAcrossWires(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s, base, hc, _ := protoServer(t, store, store, "http1")
	svc := s.Service()
	name := uniq(t, "lock")
	acquire := base + "/v1/locks/" + fencehttp.EscapeName(name) + "/acquire"
	release := strings.TrimSuffix(acquire, "/acquire") + "/release"
	ttl := int64(60000)

	holder := postAcquire(hc, acquire, `{"ttl_ms":60000,"owner":"holder"}`)
	if holder.err != nil || holder.status != http.StatusOK {
		t.Fatalf("first acquire: want 200, got %d %v %v", holder.status, holder.body, holder.err)
	}
	// w0, w2 and w4 wait over HTTP; w1 and w3 over the service itself.
	const n = 5
	answers := make([]chan acquireAnswer, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range n {
		answers[i] = make(chan acquireAnswer, 1)
		waits := gauge(t, s, "fence_waits_total")
		owner := fmt.Sprintf("w%d", i)
		if i%2 == 0 {
			go func() {
				answers[i] <- postAcquire(hc, acquire, fmt.Sprintf(`{"ttl_ms":60000,"wait_ms":20000,"owner":%q}`, owner))
			}()
		} else {
			go func() {
				g, err := svc.Acquire(ctx, name, service.AcquireRequest{TTLms: &ttl, WaitMs: 20000, Owner: owner})
				a := acquireAnswer{status: http.StatusOK, err: err, body: map[string]any{"lease": g.ID}}
				if err != nil {
					a.status = 0
				}
				answers[i] <- a
			}()
		}
		waitUntil(t, fmt.Sprintf("waiter %d waits", i), func() bool { return gauge(t, s, "fence_waits_total") > waits })
	}
	if late := postAcquire(hc, acquire, `{"ttl_ms":60000,"wait_ms":0,"owner":"late"}`); late.status != http.StatusConflict || late.body["code"] != "held" {
		t.Fatalf("a newcomer over HTTP with wait_ms 0 while %d wait: want 409 held, got %d %v %v", n, late.status, late.body, late.err)
	}
	if _, err := svc.Acquire(ctx, name, service.AcquireRequest{TTLms: &ttl, Owner: "late"}); service.Code(err) != "held" {
		t.Fatalf("a newcomer over the service without a wait while %d wait: want held, got %v", n, err)
	}
	lease := holder.body["lease"]
	for i := range n {
		postRelease(t, hc, release, lease)
		var got acquireAnswer
		select {
		case got = <-answers[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: waiter w%d not answered within 20s of the release", i, i)
		}
		if got.err != nil || got.status != http.StatusOK {
			t.Fatalf("round %d: want waiter w%d granted, got %d %v %v", i, i, got.status, got.body, got.err)
		}
		if owner := ownerOf(t, hc, strings.TrimSuffix(acquire, "/acquire")); owner != fmt.Sprintf("w%d", i) {
			t.Fatalf("round %d: want the lock held by w%d, got owner %q", i, i, owner)
		}
		for j := i + 1; j < n; j++ {
			select {
			case a := <-answers[j]:
				t.Fatalf("round %d: waiter w%d answered before its turn: %d %v %v", i, j, a.status, a.body, a.err)
			default:
			}
		}
		lease = got.body["lease"]
	}
	if err := svc.Release(ctx, name, service.ReleaseRequest{Lease: lease.(string)}); err != nil {
		t.Fatalf("release over the service of w%d's lease: %v", n-1, err)
	}
}
