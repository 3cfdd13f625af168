package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/etcd"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// slowKV is a server's store whose next write, once armed, is held at a gate
// and applied when released, on its own: a server paused with the write in hand
// (or a request retransmitted after a partition heals) whose client gave up on
// the attempt and retried it elsewhere.
type slowKV struct {
	fence.KV
	armed   atomic.Bool
	held    chan struct{} // closed when the armed write reaches the gate
	release chan struct{} // closed to let it go on
	done    chan error    // the armed write's result
}

func newSlowKV(kv fence.KV) *slowKV {
	return &slowKV{KV: kv, held: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
}

// hold runs write, held at the gate if armed. The client is gone by the time it
// runs: it runs whatever the request's context says, as a paused server's
// request does once it resumes.
func (k *slowKV) hold(ctx context.Context, write func(context.Context) error) error {
	if !k.armed.CompareAndSwap(true, false) {
		return write(ctx)
	}
	close(k.held)
	<-k.release
	err := write(context.WithoutCancel(ctx))
	k.done <- err
	return err
}

func (k *slowKV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	return k.hold(ctx, func(ctx context.Context) error { return k.KV.Put(ctx, key, value, f) })
}

func (k *slowKV) Delete(ctx context.Context, key string, f fence.Fence) error {
	return k.hold(ctx, func(ctx context.Context) error { return k.KV.Delete(ctx, key, f) })
}

// A fenced write through a Client listing two servers: its first attempt is held
// at the first server past the attempt timeout, the retry on the second server
// is applied, and the holder writes v2 there. Then the first attempt lands, with
// the same token and lease: it used to be admitted and put v1 back (or delete
// v2). Carrying the write's attempt id, it finds the id claimed and writes
// nothing: v2 stays (P3). Two servers on one embedded store, and two servers on
// one etcd as cluster mode's nodes are.
func TestClient_Failover_LateWriteAttempt_LaterWriteStays(t *testing.T) {
	type stores struct {
		a, b interface {
			fence.Locker
			fence.KV
		}
	}
	for _, st := range []struct {
		name string
		open func(t *testing.T) stores
	}{
		{"bolt", func(t *testing.T) stores {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
			if err != nil {
				t.Fatalf("bolt.Open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return stores{s, s}
		}},
		{"etcd", func(t *testing.T) stores {
			if testing.Short() {
				t.Skip("starts etcd")
			}
			m := etcdtest.New(t)
			var two [2]*etcd.Store
			for i := range two {
				s, err := etcd.Open(ctxFor(t), m.Endpoints, nil)
				if err != nil {
					t.Fatalf("etcd.Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				two[i] = s
			}
			return stores{two[0], two[1]}
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			ss := st.open(t)
			for _, op := range []string{"put", "delete"} {
				t.Run(op, func(t *testing.T) {
					slow := newSlowKV(ss.a)
					_, a := newServer(t, fencehttp.Config{Locker: ss.a, KV: slow})
					_, b := newServer(t, fencehttp.Config{Locker: ss.b, KV: ss.b})
					c := mustClient(t, a.URL+","+b.URL, &fencehttp.ClientOptions{AttemptTimeout: 300 * time.Millisecond})
					name, key := uniq(t, "lock"), uniq(t, "key")
					lease := mustAcquire(t, c, name, time.Minute)
					f := lease.Fence()
					ctx := ctxFor(t)

					if op == "delete" {
						if err := c.Put(ctx, key, []byte("v0"), f); err != nil {
							t.Fatalf("Put(v0) = %v; want nil", err)
						}
					}
					slow.armed.Store(true)
					var err error
					if op == "put" {
						err = c.Put(ctx, key, []byte("v1"), f)
					} else {
						err = c.Delete(ctx, key, f)
					}
					select {
					case <-slow.held:
					default:
						t.Fatalf("the first attempt of the %s never reached the first server's store", op)
					}
					if err != nil {
						close(slow.release)
						t.Fatalf("%s, retried on the second server = %v; want nil", op, err)
					}
					if err := c.Put(ctx, key, []byte("v2"), f); err != nil {
						close(slow.release)
						t.Fatalf("Put(v2) (the holder's next write) = %v; want nil", err)
					}
					close(slow.release)
					select {
					case err := <-slow.done:
						if err != nil {
							t.Fatalf("the %s's late first attempt = %v; want nil (its write was applied)", op, err)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("the late first attempt did not return within 10s")
					}
					it, err := c.Get(ctx, key)
					if err != nil || string(it.Value) != "v2" {
						t.Fatalf("Get after the %s's late first attempt = %q, %v; want v2 (the holder's later, acknowledged write)", op, it.Value, err)
					}
				})
			}
		})
	}
}

// The Client carries the attempt id a context names (fence.WithWriteAttempt) to
// the server's store, which keeps it: the write-attempt suite through HTTP.
func TestClient_WriteAttempts_Conformance(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return shared.client }, fencetest.WithIssuer(shared.client))
}

// curl's view: the same Fence-Attempt on a PUT's retry is answered 200 and
// writes nothing; a malformed or repeated one is 400 invalid, nothing written.
func TestServer_KV_FenceAttempt_CurlShapes(t *testing.T) {
	name, key := uniq(t, "lock"), uniq(t, "key")
	lease := mustAcquire(t, shared.client, name, time.Minute)
	url := shared.srv.URL + "/v1/kv/" + fencehttp.EscapeName(key)
	h := map[string]string{
		fencehttp.HeaderToken: lease.Token().String(), fencehttp.HeaderLock: fencehttp.EscapeName(name),
		fencehttp.HeaderLease: lease.ID(), fencehttp.HeaderAttempt: "w1",
	}
	if a := call(t, "PUT", url, "v1", h); a.status != 200 {
		t.Fatalf("PUT v1 with Fence-Attempt w1: %d %s; want 200", a.status, a.raw)
	}
	h[fencehttp.HeaderAttempt] = "w2"
	if a := call(t, "PUT", url, "v2", h); a.status != 200 {
		t.Fatalf("PUT v2 with Fence-Attempt w2: %d %s; want 200", a.status, a.raw)
	}
	h[fencehttp.HeaderAttempt] = "w1"
	if a := call(t, "PUT", url, "v1", h); a.status != 200 {
		t.Fatalf("PUT v1 again with Fence-Attempt w1 (a late attempt): %d %s; want 200", a.status, a.raw)
	}
	for _, bad := range []string{"has space", strings.Repeat("x", fence.MaxAttemptIDLen+1)} {
		h[fencehttp.HeaderAttempt] = bad
		wantError(t, "PUT with Fence-Attempt "+bad, call(t, "PUT", url, "bad", h), 400, "invalid")
		wantError(t, "DELETE with Fence-Attempt "+bad, call(t, "DELETE", url, "", h), 400, "invalid")
	}
	req, err := http.NewRequestWithContext(ctxFor(t), "PUT", url, strings.NewReader("bad"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	req.Header[fencehttp.HeaderAttempt] = []string{"w3", "w4"}
	wantError(t, "PUT with Fence-Attempt twice", send(t, http.DefaultClient, req), 400, "invalid")
	if a := call(t, "GET", url, "", nil); a.status != 200 || a.raw != "v2" {
		t.Fatalf("GET after the late attempt and the refused writes: %d %q; want 200 v2", a.status, a.raw)
	}
}

// lostAnswerKV applies a Put, then runs after (a newer holder fences the key),
// then keeps the request until its client gives up: the write was applied and
// its answer is lost.
type lostAnswerKV struct {
	fence.KV
	armed atomic.Bool
	after func()
}

func (k *lostAnswerKV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	err := k.KV.Put(ctx, key, value, f)
	if err == nil && k.armed.CompareAndSwap(true, false) {
		k.after()
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// A Put whose first attempt was applied but whose answer was lost, retried on
// another server after a newer holder fenced the key: the retry is refused as
// stale, but the write happened. The client must not report it refused (P3: a
// refused write changed nothing): its outcome is unknown, fence.ErrUnavailable,
// never fence.ErrStaleToken.
func TestClient_RetryRefusedAfterALostAnswer_OutcomeUnknownNotStale(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	lost := &lostAnswerKV{KV: s}
	_, a := newServer(t, fencehttp.Config{Locker: s, KV: lost})
	_, b := newServer(t, fencehttp.Config{Locker: s, KV: s})
	c := mustClient(t, a.URL+","+b.URL, &fencehttp.ClientOptions{AttemptTimeout: 300 * time.Millisecond})
	name, key := uniq(t, "lock"), uniq(t, "key")
	ctx := ctxFor(t)
	old := mustAcquire(t, c, name, time.Minute)
	lost.after = func() {
		// The old holder's lease ends (revoked); a newer holder fences the key.
		if err := s.Revoke(ctx, name); err != nil {
			t.Errorf("Revoke = %v", err)
			return
		}
		newer, err := s.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Errorf("newer Acquire = %v", err)
			return
		}
		if err := s.Fence(ctx, key, newer.Fence()); err != nil {
			t.Errorf("newer holder's Fence = %v", err)
		}
	}
	lost.armed.Store(true)
	err = c.Put(ctx, key, []byte("v1"), old.Fence())
	if got, gerr := s.Get(ctx, key); gerr != nil || string(got.Value) != "v1" {
		t.Fatalf("Get after the lost answer = %q, %v; want v1 (the first attempt applied)", got.Value, gerr)
	}
	if err == nil || errors.Is(err, fence.ErrStaleToken) || !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Put applied, answer lost, retry refused = %v; want an error matching fence.ErrUnavailable (outcome unknown), not fence.ErrStaleToken", err)
	}
	if !strings.Contains(err.Error(), "stale token") {
		t.Errorf("Put's error %q does not say what the retry was answered", err)
	}
}
