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

// Request ids (fence.WithRequestID). A grant made under a request id keeps it, so
// that a retry of the acquire (its first answer lost) finds the grant and returns
// it instead of granting again:
//
//	token/NAME                      a lock's request id is the token key's value,
//	                                which every grant writes ("" without one)
//	lock/NAME\x00h<KIND>\x00<SLOT>  a semaphore or shared lease: the value is
//	                                lease id \x00 owner [\x00 request id]
//
// The token key's request id belongs to the lock key only if it was written in
// the lock key's grant (its mod revision is the lock key's create revision): one
// left by an earlier grant is stale and never matches. Riding on a write every
// grant makes anyway, it costs a lock no write of its own, at grant or release.
// Holder values written without a request id (by earlier versions, or by acquires
// without one) have two fields.
//
// A retry that finds a grant claims it (see driver.UnclaimedReleaser) before it
// renews it, so that the attempt that lost its answer ends it only while nobody
// has:
//
//	claim/NAME\x00ID               ID is the random part of the grant's lease id
//	                                (the try's id); the value is "c" once a retry
//	                                claimed the grant, "d" once its attempt dropped
//	                                it. It is put under the grant's etcd lease, so
//	                                it goes with it, and Release deletes it.
//
// Each side puts the key only if it does not exist, in one transaction: the
// claim and the drop are serialized by etcd, and only the first takes effect.
// An attempt that drops a grant then revokes its etcd lease; if that fails the
// grant expires, and a retry finds it dropped (no grant: it grants afresh).

// splitHolderValue returns the lease id, the owner and the request id ("" if
// none) of a holder key's value, and false if it is not one this package wrote.
func splitHolderValue(v string) (leaseID, owner, requestID string, ok bool) {
	leaseID, rest, ok := strings.Cut(v, "\x00")
	if !ok {
		return "", "", "", false
	}
	owner, requestID, _ = strings.Cut(rest, "\x00")
	return leaseID, owner, requestID, true
}

// tokenValue is what a grant of r writes to the name's token key: a lock's
// request id, else "".
func tokenValue(r *driver.Request) string {
	if kindOf(r.Options) != "" {
		return ""
	}
	return r.Options.RequestID
}

// lockRequest adds to a lock's grant transaction the read of the name's token
// key (last in els), which holds the request id of the grant that wrote it, if
// r has a request id.
func (l *Locker) lockRequest(r *driver.Request, els []clientv3.Op) []clientv3.Op {
	if r.Options.RequestID == "" {
		return els
	}
	return append(els, clientv3.OpGet(l.keys.token(r.Name)))
}

// takeRequest removes from the reads of a failed lock grant transaction the read
// of the token key that lockRequest added, and returns the key (nil: none).
func takeRequest(r *driver.Request, resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	if r.Options.RequestID == "" || kindOf(r.Options) != "" || len(resp.Responses) == 0 {
		return nil
	}
	last := len(resp.Responses) - 1
	kv := only(resp.Responses[last].GetResponseRange().GetKvs())
	resp.Responses = resp.Responses[:last]
	return kv
}

