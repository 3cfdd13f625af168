package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// A semaphore's or shared lock's live leases are its Holders (each with the slot,
// token, owner and time left of its holder key), and Limit and Shared say which, as
// driver.Info shapes them. This is etcd's view, which for a TTL below etcd's
// minimum lease TTL lasts longer than the holder's deadline (see the package
// documentation). A lock never acquired is reported not held with LastToken 0. It
// returns fence.ErrInvalid for a bad name, ErrCorrupt for an owner or holder key
// this package did not write, fence.ErrUnavailable if etcd cannot be reached and
// fence.ErrClosed after Close.
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

// inspect reads the lock, token, owner and holder keys of name in one
// transaction, then the holders' etcd leases.
func (l *Locker) inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	hFrom, hTo := l.keys.holders(name)
	resp, err := l.cli.Txn(ctx).
		Then(clientv3.OpGet(l.keys.lock(name)), clientv3.OpGet(l.keys.token(name)), clientv3.OpGet(l.keys.owner(name)),
			clientv3.OpGet(hFrom, clientv3.WithRange(hTo))).
		Commit()
	if err != nil {
		return fence.LockInfo{}, storeErr(err)
	}
	info := fence.LockInfo{Name: name}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		info.LastToken = fence.Token(kvs[0].ModRevision)
	}
	lock := only(resp.Responses[0].GetResponseRange().GetKvs())
	owner := only(resp.Responses[2].GetResponseRange().GetKvs())
	if err := l.fill(ctx, &info, lock, owner, resp.Responses[3].GetResponseRange().GetKvs()); err != nil {
		return fence.LockInfo{}, err
	}
	return info, nil
}

