package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

// countingClient returns a client of the shared server that counts the keep-alive
// requests it sends (KeepAliveOnce opens one LeaseKeepAlive stream each).
func countingClient(t *testing.T) (*clientv3.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if strings.HasSuffix(method, "/LeaseKeepAlive") {
			n.Add(1)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(count)},
	})
	if err != nil {
		t.Fatalf("clientv3.New = %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, &n
}

// With FastExpiry a grant's etcd lease has a spare second, so a released grant's
// lease taken again soon is granted on without a keep-alive (on a follower, a
// round trip to the leader). Whether it was or not, etcd's expiry of the new
// holder's key never comes before the holder's deadline (P6): the key is there at
// every look that ends before the deadline. A released lease (TTL 1.5s: an etcd
// lease of 3s) taken again after 0s and 1.2s has time enough left; after 2.4s it
// has 0.6s, too little, and must be refreshed first.
func TestLocker_FastExpiry_PooledLeaseOutlivesItsHolder(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	for _, c := range []struct {
		what      string
		after     time.Duration
		keepAlive bool
	}{
		{"at once", 0, false},
		{"after 1.2s", 1200 * time.Millisecond, false},
		{"after 2.4s", 2400 * time.Millisecond, true},
	} {
		t.Run(c.what, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			name := uniq("spare")
			cli, kas := countingClient(t)
			l := etcd.NewLocker(cli, fastOpts)
			first := mustAcquire(t, ctx, l, name, ttl)
			lease := lockKey(t, ctx, cli, name).Lease
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(c.after)
			before := kas.Load()
			a := mustAcquire(t, ctx, l, name, ttl) // never renewed nor released
			if got := lockKey(t, ctx, cli, name).Lease; got != lease {
				t.Fatalf("etcd lease of the second grant = %x; want the released grant's %x", got, lease)
			}
			if sent := kas.Load() - before; (sent > 0) != c.keepAlive {
				t.Errorf("keep-alives sent by the second acquire = %d; want one: %v", sent, c.keepAlive)
			}
			looks := 0
			for time.Until(a.Deadline()) > 0 {
				resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 && time.Now().Before(a.Deadline()) {
					t.Fatalf("lock key gone %v before the holder's deadline (P6)", time.Until(a.Deadline()).Round(time.Millisecond))
				}
				looks++
				time.Sleep(50 * time.Millisecond)
			}
			if looks < 5 {
				t.Fatalf("%d looks before the deadline; want at least 5 (a machine too slow to tell)", looks)
			}
			// The key does go, with its etcd lease: the lease is the grant's.
			deadline := time.Now().Add(10 * time.Second)
			for {
				info, err := l.Inspect(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if !info.Held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("name still held 10s after the holder's deadline: %+v", info)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := l.Renew(ctx, name, a.ID(), ttl); !errors.Is(err, fence.ErrNotHeld) {
				t.Fatalf("Renew after etcd expired the grant = %v; want fence.ErrNotHeld", err)
			}
		})
	}
}

// A lock's request id is kept on the name's token key, not under the grant's
// etcd lease: a renewal to another TTL, which moves the lock key to a new etcd
// lease, keeps it, so a retry of the acquire still finds the grant; and another
// grant's token write makes it stale.
func TestLocker_RequestID_SurvivesARenewalThatMovesTheLease(t *testing.T) {
	ctx, cli, name := setup(t, "reqmove")
	l := etcd.NewLocker(cli, fastOpts)
	id := "req-" + uniq("move")
	first := mustAcquire(t, ctx, l, name, 10*time.Second, fence.WithRequestID(id))
	before := lockKey(t, ctx, cli, name).Lease
	if err := first.Renew(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if after := lockKey(t, ctx, cli, name).Lease; after == before {
		t.Fatalf("the renewal to another TTL kept etcd lease %x; want the lock key moved to a new one", before)
	}
	retry, err := fence.TryAcquire(ctx, l, name, 30*time.Second, fence.WithRequestID(id))
	if err != nil {
		t.Fatalf("retry after the renewal = %v; want the live grant", err)
	}
	if retry.ID() != first.ID() || retry.Token() != first.Token() {
		t.Fatalf("retry got token %d; want the first grant's %d, same lease id", retry.Token(), first.Token())
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := mustAcquire(t, ctx, l, name, 10*time.Second)
	defer other.Release(ctx)
	if _, err := fence.TryAcquire(ctx, l, name, 10*time.Second, fence.WithRequestID(id)); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("the request id of an ended grant while another holds the name = %v; want ErrNotAcquired", err)
	}
}

// A permit's or shared lease's first attempt that is applied only after its
// retry's grant (held up in flight past the client's attempt timeout) grants
// nothing: one grant per request id, as for a lock.
func TestLocker_RequestID_LateFirstAttemptGrantsNothing(t *testing.T) {
	for _, c := range []struct {
		what   string
		limit  int
		shared bool
	}{
		{"semaphore", 3, false},
		{"shared", 0, true},
	} {
		t.Run(c.what, func(t *testing.T) {
			ctx, cli, name := setup(t, "late-"+c.what)
			first, retry := etcd.NewLocker(cli, fastOpts), etcd.NewLocker(client(t), fastOpts)
			rid := "req-" + uniq("late")
			send, err := first.FirstAttemptForTest(ctx, name, 10*time.Second, c.limit, c.shared, rid, 1)
			if err != nil {
				t.Fatal(err)
			}
			opts := []fence.AcquireOption{fence.WithRequestID(rid)}
			if c.shared {
				opts = append(opts, fence.WithShared())
			} else {
				opts = append(opts, fence.WithLimit(c.limit))
			}
			granted := mustAcquire(t, ctx, retry, name, 10*time.Second, opts...)
			defer granted.Release(ctx)
			late, err := send()
			if err != nil {
				t.Fatal(err)
			}
			if late {
				t.Fatal("the first attempt, applied after its retry's grant, granted a second lease for the request id")
			}
			info, err := retry.Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) != 1 {
				t.Fatalf("Inspect = %+v; want one holder, the retry's grant", info)
			}
		})
	}
}

// steppedClock is the system clock plus an offset a test sets.
type steppedClock struct{ off atomic.Int64 }

func (c *steppedClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *steppedClock) AfterFunc(d time.Duration, f func()) fence.Timer {
	return time.AfterFunc(d, f)
}

// A Locker whose clock has run back since a pooled lease's countdown started
// does not trust it for the time left: it refreshes the lease with a keep-alive
// before granting on it.
func TestLocker_FastExpiry_ClockRunBack_KeepAliveFirst(t *testing.T) {
	ctx := testCtx(t)
	name := uniq("stepback")
	cli, kas := countingClient(t)
	clock := &steppedClock{}
	l := etcd.NewLocker(cli, &etcd.Options{FastExpiry: true, FIFO: true, Clock: clock})
	first := mustAcquire(t, ctx, l, name, 1500*time.Millisecond)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	clock.off.Store(int64(-2 * time.Second))
	before := kas.Load()
	a := mustAcquire(t, ctx, l, name, 1500*time.Millisecond)
	defer a.Release(ctx)
	if sent := kas.Load() - before; sent != 1 {
		t.Fatalf("keep-alives sent by the acquire after the clock ran back 2s = %d; want 1", sent)
	}
}