// retried returns the grant of st that an earlier attempt of r made under r's
// request id, claimed (see claim) and renewed to r.TTL from now (so that the
// holder's deadline, counted from the renewal's start, is never later than
// etcd's expiry), and true; or false if st has none. reqKV is the name's token key as read with st (nil:
// none). A grant that ends before its claim or renewal is no longer there to
// return: the caller looks again (Result.Again). One that its attempt dropped
// (claim) is not returned: it is about to end, or it expires.
func (l *Locker) retried(ctx context.Context, r *driver.Request, st nameState, reqKV *mvccpb.KeyValue) (driver.Result, bool, error) {
	id := r.Options.RequestID
	if id == "" {
		return driver.Result{}, false, nil
	}
	var res driver.Result
	var kv *mvccpb.KeyValue // the grant's key
	switch {
	case kindOf(r.Options) == "":
		if st.lock == nil || reqKV == nil || string(reqKV.Value) != id || reqKV.ModRevision != st.lock.CreateRevision {
			return driver.Result{}, false, nil
		}
		res, kv = driver.Result{Token: fence.Token(st.lock.CreateRevision), ID: string(st.lock.Value)}, st.lock
	default:
		for _, h := range st.holders {
			leaseID, _, rid, ok := splitHolderValue(string(h.kv.Value))
			if ok && rid == id && h.limit == r.Options.Limit && h.shared == r.Options.Shared {
				res, kv = driver.Result{Token: fence.Token(h.kv.CreateRevision), ID: leaseID}, h.kv
				if h.limit > 0 {
					res.Slot = h.slot
				}
				break
			}
		}
		if kv == nil {
			return driver.Result{}, false, nil
		}
	}
	switch claim, err := l.claim(ctx, r.Name, res.ID, kv); {
	case err != nil:
		return driver.Result{}, true, err
	case claim == claimGone:
		return driver.Result{Again: true}, true, nil
	case claim == claimDropped: // its attempt ended it: not a grant to return
		return driver.Result{}, false, nil
	}
	res.Start = l.clock.Now()
	if err := l.Renew(ctx, r.Name, res.ID, r.TTL); err != nil {
		if errors.Is(err, fence.ErrNotHeld) {
			return driver.Result{Again: true}, true, nil
		}
		return driver.Result{}, true, err
	}
	return res, true, nil
}

// holderRetried looks, before a semaphore or shared grant of r under a request
// id, for the holder key an earlier attempt of r made, and returns its grant
// (see retried) with true. A semaphore with a free permit or a shared lock
// grants without reading its holders, so the look is a read of its own; the
// grant that follows then depends on no holder key having changed after that
// read (since, the read's revision), so an earlier attempt still in flight that
// commits meanwhile fails the grant, and the grant transaction's reads find
// it. Every attempt makes that look, so one that commits only after this grant
// fails too: this grant's holder key changed after its look
// (TestLocker_RequestID_LateFirstAttemptGrantsNothing). For a lock, or without a
// request id, it returns since 0 and false: a lock's grant fails while any lease
// holds the name, its own included.
func (l *Locker) holderRetried(ctx context.Context, r *driver.Request, kind string, c *acquireCall) (since int64, res driver.Result, ok bool, err error) {
	if kind == "" || r.Options.RequestID == "" {
		return 0, driver.Result{}, false, nil
	}
	hFrom, hTo := l.keys.holders(r.Name)
	// Serializable: no round trip to the leader. A stale read is safe, as the
	// grant compares against its revision: a holder it missed fails the grant.
	resp, err := l.cli.Get(ctx, hFrom, clientv3.WithRange(hTo), clientv3.WithSerializable())
	if err != nil {
		return 0, driver.Result{}, false, storeErr(err)
	}
	var st nameState
	for _, kv := range resp.Kvs {
		h, err := l.keys.parseHolder(r.Name, kv)
		if err != nil {
			return 0, driver.Result{}, false, err
		}
		st.holders = append(st.holders, h)
	}
	res, ok, err = l.retried(ctx, r, st, nil)
	if ok && err == nil && res.Again {
		// The grant ended as it was claimed: grant as usual, if nothing else
		// changed since the read.
		ok = false
	}
	if ok || err != nil {
		c.retried = ok && err == nil && res.Token != 0
		return 0, res, ok, err
	}
	return max(resp.Header.Revision, 1), driver.Result{}, false, nil
}

var _ driver.RetryFinder = (*Locker)(nil)