// fill sets the held fields of info from the name's lock key (nil: none) with its
// owner key (nil: none) and its holder keys.
func (l *Locker) fill(ctx context.Context, info *fence.LockInfo, lock, owner *mvccpb.KeyValue, holders []*mvccpb.KeyValue) error {
	if lock != nil {
		if err := l.fillHeld(ctx, info, lock, grantOwner(lock, owner)); err != nil {
			return err
		}
	}
	if len(holders) == 0 {
		return nil
	}
	var st nameState
	for _, kv := range holders {
		h, err := l.keys.parseHolder(info.Name, kv)
		if err != nil {
			return err
		}
		if _, who, rid, ok := splitHolderValue(string(kv.Value)); !ok || fence.ValidateOwner(who) != nil || rid != "" && fence.ValidateRequestID(rid) != nil {
			return fmt.Errorf("holder key %q: %w", kv.Key, ErrCorrupt)
		}
		st.holders = append(st.holders, h)
	}
	now := l.clock.Now()
	exp, err := l.expiries(ctx, now, holders)
	if err != nil {
		return err
	}
	hs, _ := st.holdings(exp)
	hi := driver.Info(info.Name, hs, info.LastToken, now)
	if !hi.Held {
		return nil // their etcd leases ended between the reads
	}
	// etcd's TTLs are whole seconds: expiries added a nanosecond.
	for i := range hi.Holders {
		hi.Holders[i].ExpiresIn = hi.Holders[i].ExpiresIn.Truncate(time.Second)
	}
	if !info.Held || hi.Token > info.Token {
		info.Token, info.Owner, info.ExpiresIn = hi.Token, hi.Owner, hi.ExpiresIn.Truncate(time.Second)
	}
	info.Held, info.Limit, info.Shared, info.Holders = true, hi.Limit, hi.Shared, hi.Holders
	info.LastToken = max(info.LastToken, hi.LastToken)
	return nil
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
		if fence.ValidateOwner(who) != nil {
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

// List returns the locks opts selects (see fence.Inspector), in name order, at
// most opts.Limit (fence.DefaultListLimit if <= 0), with the state Inspect
// reports: by default the held ones (a lock key or a holder key whose etcd lease
// is live), with opts.All every name acquired at least once. It reads the names'
// counters a page at a time, then their lock, owner and holder keys at the
// page's revision; a held-only listing reads pages until it has opts.Limit held
// locks or no names are left. It returns fence.ErrInvalid for a prefix that is
// not a valid name, ErrCorrupt for an owner key that holds no valid owner,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after
// Close.
func (l *Locker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	prefix := opts.Prefix
	if l.closed.Load() {
		return nil, fmt.Errorf("etcd: list %q: %w", prefix, fence.ErrClosed)
	}
	if prefix != "" {
		if err := fence.ValidateName(prefix); err != nil {
			return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
		}
	}
	limit := driver.ListLimit(opts.Limit)
	page := limit
	if !opts.All {
		page = max(limit, listPageMin) // free names may come first: read more at once
	}
	from := l.keys.token(prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	out := []fence.LockInfo{}
	for len(out) < limit {
		infos, more, err := l.listPage(ctx, from, end, page)
		if err != nil {
			return nil, fmt.Errorf("etcd: list %q: %w", prefix, err)
		}
		for _, info := range infos {
			if len(out) < limit && driver.Listed(info, opts) {
				out = append(out, info)
			}
		}
		if !more || len(infos) == 0 {
			break
		}
		from = l.keys.token(infos[len(infos)-1].Name) + "\x00"
	}
	return out, nil
}

// listPageMin is how many names a held-only List reads at once, at least (a
// variable for the test of paging).
var listPageMin = 256

// listPage returns the state of the names whose counter keys are in [from, end),
// at most n of them, in name order, as Inspect reports them; more says whether
// the range held more names than that.
func (l *Locker) listPage(ctx context.Context, from, end string, n int) (out []fence.LockInfo, more bool, err error) {
	tokPrefix := l.keys.token("")
	resp, err := l.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, false, storeErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	out = make([]fence.LockInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, fence.LockInfo{Name: string(kv.Key[len(tokPrefix):]), LastToken: fence.Token(kv.ModRevision)})
	}
	// The held ones among them, their owners and holders, at the same revision.
	first, last := out[0].Name, out[len(out)-1].Name
	at := clientv3.WithRev(resp.Header.Revision)
	_, lockEnd := l.keys.name(last)
	held, err := l.cli.Txn(ctx).Then(
		clientv3.OpGet(l.keys.lock(first), clientv3.WithRange(lockEnd), at),
		clientv3.OpGet(l.keys.owner(first), clientv3.WithRange(l.keys.owner(last)+"\x00"), at),
	).Commit()
	if err != nil {
		return nil, false, storeErr(err)
	}
	ownerPrefix := l.keys.owner("")
	owners := map[string]*mvccpb.KeyValue{}
	for _, kv := range held.Responses[1].GetResponseRange().GetKvs() {
		owners[string(kv.Key[len(ownerPrefix):])] = kv
	}
	// The lock key of a name, then its holder keys and waiter records, sort
	// together: "\x00" follows the name.
	lockPrefix := l.keys.lock("")
	kvs := held.Responses[0].GetResponseRange().GetKvs()
	i := 0
	for len(kvs) > 0 {
		name, _, _ := strings.Cut(string(kvs[0].Key[len(lockPrefix):]), "\x00")
		var lock *mvccpb.KeyValue
		var holders []*mvccpb.KeyValue
		hFrom, _ := l.keys.holders(name)
		for len(kvs) > 0 && strings.HasPrefix(string(kvs[0].Key), l.keys.lock(name)) {
			key := string(kvs[0].Key)
			if key == l.keys.lock(name) {
				lock = kvs[0]
			} else if strings.HasPrefix(key, hFrom) {
				holders = append(holders, kvs[0])
			} else if !strings.HasPrefix(key, l.keys.base(name)) {
				break // another name that starts with this one: "a" before "a/b"
			}
			kvs = kvs[1:]
		}
		for i < len(out) && out[i].Name < name {
			i++
		}
		if i == len(out) {
			break
		}
		if out[i].Name == name {
			if err := l.fill(ctx, &out[i], lock, owners[name], holders); err != nil {
				return nil, false, err
			}
		}
	}
	return out, resp.More, nil
}
