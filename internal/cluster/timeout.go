package cluster

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
// again at once, on the new leader.
type bound struct {
	d time.Duration

	mu     sync.Mutex
	epoch  context.Context // ended when the leader changes
	cancel context.CancelFunc
}

func newBound(d time.Duration) *bound {
	b := &bound{d: d}
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
	ctx, cancel := context.WithTimeout(ctx, b.d)
	stop := context.AfterFunc(epoch, cancel)
	return ctx, func() { stop(); cancel() }
}

type timeoutKV struct {
	clientv3.KV
	b *bound
}

func (k timeoutKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	ctx, cancel := k.b.with(ctx)
	defer cancel()
	return k.KV.Put(ctx, key, val, opts...)
}

func (k timeoutKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := k.b.with(ctx)
	defer cancel()
	return k.KV.Get(ctx, key, opts...)
}

func (k timeoutKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	ctx, cancel := k.b.with(ctx)
	defer cancel()
	return k.KV.Delete(ctx, key, opts...)
}

func (k timeoutKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	ctx, cancel := k.b.with(ctx)
	defer cancel()
	return k.KV.Compact(ctx, rev, opts...)
}

func (k timeoutKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	ctx, cancel := k.b.with(ctx)
	defer cancel()
	return k.KV.Do(ctx, op)
}

// Txn bounds the transaction from its creation to its Commit.
func (k timeoutKV) Txn(ctx context.Context) clientv3.Txn {
	ctx, cancel := k.b.with(ctx)
	return timeoutTxn{Txn: k.KV.Txn(ctx), cancel: cancel}
}

// timeoutTxn releases its context's timer when committed.
type timeoutTxn struct {
	clientv3.Txn
	cancel context.CancelFunc
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
	return t.Txn.Commit()
}

type timeoutLease struct {
	clientv3.Lease
	b *bound
}

func (l timeoutLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	ctx, cancel := l.b.with(ctx)
	defer cancel()
	return l.Lease.Grant(ctx, ttl)
}

func (l timeoutLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	ctx, cancel := l.b.with(ctx)
	defer cancel()
	return l.Lease.Revoke(ctx, id)
}

func (l timeoutLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	ctx, cancel := l.b.with(ctx)
	defer cancel()
	return l.Lease.TimeToLive(ctx, id, opts...)
}

func (l timeoutLease) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	ctx, cancel := l.b.with(ctx)
	defer cancel()
	return l.Lease.Leases(ctx)
}

func (l timeoutLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := l.b.with(ctx)
	defer cancel()
	return l.Lease.KeepAliveOnce(ctx, id)
}
