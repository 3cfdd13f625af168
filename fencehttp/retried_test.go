package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
	"github.com/fencelock/fence/internal/servers/servertest/etcdtest"
)

// A retried grant is never ended under its holder (P6 through retries): two
// servers over one store, a client given both.

// lateAnswer is a store whose grants are made but answered only once the
// acquire's client has gone away and answer is closed, as a network store whose
// answer comes back after the client's attempt timeout, and after the client's
// retry elsewhere. It is a plain fence.Locker wrapper: it declares no features,
// so the server knows nothing of request ids from it.
type lateAnswer struct {
	fence.Locker
	answer <-chan struct{}
}

func (s lateAnswer) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	lease, err := s.Locker.Acquire(context.WithoutCancel(ctx), name, ttl, opts...)
	<-ctx.Done()
	<-s.answer
	return lease, err
}

// grantStores are the stores the retry tests run on, each opened for t.
var grantStores = []struct {
	name string
	open func(t *testing.T) fence.Locker
}{
	{"inmem", func(t *testing.T) fence.Locker { return inmem.NewLocker(inmem.Options{}) }},
	{"bolt", func(t *testing.T) fence.Locker {
		st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"etcd", func(t *testing.T) fence.Locker {
		if testing.Short() {
			t.Skip("starts etcd")
		}
		stores, _ := etcdServers(t, etcdtest.New(t).Endpoints, 1)
		return stores[0]
	}},
}

// lateServer starts a server over lateAnswer{store, answer} and returns its URL
// and a channel that gets a value each time it has finished with an acquire.
func lateServer(t *testing.T, store fence.Locker, answer <-chan struct{}) (string, <-chan struct{}) {
	t.Helper()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: lateAnswer{store, answer}, KV: inmem.NewGuard()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 16)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Handler().ServeHTTP(w, r)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			done <- struct{}{}
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL, done
}

// An acquire's first attempt is granted on server A, whose answer comes too
// late: the client's attempt timeout ends it, and the retry on server B finds
// the grant by its request id. A then finishes with a grant whose client went
// away: the grant must stay the holder's, renewable, and nobody else is
// granted the lock while it lasts.
func TestServer_GrantWhoseClientWentAway_RetriedElsewhere_StaysHeld(t *testing.T) {
	for _, tc := range grantStores {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.open(t)
			answer := make(chan struct{})
			lateURL, handled := lateServer(t, store, answer)
			_, b := newServer(t, fencehttp.Config{Locker: store})
			c := mustClient(t, lateURL+","+b.URL, &fencehttp.ClientOptions{AttemptTimeout: 300 * time.Millisecond})
			name := uniq(t, "retried")
			lease, err := c.Acquire(ctxFor(t), name, 10*time.Second)
			if err != nil {
				t.Fatalf("Acquire through a server that answers late = %v; want the grant through the next server", err)
			}
			close(answer) // the late server learns its client went away only now
			select {
			case <-handled:
			case <-time.After(10 * time.Second):
				t.Fatal("the late server never finished its acquire")
			}
			if err := lease.Renew(ctxFor(t), 10*time.Second); err != nil {
				t.Fatalf("Renew of the retried grant after the late server finished = %v; want nil: the grant was ended under its holder", err)
			}
			other := mustClient(t, b.URL, nil)
			if l2, err := other.Acquire(ctxFor(t), name, 10*time.Second); !errors.Is(err, fence.ErrNotAcquired) {
				if l2 != nil {
					t.Fatalf("another client was granted token %d while the retried grant (token %d) is held", l2.Token(), lease.Token())
				}
				t.Fatalf("another client's Acquire = %v; want fence.ErrNotAcquired", err)
			}
			if err := lease.Release(ctxFor(t)); err != nil {
				t.Fatalf("Release = %v; want nil", err)
			}
		})
	}
}

// lateFinder is lateAnswer over a store that keeps request ids, which it
// passes on (driver.RetryFinder), so that the server can serve an abandon.
type lateFinder struct {
	lateAnswer
	rf driver.RetryFinder
}

func (s lateFinder) FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, bool, error) {
	return s.rf.FindRetried(ctx, name, ttl, opts...)
}