// FindRetried returns the live grant of name made under the request id of opts,
// renewed to ttl from now, and true, or false if there is none (see
// driver.RetryFinder). It reads the name's lock key, token key and holder keys
// in one transaction and grants nothing. It returns fence.ErrInvalid for a bad
// name, TTL or request id, ErrCorrupt for a holder key this package did not
// write, fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after
// Close.
func (l *Locker) FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, bool, error) {
	r := driver.RetryRequest(name, ttl, opts)
	if err := l.check(name); err != nil {
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	if r.Options.RequestID == "" {
		return driver.Grant{}, false, nil
	}
	if err := fence.ValidateRequestID(r.Options.RequestID); err != nil {
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	hFrom, hTo := l.keys.holders(name)
	resp, err := l.cli.Txn(ctx).Then(
		clientv3.OpGet(l.keys.lock(name)),
		clientv3.OpGet(hFrom, clientv3.WithRange(hTo)),
		clientv3.OpGet(l.keys.token(name)),
	).Commit()
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, storeErr(err))
	}
	reqKV := only(resp.Responses[2].GetResponseRange().GetKvs())
	resp.Responses = resp.Responses[:2]
	st, err := l.parseState(name, resp, txnLayout{waiters: -1, beats: -1, queue: -1})
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, err)
	}
	res, ok, err := l.retried(ctx, r, st, reqKV)
	switch {
	case err != nil:
		return driver.Grant{}, false, fmt.Errorf("etcd: acquire %q: %w", name, err)
	case !ok || res.Token == 0: // none, or it ended as it was renewed
		return driver.Grant{}, false, nil
	}
	return driver.Grant{Token: res.Token, ID: res.ID, Start: res.Start, Slot: res.Slot}, true, nil
}

// claimKey returns the claim record of the grant of name whose lease id is
// leaseID (see above): keyed by the id's random part, which the try that made
// the grant knows before it learns its slot.
func (k keys) claimKey(name, leaseID string) string {
	id, _, _ := strings.Cut(leaseID, ".")
	return k.prefix + "claim/" + name + "\x00" + id
}

// moveClaim returns the operation that puts the claim record of the grant of
// name whose lease id is leaseID, if there is one, under the etcd lease to (a
// Renew that moves the grant's keys runs it in the same transaction), keeping
// its value; it does nothing if there is none. (A value compare fails on a key
// that does not exist.)
func (k keys) moveClaim(name, leaseID string, to clientv3.LeaseID) clientv3.Op {
	key := k.claimKey(name, leaseID)
	keep := func(v string, els ...clientv3.Op) clientv3.Op {
		return clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", v)},
			[]clientv3.Op{clientv3.OpPut(key, v, clientv3.WithLease(to))},
			els)
	}
	return keep(claimedValue, keep(droppedValue))
}

// The claim record's values.
const (
	claimedValue = "c" // a retry returned the grant
	droppedValue = "d" // the attempt that made it ended it
)

// The outcomes of a claim.
const (
	claimHeld    = iota // claimed, now or by an earlier retry
	claimGone           // the grant ended
	claimDropped        // the attempt that made it dropped it first
)

// claim records, in one transaction, that a retry returns the grant of name
// whose lease id is leaseID and whose key is kv as read: it puts the claim record
// under the grant's etcd lease if there is none and the key is still kv's
// grant. It returns claimHeld if the grant is claimed, now or before; claimGone
// if the grant ended; claimDropped if its attempt dropped it first; and
// fence.ErrUnavailable if etcd cannot be reached, fence.ErrClosed after Close.
//
// The record is put under the etcd lease the grant's key is on when the
// transaction applies (it compares it): a Renew that moved the key to another
// etcd lease in between is seen, and the claim is tried again on the new one, at
// most claimTries times (then claimGone: the caller looks again).
func (l *Locker) claim(ctx context.Context, name, leaseID string, kv *mvccpb.KeyValue) (int, error) {
	key := l.keys.claimKey(name, leaseID)
	for range claimTries {
		resp, err := l.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(string(kv.Key)), "=", clientv3.LeaseID(kv.Lease)),
		).Then(
			clientv3.OpPut(key, claimedValue, clientv3.WithLease(clientv3.LeaseID(kv.Lease))),
		).Else(
			clientv3.OpGet(key),
			clientv3.OpGet(string(kv.Key)),
		).Commit()
		switch err = storeErr(err); {
		case errors.Is(err, fence.ErrNotHeld): // its etcd lease expired
			return claimGone, nil
		case err != nil:
			return 0, err
		case resp.Succeeded:
			return claimHeld, nil
		}
		rec := only(resp.Responses[0].GetResponseRange().GetKvs())
		grant := only(resp.Responses[1].GetResponseRange().GetKvs())
		switch {
		case rec != nil && string(rec.Value) != claimedValue:
			return claimDropped, nil
		case grant == nil || grant.CreateRevision != kv.CreateRevision:
			return claimGone, nil
		case rec != nil: // claimed by an earlier retry
			return claimHeld, nil
		}
		kv = grant // moved to another etcd lease by a Renew: claim it there
	}
	return claimGone, nil
}

