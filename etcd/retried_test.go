package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
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

// lostAnswerClient returns a client of the shared server whose first grant
// transaction on a key containing name (a transaction that puts such a key
// under an etcd lease) is sent and applied by etcd, but whose answer is lost:
// once etcd has answered, committed is closed, the call waits for proceed to
// close, and then fails as a reset connection would.
func lostAnswerClient(t *testing.T, name string, committed chan<- struct{}, proceed <-chan struct{}) *clientv3.Client {
	t.Helper()
	var armed atomic.Bool
	armed.Store(true)
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		txn, ok := req.(*pb.TxnRequest)
		if !ok || !grants(txn, name) || !armed.CompareAndSwap(true, false) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		close(committed)
		<-proceed
		return status.Error(codes.Unavailable, "connection reset: the answer was lost")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lose)},
	})
	if err != nil {
		t.Fatalf("clientv3.New = %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// grants reports whether txn puts, if its compares hold, a key containing name
// under an etcd lease: a grant.
func grants(txn *pb.TxnRequest, name string) bool {
	for _, op := range txn.Success {
		if put := op.GetRequestPut(); put != nil && put.Lease != 0 && bytes.Contains(put.Key, []byte(name)) {
			return true
		}
	}
	return false
}

// An acquire with a request id whose grant commits but whose answer is lost is
// retried through another Locker (another fence server on the same etcd), which
// finds the grant by its request id and returns it. The first attempt then
// fails: its cleanup must not end the grant that the retry returned (P6 through
// retries). A lock, a semaphore permit and a shared lease alike.
func TestLocker_RequestID_LostAnswerAttemptNeverEndsTheRetriedGrant(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []fence.AcquireOption
	}{
		{"lock", nil},
		{"semaphore", []fence.AcquireOption{fence.WithLimit(2)}},
		{"shared", []fence.AcquireOption{fence.WithShared()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			name := uniq("lost-" + tc.name)
			committed, proceed := make(chan struct{}), make(chan struct{})
			first := etcd.NewLocker(lostAnswerClient(t, name, committed, proceed), nil)
			t.Cleanup(func() { first.Close() })
			retry := etcd.NewLocker(client(t), nil)
			t.Cleanup(func() { retry.Close() })
			opts := append([]fence.AcquireOption{fence.WithRequestID("lost-answer-" + name)}, tc.opts...)

			firstErr := make(chan error, 1)
			go func() {
				_, err := first.Acquire(ctx, name, 10*time.Second, opts...)
				firstErr <- err
			}()
			select {
			case <-committed:
			case err := <-firstErr:
				t.Fatalf("the first attempt ended (%v) before its grant committed", err)
			}
			lease, err := retry.Acquire(ctx, name, 10*time.Second, opts...)
			if err != nil {
				t.Fatalf("the retry's Acquire = %v; want the first attempt's grant", err)
			}
			close(proceed)
			if err := <-firstErr; err == nil {
				t.Fatal("the first attempt, whose answer was lost, returned a lease; want its error")
			}
			if err := lease.Renew(ctx, 10*time.Second); err != nil {
				t.Fatalf("Renew of the retried grant after the first attempt failed = %v; want nil: the grant was ended under its holder", err)
			}
			if tc.opts == nil {
				other := etcd.NewLocker(client(t), nil)
				t.Cleanup(func() { other.Close() })
				if l2, err := other.Acquire(ctx, name, 10*time.Second); !errors.Is(err, fence.ErrNotAcquired) {
					t.Fatalf("another Locker's Acquire = %v, %v; want fence.ErrNotAcquired while token %d is held", l2, err, lease.Token())
				}
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release = %v", err)
			}
		})
	}
}
