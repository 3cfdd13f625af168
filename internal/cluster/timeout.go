package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fence"
)

// withTimeouts bounds every KV request of cli (Get, Put, Delete, Compact, Do, a
// Txn's Commit) and every lease request but KeepAlive by b. The in-process
// client calls the member directly, skipping the gRPC server's "no leader"
// check, so a node cut off from the majority would otherwise wait on a quorum
// for etcd's own request timeout or the caller's context, whichever ends
// first. With the bound it answers in time (as fence.ErrUnavailable, through
// package etcd's error mapping).
func withTimeouts(cli *clientv3.Client, b *bound) *clientv3.Client {
	cli.KV = timeoutKV{KV: cli.KV, b: b}
	cli.Lease = timeoutLease{Lease: cli.Lease, b: b}
	return cli
}

// bound is what ends a request early: a timeout, and a change of leader. A
// proposal forwarded to a leader that died is never answered (etcd does not
// propose it again to the next leader), so a request in flight when a new
// leader is elected is ended then, as fence.ErrUnavailable, rather than at
// its timeout: the caller (a waiting acquire, a failing-over client) tries
// again at once, on the new leader. An error that an election caused reads
// as such (see explain), never as a cancelled request.
type bound struct {
	d         time.Duration
	hasLeader func() bool // whether the member knows a leader now

	mu     sync.Mutex
	epoch  context.Context // ended when the leader changes
	cancel context.CancelFunc
}

// Causes of the requests that a bound ends.
var (
	errLeaderChanged  = errors.New("cluster: the leader changed")
	errRequestTimeout = errors.New("cluster: request timeout")
)

// newBound returns a bound of d per request; hasLeader reports whether the
// member knows a leader now.
func newBound(d time.Duration, hasLeader func() bool) *bound {
	b := &bound{d: d, hasLeader: hasLeader}
	b.epoch, b.cancel = context.WithCancel(context.Background())
	return b
}

// leaderChanged ends the requests in flight.
func (b *bound) leaderChanged() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancel()
	b.epoch, b.cancel = context.WithCancel(context.Background())
}

// with returns ctx bounded by b, and the function that releases it.
func (b *bound) with(ctx context.Context) (context.Context, context.CancelFunc) {
	b.mu.Lock()
	epoch := b.epoch
	b.mu.Unlock()
	cctx, cancelCause := context.WithCancelCause(ctx)
	tctx, cancel := context.WithTimeoutCause(cctx, b.d, errRequestTimeout)
	stop := context.AfterFunc(epoch, func() { cancelCause(errLeaderChanged) })
	return tctx, func() { stop(); cancel(); cancelCause(nil) }
}

// explain returns the error of a request made with bctx (from with, on the
// caller's ctx) as the caller should read it: a *fence.UnavailableError saying
// that the cluster has no leader, or that it elected a new one during the
// request, when the request ended for want of a leader (b ended it, or the
// member refused it for that); else err as it is. An error that is an answer
// (a lease not found, a request too large) and the caller's own end (ctx) are
// never explained away.
func (b *bound) explain(ctx, bctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !leaderless(err) {
		return err
	}
	cause := context.Cause(bctx) // nil while bctx is live
	switch {
	case !b.hasLeader():
		return &fence.UnavailableError{Reason: "the cluster has no leader"}
	case cause == errLeaderChanged || errors.Is(err, rpctypes.ErrLeaderChanged):
		return &fence.UnavailableError{Reason: "the cluster elected a new leader during the request"}
	}
	return err
}

// leaderless reports whether err is how a request ends for want of a leader:
// its context ended (by a bound), or the member answered that it has none,
// that the leader changed, or that the request timed out waiting on one.
func leaderless(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost} {
		if errors.Is(err, e) {
			return true
		}
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
			return true
		}
	}
	return false
}

type timeoutKV struct {
	clientv3.KV
	b *bound
}

func (k timeoutKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	bctx, cancel := k.b.with(ctx)
	defer cancel()
	resp, err := k.KV.Put(bctx, key, val, opts...)
	return resp, k.b.explain(ctx, bctx, err)
}

func (k timeoutKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	bctx, cancel := k.b.with(ctx)
	defer cancel()
	resp, err := k.KV.Get(bctx, key, opts...)
	return resp, k.b.explain(ctx, bctx, err)
}

func (k timeoutKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	bctx, cancel := k.b.with(ctx)
	defer cancel()
	resp, err := k.KV.Delete(bctx, key, opts...)
	return resp, k.b.explain(ctx, bctx, err)
}

func (k timeoutKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	bctx, cancel := k.b.with(ctx)
	defer cancel()
	resp, err := k.KV.Compact(bctx, rev, opts...)
	return resp, k.b.explain(ctx, bctx, err)
}

func (k timeoutKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	bctx, cancel := k.b.with(ctx)
	defer cancel()
	resp, err := k.KV.Do(bctx, op)
	return resp, k.b.explain(ctx, bctx, err)
}

// Txn bounds the transaction from its creation to its Commit.
func (k timeoutKV) Txn(ctx context.Context) clientv3.Txn {
	bctx, cancel := k.b.with(ctx)
	return timeoutTxn{Txn: k.KV.Txn(bctx), cancel: cancel, b: k.b, ctx: ctx, bctx: bctx}
}

// timeoutTxn releases its context's timer when committed.
type timeoutTxn struct {
	clientv3.Txn
	cancel    context.CancelFunc
	b         *bound
	ctx, bctx context.Context // the caller's, and the bounded one (see explain)
}

func (t timeoutTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t timeoutTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t timeoutTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t timeoutTxn) Commit() (*clientv3.TxnResponse, error) {
	defer t.cancel()
	resp, err := t.Txn.Commit()
	return resp, t.b.explain(t.ctx, t.bctx, err)
}

type timeoutLease struct {
	clientv3.Lease
	b *bound
}

func (l timeoutLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	bctx, cancel := l.b.with(ctx)
	defer cancel()
	resp, err := l.Lease.Grant(bctx, ttl)
	return resp, l.b.explain(ctx, bctx, err)
}

func (l timeoutLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	bctx, cancel := l.b.with(ctx)
	defer cancel()
	resp, err := l.Lease.Revoke(bctx, id)
	return resp, l.b.explain(ctx, bctx, err)
}

func (l timeoutLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	bctx, cancel := l.b.with(ctx)
	defer cancel()
	resp, err := l.Lease.TimeToLive(bctx, id, opts...)
	return resp, l.b.explain(ctx, bctx, err)
}

func (l timeoutLease) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	bctx, cancel := l.b.with(ctx)
	defer cancel()
	resp, err := l.Lease.Leases(bctx)
	return resp, l.b.explain(ctx, bctx, err)
}

func (l timeoutLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	bctx, cancel := l.b.with(ctx)
	defer cancel()
	resp, err := l.Lease.KeepAliveOnce(bctx, id)
	return resp, l.b.explain(ctx, bctx, err)
}
