package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
)

// fallbackPoll bounds how long a waiter trusts its watch alone: after it, the waiter
// tries again even without an event (a watch that silently stalled, say behind a
// partition, must not strand it).
const fallbackPoll = 5 * time.Second

// cleanupTimeout bounds the best-effort revocation of an etcd lease that was granted
// for a failed attempt, which runs even if the caller's context has ended.
const cleanupTimeout = 2 * time.Second

// DefaultListLimit is the number of locks List returns when its limit is <= 0.
const DefaultListLimit = 1000

// Locker is a fence.Locker on etcd. The fencing token of a grant is the create
// revision of the lock key (see the package documentation). It also implements
// fence.Inspector. It is safe for concurrent use.
type Locker struct {
	cli   *clientv3.Client
	keys  keys
	clock fence.Clock

	closed atomic.Bool
	mu     sync.Mutex
	done   chan struct{} // closed by Close: ends waits
}

var (
	_ fence.Locker    = (*Locker)(nil)
	_ fence.Inspector = (*Locker)(nil)
)

// NewLocker returns a Locker that keeps its locks in etcd through cli, under
// opts.Prefix. The caller keeps ownership of cli: Locker.Close does not close it.
func NewLocker(cli *clientv3.Client, opts *Options) *Locker {
	return &Locker{cli: cli, keys: keys{opts.prefix()}, clock: opts.clock(), done: make(chan struct{})}
}

// Close makes later calls return fence.ErrClosed and ends waits in progress with
// fence.ErrClosed. Leases already granted stay held at etcd until released or
// expired. It does not close the client and always returns nil.
func (l *Locker) Close() error {
	l.closeOnce()
	return nil
}

// closeOnce closes l and reports whether it was already closed.
func (l *Locker) closeOnce() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Swap(true) {
		return true
	}
	close(l.done)
	return false
}

// leaseSeconds is the etcd lease TTL for a fence TTL: whole seconds, rounded up, so
// etcd never expires a lease before the holder's deadline. (etcd also raises TTLs
// below its minimum, 1.5 election timeouts, to that minimum.)
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// Acquire grants a lease on name for ttl (see fence.Locker). The etcd lease behind it
// has ceil(ttl) whole seconds, or etcd's minimum lease TTL if that is longer; the
// returned lease's deadline is the requested ttl from when the request was sent.
//
// It returns an error matching fence.ErrNotAcquired (a *fence.HeldError) if the lock
// stayed held, also matching ctx.Err() when ctx ended the wait; fence.ErrInvalid for a
// bad name or TTL; fence.ErrTokenExhausted if etcd's revision passed fence.MaxToken;
// fence.ErrUnavailable if etcd cannot be reached; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if err := l.check(name); err != nil {
		return nil, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return nil, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	o := fence.ApplyAcquireOptions(opts...)
	var waitEnd <-chan time.Time
	if o.Wait > 0 && o.Wait != fence.WaitForever {
		t := time.NewTimer(o.Wait)
		defer t.Stop()
		waitEnd = t.C
	}
	id := fence.NewLeaseID()
	for {
		lease, rev, err := l.try(ctx, name, id, ttl, o.AutoRenew)
		if err != nil || lease != nil {
			return lease, err
		}
		if o.Wait == 0 {
			return nil, l.heldError(ctx, name, nil)
		}
		if err := l.waitDelete(ctx, name, rev, waitEnd); err != nil {
			return nil, err
		}
	}
}

// try makes one attempt: grant an etcd lease, then create the lock key under it if
// it does not exist. It returns the lease, or nil and the store revision at which
// the lock was seen held.
func (l *Locker) try(ctx context.Context, name, id string, ttl time.Duration, auto bool) (*fence.Lease, int64, error) {
	start := l.clock.Now()
	g, err := l.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: acquire %q: grant: %w", name, storeErr(err))
	}
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(clientv3.OpPut(lk, id, clientv3.WithLease(g.ID)), clientv3.OpPut(l.keys.token(name), "")).
		Commit()
	if err != nil {
		// The key may or may not have been created; if it was, it is under g and
		// revoking g deletes it, so no lock is left behind that nobody holds.
		l.revoke(g.ID)
		return nil, 0, fmt.Errorf("etcd: acquire %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		l.revoke(g.ID)
		return nil, resp.Header.Revision, nil
	}
	// The transaction's revision is the create revision of the lock key.
	tok := fence.Token(resp.Header.Revision)
	if resp.Header.Revision <= 0 || tok > fence.MaxToken {
		l.revoke(g.ID)
		return nil, 0, fmt.Errorf("etcd: acquire %q: revision %d: %w", name, resp.Header.Revision, fence.ErrTokenExhausted)
	}
	return fence.NewLease(fence.LeaseConfig{
		Locker: l, Name: name, Token: tok, ID: id, TTL: ttl,
		Start: start, Clock: l.clock, AutoRenew: auto,
	}), 0, nil
}

