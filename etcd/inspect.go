package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Inspect returns the state of the lock name: Held, Token (the lock key's create
// revision) and Owner (the grant's owner key, "" if none) while the lock key and its
// etcd lease exist, LastToken (the revision of the last grant) and ExpiresIn (the
// etcd lease's remaining TTL, in whole seconds, truncated: 0 in its last second).
// This is etcd's view, which for a TTL below etcd's minimum lease TTL lasts longer
// than the holder's deadline (see the package documentation). A lock never acquired
// is reported not held with LastToken 0. It returns fence.ErrInvalid for a bad name,
// ErrCorrupt for an owner key that holds no valid owner, fence.ErrUnavailable if
// etcd cannot be reached and fence.ErrClosed after Close.
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

// inspect reads the lock, token and owner keys of name in one transaction, then the
// holder's etcd lease.
func (l *Locker) inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	resp, err := l.cli.Txn(ctx).
		Then(clientv3.OpGet(l.keys.lock(name)), clientv3.OpGet(l.keys.token(name)), clientv3.OpGet(l.keys.owner(name))).
		Commit()
	if err != nil {
		return fence.LockInfo{}, storeErr(err)
	}
	info := fence.LockInfo{Name: name}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		info.LastToken = fence.Token(kvs[0].ModRevision)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		owner := grantOwner(kvs[0], only(resp.Responses[2].GetResponseRange().GetKvs()))
		if err := l.fillHeld(ctx, &info, kvs[0], owner); err != nil {
			return fence.LockInfo{}, err
		}
	}
	return info, nil
}

// grantOwner returns owner, the owner key of lock's name (nil: none), if the grant
// holding the lock key lock wrote it, and nil otherwise. An owner key written before
// the lock key was created is an earlier grant's (an older version of this package,
// which does not know owner keys, released it and left the key to its etcd lease)
// and is ignored.
func grantOwner(lock, owner *mvccpb.KeyValue) *mvccpb.KeyValue {
	if owner == nil || owner.ModRevision < lock.CreateRevision {
		return nil
	}
	return owner
}

// only returns the one key of a single-key read, or nil if there is none.
func only(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) != 1 {
		return nil
	}
	return kvs[0]
}

// fillHeld sets the held fields of info for the lock key lock, and its owner from
// the owner key owner (nil: none). It returns ErrCorrupt for an owner key whose
// value is not a valid owner.
func (l *Locker) fillHeld(ctx context.Context, info *fence.LockInfo, lock, owner *mvccpb.KeyValue) error {
	var who string
	if owner != nil {
		who = string(owner.Value)
		if driver.ValidateOwner(who) != nil {
			return fmt.Errorf("owner key %q: %w", owner.Key, ErrCorrupt)
		}
	}
	rev, lease := lock.CreateRevision, clientv3.LeaseID(lock.Lease)
	if lease == 0 { // written by hand without a lease: held until deleted
		info.Held, info.Token, info.Owner = true, fence.Token(rev), who
		info.LastToken = max(info.LastToken, info.Token)
		return nil
	}
	ttl, err := l.cli.TimeToLive(ctx, lease)
	if err != nil {
		if errors.Is(storeErr(err), fence.ErrNotHeld) {
			return nil // expired between the two reads
		}
		return storeErr(err)
	}
	if ttl.TTL < 0 {
		return nil // the etcd lease is gone, and the key with it
	}
	// The etcd lease exists, so etcd keeps the key and nobody else is granted the
	// lock: held. TTL is whole seconds, truncated; 0 means under a second left, or
	// expired and waiting for etcd's revocation (checked every 500ms), and is
	// reported as ExpiresIn 0 (unknown).
	info.Held = true
	info.Token = fence.Token(rev)
	info.Owner = who
	info.ExpiresIn = time.Duration(ttl.TTL) * time.Second
	if info.LastToken < info.Token {
		info.LastToken = info.Token
	}
	return nil
}

// List returns the locks whose names start with prefix (every name acquired at least
// once, held or not) in name order, at most limit of them (fence.DefaultListLimit if
// limit <= 0), with the state Inspect reports. It returns fence.ErrInvalid for a
// prefix that is not a valid name, ErrCorrupt for an owner key that holds no valid
// owner, fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after
// Close.
func (l *Locker) List(ctx context.Context, prefix string, limit int) ([]fence.LockInfo, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, fence.ErrClosed)
	}
	if prefix != "" {
		if err := driver.ValidateName(prefix); err != nil {
			return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
		}
	}
	limit = driver.ListLimit(limit)
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
	// The held ones among them and their owners, at the same revision.
	first, last := out[0].Name, out[len(out)-1].Name
	at := clientv3.WithRev(resp.Header.Revision)
	held, err := l.cli.Txn(ctx).Then(
		clientv3.OpGet(l.keys.lock(first), clientv3.WithRange(l.keys.lock(last)+"\x00"), at),
		clientv3.OpGet(l.keys.owner(first), clientv3.WithRange(l.keys.owner(last)+"\x00"), at),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, storeErr(err))
	}
	ownerPrefix := l.keys.owner("")
	owners := map[string]*mvccpb.KeyValue{}
	for _, kv := range held.Responses[1].GetResponseRange().GetKvs() {
		owners[string(kv.Key[len(ownerPrefix):])] = kv
	}
	lockPrefix := l.keys.lock("")
	i := 0
	for _, kv := range held.Responses[0].GetResponseRange().GetKvs() {
		name := string(kv.Key[len(lockPrefix):])
		for i < len(out) && out[i].Name < name {
			i++
		}
		if i == len(out) {
			break
		}
		if out[i].Name == name {
			if err := l.fillHeld(ctx, &out[i], kv, grantOwner(kv, owners[name])); err != nil {
				return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
			}
		}
	}
	return out, nil
}
