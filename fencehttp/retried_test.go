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