// revoke revokes an etcd lease that is of no use, best effort: if it fails the lease
// expires by itself.
func (l *Locker) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, id)
}

// waitDelete blocks until the lock key of name is deleted after revision rev (a
// release, or the expiry of the holder's etcd lease), the fallback poll interval
// passes, the watch breaks, or the wait ends. It returns nil when an attempt should
// be made, and the error Acquire returns otherwise.
//
// The watch starts at rev+1, the revision right after the failed attempt: a delete in
// between is not missed, and a watch at the current revision joins etcd's synced
// watchers at once. (concurrency.Mutex watches from an older revision, which puts
// its watcher in the unsynced group, served by a background loop every 100 ms.)
func (l *Locker) waitDelete(ctx context.Context, name string, rev int64, waitEnd <-chan time.Time) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := l.cli.Watch(wctx, l.keys.lock(name), clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	poll := time.NewTimer(fallbackPoll)
	defer poll.Stop()
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				// A broken watch (no leader, compaction, closed client): try again;
				// the attempt reports an unreachable store.
				if ctx.Err() != nil {
					return l.heldError(ctx, name, ctx.Err())
				}
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		case <-poll.C:
			return nil
		case <-waitEnd:
			return l.heldError(ctx, name, nil)
		case <-ctx.Done():
			return l.heldError(ctx, name, ctx.Err())
		case <-l.done:
			return fmt.Errorf("etcd: acquire %q: %w", name, fence.ErrClosed)
		}
	}
}

// heldError is the error of an acquire that found name held: a *fence.HeldError with
// the holder's remaining time if it can be learnt quickly, joined with cause (the
// context's error) if the wait ended by the context.
func (l *Locker) heldError(ctx context.Context, name string, cause error) error {
	he := &fence.HeldError{Name: name}
	if cause == nil {
		if info, err := l.inspect(ctx, name); err == nil && info.Held {
			he.ExpiresIn = info.ExpiresIn
		}
		return fmt.Errorf("etcd: acquire %q: %w", name, he)
	}
	return fmt.Errorf("etcd: acquire %q: %w: %w", name, he, cause)
}

// check returns ErrClosed after Close and ErrInvalid for a bad name.
func (l *Locker) check(name string) error {
	if l.closed.Load() {
		return fence.ErrClosed
	}
	return fence.ValidateName(name)
}

func (l *Locker) checkLease(name, leaseID string) error {
	if err := l.check(name); err != nil {
		return err
	}
	return fence.ValidateLeaseID(leaseID)
}

// Renew extends the lease (name, leaseID) to ttl from now (see fence.Locker). etcd
// renews a lease to the TTL it was granted with, so when ttl is longer than that, or
// less than half of it, Renew moves the lock key to a new etcd lease of ttl (the key
// keeps its create revision, so the token is unchanged) and revokes the old one.
//
// It returns fence.ErrNotHeld if that lease expired, was released or never existed,
// fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd cannot be reached
// and fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, err)
	}
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID)).
		Then(clientv3.OpGet(lk)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 || kvs[0].Lease == 0 {
		return fmt.Errorf("etcd: renew %q: lock key has no etcd lease: %w", name, ErrCorrupt)
	}
	old := clientv3.LeaseID(kvs[0].Lease)
	ka, err := l.cli.KeepAliveOnce(ctx, old)
	if err != nil {
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	want := leaseSeconds(ttl)
	if ka.TTL >= want && ka.TTL <= 2*want+1 {
		return nil
	}
	// Move the key to a lease of the new TTL, if it is still ours on the old lease.
	g, err := l.cli.Grant(ctx, want)
	if err != nil {
		return fmt.Errorf("etcd: renew %q: grant: %w", name, storeErr(err))
	}
	resp, err = l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID), clientv3.Compare(clientv3.LeaseValue(lk), "=", old)).
		Then(clientv3.OpPut(lk, leaseID, clientv3.WithLease(g.ID))).
		Commit()
	if err != nil {
		l.revoke(g.ID)
		return fmt.Errorf("etcd: renew %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		l.revoke(g.ID)
		return fmt.Errorf("etcd: renew %q: %w", name, fence.ErrNotHeld)
	}
	l.revoke(old)
	return nil
}

