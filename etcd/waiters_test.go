package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

// noWaiterDeleteClient returns a client of the shared server on which deleting
// a waiter record of name (its key has NAME\x00w) fails without being sent, as
// a delete cut off by a partition would.
func noWaiterDeleteClient(t *testing.T, name string) *clientv3.Client {
	t.Helper()
	waiter := []byte(name + "\x00w")
	fail := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if del, ok := req.(*pb.DeleteRangeRequest); ok && bytes.Contains(del.Key, waiter) {
			return status.Error(codes.Unavailable, "partitioned: the delete was never sent")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fail)},
	})
	if err != nil {
		t.Fatalf("clientv3.New = %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// An exclusive acquire that waits behind shared holders records itself waiting
// under its etcd lease, which holds off new shared acquires. When it gives up
// and the record cannot be deleted, its etcd lease must not be pooled for the
// next grant: the record would live on under it while that grant holds it,
// holding off every shared acquire of the name.
func TestLocker_WaiterRecordNotDeleted_LeaseNotPooled(t *testing.T) {
	ctx := testCtx(t)
	name := uniq("unmark")
	reader := etcd.NewLocker(client(t), nil)
	t.Cleanup(func() { reader.Close() })
	shared := mustAcquire(t, ctx, reader, name, 10*time.Second, fence.WithShared())
	t.Cleanup(func() { shared.Release(context.Background()) })

	writer := etcd.NewLocker(noWaiterDeleteClient(t, name), nil)
	t.Cleanup(func() { writer.Close() })
	if _, err := writer.Acquire(ctx, name, 10*time.Second, fence.WithWait(500*time.Millisecond)); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("exclusive Acquire behind a shared holder = %v; want fence.ErrNotAcquired", err)
	}
	// The writer's next grant, of the same TTL, is made on a pooled etcd lease
	// if there is one, and keeps it alive.
	other := mustAcquire(t, ctx, writer, uniq("unmark-next"), 10*time.Second)
	t.Cleanup(func() { other.Release(context.Background()) })

	second, err := etcd.NewLocker(client(t), nil).Acquire(ctx, name, 10*time.Second, fence.WithShared())
	if err != nil {
		t.Fatalf("shared Acquire after the exclusive waiter gave up = %v; want a shared lease: its waiter record lives on", err)
	}
	second.Release(ctx)
}

// keepAliveLog records, for each etcd lease, when the last keep-alive request
// that etcd answered was sent.
type keepAliveLog struct {
	mu       sync.Mutex
	answered map[int64]time.Time
}

// client returns a client of the shared server whose keep-alives log records.
func (k *keepAliveLog) client(t *testing.T) *clientv3.Client {
	t.Helper()
	k.answered = map[int64]time.Time{}
	wrap := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
			return s, err
		}
		return &loggedStream{ClientStream: s, log: k, sent: map[int64][]time.Time{}}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(wrap)},
	})
	if err != nil {
		t.Fatalf("clientv3.New = %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// lastAnswered returns when the last answered keep-alive of lease id was sent.
func (k *keepAliveLog) lastAnswered(id int64) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.answered[id]
	return t, ok
}

// loggedStream is a LeaseKeepAlive stream that logs its requests' send times
// and, as etcd answers them in order, the send time of each answered one.
type loggedStream struct {
	grpc.ClientStream
	log  *keepAliveLog
	mu   sync.Mutex
	sent map[int64][]time.Time // per lease, the send times of unanswered requests
}

func (s *loggedStream) SendMsg(m any) error {
	if req, ok := m.(*pb.LeaseKeepAliveRequest); ok {
		s.mu.Lock()
		s.sent[req.ID] = append(s.sent[req.ID], time.Now())
		s.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *loggedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*pb.LeaseKeepAliveResponse); ok && err == nil && resp.TTL > 0 {
		s.mu.Lock()
		if q := s.sent[resp.ID]; len(q) > 0 {
			s.log.mu.Lock()
			s.log.answered[resp.ID] = q[0]
			s.log.mu.Unlock()
			s.sent[resp.ID] = q[1:]
		}
		s.mu.Unlock()
	}
	return err
}

// A FIFO waiter's etcd lease, kept alive while it waits, goes to the pool when
// the waiter leaves, with the time its countdown last started. The pool's rule
// is that the recorded start is never later than the real one: it must be
// taken before the keep-alive that restarted the countdown was sent, not when
// its answer came.
func TestLocker_FIFOWaiterLeasePooled_StartNoLaterThanItsLastKeepAlive(t *testing.T) {
	ctx := testCtx(t)
	name := uniq("waiter-pool")
	holder := etcd.NewLocker(client(t), nil)
	t.Cleanup(func() { holder.Close() })
	held := mustAcquire(t, ctx, holder, name, 10*time.Second)
	t.Cleanup(func() { held.Release(context.Background()) })

	var kas keepAliveLog
	cli := kas.client(t)
	waiter := etcd.NewLocker(cli, &etcd.Options{FIFO: true})
	t.Cleanup(func() { waiter.Close() })
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(wctx, name, 10*time.Second, fence.WithWait(time.Minute))
		gaveUp <- err
	}()
	// Queued, its waiter key is under its waiter lease, which keep-alives renew.
	// The key is created under the try's own etcd lease and moved to the waiter
	// lease after: the waiter lease is the one granted for 1 s.
	var wl int64
	for deadline := time.Now().Add(10 * time.Second); wl == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued under a waiter lease")
		}
		resp, err := cli.Get(ctx, etcd.DefaultPrefix+"lock/"+name+"\x00w", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				t.Fatal(err)
			}
			if ttl.GrantedTTL == 1 {
				wl = kv.Lease
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := kas.lastAnswered(wl); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no keep-alive of the waiter lease was answered")
		}
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting Acquire whose context ended = %v; want context.Canceled", err)
	}
	start, pooled := waiter.PooledStartForTest(wl)
	if !pooled {
		t.Fatal("the waiter lease was not pooled when the waiter left")
	}
	last, _ := kas.lastAnswered(wl)
	if start.After(last) {
		t.Fatalf("pooled waiter lease's recorded start is %v after its last answered keep-alive was sent; want no later", start.Sub(last))
	}
}