// claimTries bounds claim's tries against Renews that keep moving the grant.
const claimTries = 3

// drop ends the grant that the try of r under the etcd lease el may have made,
// if no retry claimed it: one transaction puts the claim record dropped if
// there is none, and then el is revoked, which deletes every key under it. It
// reports whether it dropped the grant (or what el held); false if a retry
// claimed it first, or etcd could not be reached: then el expires.
func (l *Locker) drop(r *driver.Request, el clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	key := l.keys.claimKey(r.Name, r.ID)
	resp, err := l.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, droppedValue, clientv3.WithLease(el)),
	).Commit()
	if err != nil || !resp.Succeeded {
		return false
	}
	l.revoke(el)
	return true
}

var _ driver.UnclaimedReleaser = (*Locker)(nil)

// ReleaseUnclaimed releases the lease leaseID of name, as Release does, if no
// retry of its acquire claimed it (Acquire or FindRetried returned it): one
// transaction compares the lease's key (and its request id: a lock's token key,
// or a holder key's value as read just before) and the absence of its claim
// record, and deletes the key. It returns true if it released the lease; false
// if a retry claimed it, it is no longer held, or it was granted under another
// request id. Errors: fence.ErrInvalid for bad
// arguments, fence.ErrUnavailable if etcd cannot be reached (the lease may or
// may not have been released), fence.ErrClosed after Close.
func (l *Locker) ReleaseUnclaimed(ctx context.Context, name, leaseID, requestID string) (bool, error) {
	if err := l.checkLease(name, leaseID); err != nil {
		return false, fmt.Errorf("etcd: release %q: %w", name, err)
	}
	if err := fence.ValidateRequestID(requestID); err != nil {
		return false, fmt.Errorf("etcd: release %q: %w", name, err)
	}
	key, holder := l.keys.leaseKey(name, leaseID)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(l.keys.claimKey(name, leaseID)), "=", 0)}
	del := []clientv3.Op{clientv3.OpDelete(key, clientv3.WithPrevKV()), clientv3.OpDelete(l.keys.beat(key))}
	if holder {
		// The holder key's value holds the request id after the owner: read it,
		// and release only that value.
		resp, err := l.cli.Get(ctx, key)
		if err != nil {
			return false, fmt.Errorf("etcd: release %q: %w", name, storeErr(err))
		}
		kv := only(resp.Kvs)
		if kv == nil {
			return false, nil
		}
		if id, _, rid, ok := splitHolderValue(string(kv.Value)); !ok || id != leaseID || rid != requestID {
			return false, nil
		}
		cmps = append(cmps, clientv3.Compare(clientv3.Value(key), "=", string(kv.Value)))
	} else {
		cmps = append(cmps, heldBy(key, leaseID, false)...)
		cmps = append(cmps, clientv3.Compare(clientv3.Value(l.keys.token(name)), "=", requestID))
		del = append(del, clientv3.OpDelete(l.keys.owner(name)))
	}
	switch err := l.end(ctx, cmps, del, true); {
	case errors.Is(err, fence.ErrNotHeld):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("etcd: release %q: %w", name, err)
	}
	return true, nil
}