// A waiter gives up just as it is granted: the server's answer comes only after
// the client has gone (a slow store), and the server leaves a grant with a
// request id to its retry. The Client's abandon frees it at once: the next
// acquire (through a second server on the store) is granted before the late
// server has even finished, not a full TTL later.
func TestClient_GivesUpAsGranted_AbandonFreesTheLockAtOnce(t *testing.T) {
	for _, tc := range grantStores {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.open(t)
			answer := make(chan struct{})
			s, err := fencehttp.NewServer(fencehttp.Config{Locker: lateFinder{lateAnswer{store, answer}, store.(driver.RetryFinder)}, KV: inmem.NewGuard()})
			if err != nil {
				t.Fatal(err)
			}
			_, hs := newServerOf(t, s)
			defer close(answer)
			name := uniq(t, "abandoned")
			ctx, cancel := context.WithCancel(ctxFor(t))
			gaveUp := make(chan error, 1)
			go func() {
				_, err := mustClient(t, hs.URL, nil).Acquire(ctx, name, 20*time.Second, fence.WithWait(10*time.Second))
				gaveUp <- err
			}()
			waitHeld(t, store.(fence.Inspector), name)
			cancel()
			if err := <-gaveUp; !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire whose context ended = %v; want context.Canceled", err)
			}
			// Through another server: the late one still holds the given-up
			// acquire in its queue, which answers a new acquire 409 at once.
			_, b := newServer(t, fencehttp.Config{Locker: store})
			next, err := mustClient(t, b.URL, nil).Acquire(ctxFor(t), name, 10*time.Second)
			if err != nil {
				t.Fatalf("Acquire after the waiter gave up = %v; want a grant at once: the abandoned grant was left to expire", err)
			}
			if err := next.Release(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// newServerOf serves s as newServer serves the server it makes.
func newServerOf(t *testing.T, s *fencehttp.Server) (*fencehttp.Server, *httptest.Server) {
	t.Helper()
	hs := startHTTP(s)
	t.Cleanup(hs.Close)
	return s, hs
}

// waitHeld waits, at most 10 s, until name is held in the store in.
func waitHeld(t *testing.T, in fence.Inspector, name string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if info, err := in.Inspect(ctxFor(t), name); err == nil && info.Held {
			return
		}
	}
	t.Fatalf("%q never held", name)
}

// An abandon (a release with "request_id") ends the grant of that request id
// only, of the acquire's kind; it answers 410 when there is none, 501 on a store
// that keeps no request ids, and 400 for a body that names a lease too or sends
// an acquire's fields without a request id.
func TestServer_ReleaseByRequestID_EndsThatGrantOnly(t *testing.T) {
	store := inmem.NewLocker(inmem.Options{})
	_, hs := newServer(t, fencehttp.Config{Locker: store})
	c := mustClient(t, hs.URL, nil)
	sem := uniq(t, "sem")
	mine := mustAcquire(t, c, sem, 10*time.Second, fence.WithLimit(2), fence.WithRequestID("abandon-mine-0001"))
	theirs := mustAcquire(t, c, sem, 10*time.Second, fence.WithLimit(2), fence.WithRequestID("abandon-theirs-0001"))
	release := hs.URL + "/v1/locks/" + fencehttp.EscapeName(sem) + "/release"

	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"request_id":"abandon-mine-0001","ttl_ms":10000}`, http.StatusGone}, // a lock: not the permit's kind
		{`{"request_id":"abandon-nobody-0001","ttl_ms":10000,"limit":2}`, http.StatusGone},
		{`{"request_id":"abandon-mine-0001","lease":"` + mine.ID() + `"}`, http.StatusBadRequest},
		{`{"lease":"` + mine.ID() + `","limit":2}`, http.StatusBadRequest},
		{`{"request_id":"abandon-mine-0001","ttl_ms":10000,"limit":2}`, http.StatusOK},
		{`{"request_id":"abandon-mine-0001","ttl_ms":10000,"limit":2}`, http.StatusGone}, // done already
	} {
		if resp, body := post(t, release, tc.body); resp.StatusCode != tc.want {
			t.Fatalf("release %s = %d %s; want %d", tc.body, resp.StatusCode, body, tc.want)
		}
	}
	if err := mine.Renew(ctxFor(t), 10*time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Renew of the abandoned permit = %v; want fence.ErrNotHeld", err)
	}
	if err := theirs.Renew(ctxFor(t), 10*time.Second); err != nil {
		t.Fatalf("Renew of another request id's permit = %v; want nil: an abandon ends its own grant only", err)
	}

	_, plain := newServer(t, fencehttp.Config{Locker: lateAnswer{Locker: store}})
	if resp, body := post(t, plain.URL+"/v1/locks/x/release", `{"request_id":"abandon-mine-0001"}`); resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("abandon on a store that keeps no request ids = %d %s; want 501", resp.StatusCode, body)
	}
}