// Release ends the lease (name, leaseID): it deletes the lock key if its value is
// still leaseID, which wakes the waiters' watches, then revokes the etcd lease. It
// returns fence.ErrNotHeld if the lease is no longer held (never touching a newer
// holder's key), fence.ErrInvalid for bad arguments, fence.ErrUnavailable if etcd
// cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := l.checkLease(name, leaseID); err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, err)
	}
	lk := l.keys.lock(name)
	resp, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", leaseID)).
		Then(clientv3.OpDelete(lk, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: release %q: %w", name, storeErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: release %q: %w", name, fence.ErrNotHeld)
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		l.revoke(clientv3.LeaseID(prev[0].Lease))
	}
	return nil
}

// Inspect returns the state of the lock name: Held and Token (the lock key's create
// revision) if it exists, LastToken (the revision of the last grant) and ExpiresIn
// (the etcd lease's remaining TTL, in whole seconds). A lock never acquired is
// reported not held with LastToken 0. It returns fence.ErrInvalid for a bad name,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := l.check(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("etcd: inspect %q: %w", name, err)
	}
	info, err := l.inspect(ctx, name)
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("etcd: inspect %q: %w", name, err)
	}
	return info, nil
}

// inspect reads the lock and token keys of name in one transaction, then the
// holder's etcd lease.
func (l *Locker) inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	resp, err := l.cli.Txn(ctx).Then(clientv3.OpGet(l.keys.lock(name)), clientv3.OpGet(l.keys.token(name))).Commit()
	if err != nil {
		return fence.LockInfo{}, storeErr(err)
	}
	info := fence.LockInfo{Name: name}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		info.LastToken = fence.Token(kvs[0].ModRevision)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		if err := l.fillHeld(ctx, &info, kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease)); err != nil {
			return fence.LockInfo{}, err
		}
	}
	return info, nil
}

// fillHeld sets the held fields of info for a lock key created at rev under lease.
func (l *Locker) fillHeld(ctx context.Context, info *fence.LockInfo, rev int64, lease clientv3.LeaseID) error {
	ttl, err := l.cli.TimeToLive(ctx, lease)
	if err != nil {
		if errors.Is(storeErr(err), fence.ErrNotHeld) {
			return nil // expired between the two reads
		}
		return storeErr(err)
	}
	if ttl.TTL <= 0 {
		return nil
	}
	info.Held = true
	info.Token = fence.Token(rev)
	info.ExpiresIn = time.Duration(ttl.TTL) * time.Second
	if info.LastToken < info.Token {
		info.LastToken = info.Token
	}
	return nil
}

// List returns the locks whose names start with prefix (every name acquired at least
// once, held or not) in name order, at most limit of them (DefaultListLimit if limit
// <= 0). It returns fence.ErrInvalid for a prefix that is not a valid name,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, fence.ErrClosed)
	}
	if prefix != "" {
		if err := fence.ValidateName(prefix); err != nil {
			return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
		}
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	tokPrefix := l.keys.token("")
	resp, err := l.cli.Get(ctx, tokPrefix+prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, storeErr(err))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	out := make([]fence.LockInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, fence.LockInfo{Name: string(kv.Key[len(tokPrefix):]), LastToken: fence.Token(kv.ModRevision)})
	}
	// The held ones among them, at the same revision.
	first, last := l.keys.lock(out[0].Name), l.keys.lock(out[len(out)-1].Name)
	locks, err := l.cli.Get(ctx, first, clientv3.WithRange(last+"\x00"), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, storeErr(err))
	}
	lockPrefix := l.keys.lock("")
	i := 0
	for _, kv := range locks.Kvs {
		name := string(kv.Key[len(lockPrefix):])
		for i < len(out) && out[i].Name < name {
			i++
		}
		if i == len(out) {
			break
		}
		if out[i].Name == name {
			if err := l.fillHeld(ctx, &out[i], kv.CreateRevision, clientv3.LeaseID(kv.Lease)); err != nil {
				return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
			}
		}
	}
	return out, nil
}
