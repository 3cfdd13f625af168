package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// The keys of semaphores and shared locks (see docs/etcd.md). A lock
// name has no control character, so every key that starts with the lock key and
// "\x00" belongs to that name alone, and [lock key, lock key+"\x01") is the name's
// whole state but its token and owner keys:
//
//	lock/NAME                      an exclusive lease (value: lease id)
//	lock/NAME\x00h<KIND>\x00<SLOT>  a semaphore or shared lease (value: lease id \x00 owner)
//	lock/NAME\x00w<ID>             an exclusive acquire waiting for shared holders
//
// KIND is the semaphore's limit in four digits, or "sh" for a shared lease; SLOT
// is four digits. Shared leases take slots too (reported as 0), so that at most
// fence.MaxLimit of them are live, by construction.

// sharedKind is the KIND of shared leases; semaphore KINDs are digits, which sort
// before it.
const sharedKind = "sh"

// maxAttempts bounds the transactions of one try: a try whose transaction failed
// only because the slot it guessed was taken tries the slot that the failed
// transaction's reads show free.
const maxAttempts = 3

func (k keys) base(name string) string { return k.lock(name) + "\x00" }

// name returns the range of all of name's keys under lock/: the lock key, its
// holder keys and its waiter records.
func (k keys) name(name string) (string, string) { return k.lock(name), k.lock(name) + "\x01" }

// holders returns the range of name's holder keys; kinds, the range of the holder
// keys of one KIND.
func (k keys) holders(name string) (string, string) { return k.base(name) + "h", k.base(name) + "i" }
func (k keys) kinds(name, kind string) (string, string) {
	return k.base(name) + "h" + kind + "\x00", k.base(name) + "h" + kind + "\x01"
}
func (k keys) waiters(name string) (string, string) { return k.base(name) + "w", k.base(name) + "x" }
func (k keys) waiter(name, id string) string        { return k.base(name) + "w" + id }
func (k keys) holder(name, kind string, slot int) string {
	return fmt.Sprintf("%sh%s\x00%04d", k.base(name), kind, slot)
}

// kindOf returns the KIND of an acquire's holder key: "" for a lock.
func kindOf(o driver.AcquireOptions) string {
	switch {
	case o.Limit > 0:
		return fmt.Sprintf("%04d", o.Limit)
	case o.Shared:
		return sharedKind
	}
	return ""
}

// holderID is the lease id of a grant of kind in slot: the try's random id, then
// the limit (or "r" for shared) and the slot, so that Renew and Release find the
// key from the id alone. The random part is what makes it a credential (P5).
func holderID(id, kind string, slot int) string {
	if kind == sharedKind {
		return fmt.Sprintf("%s.r.%d", id, slot)
	}
	n, _ := strconv.Atoi(kind)
	return fmt.Sprintf("%s.%d.%d", id, n, slot)
}

// leaseKey returns the key that the lease leaseID of name holds, and whether it
// is a holder key (else the lock key): ids that holderID did not make are locks'.
func (k keys) leaseKey(name, leaseID string) (string, bool) {
	j := strings.LastIndexByte(leaseID, '.')
	i := strings.LastIndexByte(leaseID[:max(j, 0)], '.')
	if i <= 0 {
		return k.lock(name), false
	}
	kindTok, slotTok := leaseID[i+1:j], leaseID[j+1:]
	kind, slots := sharedKind, fence.MaxLimit
	if kindTok != "r" {
		n, err := strconv.Atoi(kindTok)
		if err != nil || n < 2 || n > fence.MaxLimit || strconv.Itoa(n) != kindTok {
			return k.lock(name), false
		}
		kind, slots = fmt.Sprintf("%04d", n), n
	}
	slot, err := strconv.Atoi(slotTok)
	if err != nil || slot < 0 || slot >= slots || strconv.Itoa(slot) != slotTok {
		return k.lock(name), false
	}
	return k.holder(name, kind, slot), true
}

// lowestSlot returns the lowest slot of the holder keys of name's semaphore of
// kind among deleted, and -1 if there is none.
func (k keys) lowestSlot(name, kind string, deleted []string) int {
	low := -1
	from, _ := k.kinds(name, kind)
	for _, key := range deleted {
		rest, ok := strings.CutPrefix(key, from)
		slot, err := strconv.Atoi(rest)
		if kind != "" && kind != sharedKind && ok && err == nil && (low < 0 || slot < low) {
			low = slot
		}
	}
	return low
}

// holderValue is what a holder key holds: the lease id, the owner and, if
// not empty, the request id (see request.go).
func holderValue(leaseID, owner, requestID string) string {
	if requestID == "" {
		return leaseID + "\x00" + owner
	}
	return leaseID + "\x00" + owner + "\x00" + requestID
}

// heldBy returns the compares that hold while key is held by the lease leaseID:
// the lock key's value is the id; a holder key's value starts with the id and
// "\x00" (ids are printable ASCII, so no other id's value falls in that range).
func heldBy(key, leaseID string, holder bool) []clientv3.Cmp {
	if !holder {
		return []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", leaseID)}
	}
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(key), ">", leaseID),
		clientv3.Compare(clientv3.Value(key), "<", leaseID+"\x01"),
	}
}

// none is the compare that holds while no key exists in [from, to).
func none(from, to string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(from), "=", 0).WithRange(to)
}

// parsedHolder is a holder key as read.
type parsedHolder struct {
	kv     *mvccpb.KeyValue
	limit  int  // 0 for shared
	shared bool // a shared lease
	slot   int  // its slot (also for a shared lease)
}

// parseHolder decodes a holder key of name; ErrCorrupt if this package did not
// write it.
func (k keys) parseHolder(name string, kv *mvccpb.KeyValue) (parsedHolder, error) {
	from, _ := k.holders(name)
	rest, ok := strings.CutPrefix(string(kv.Key), from)
	kindTok, slotTok, ok2 := strings.Cut(rest, "\x00")
	h := parsedHolder{kv: kv}
	slot, err := strconv.Atoi(slotTok)
	// Four digits each, as holder writes them (Atoi alone takes "+001").
	bad := !ok || !ok2 || err != nil || fmt.Sprintf("%04d", slot) != slotTok
	switch {
	case bad:
	case kindTok == sharedKind:
		h.shared, bad = true, slot >= fence.MaxLimit
	default:
		h.limit, err = strconv.Atoi(kindTok)
		bad = err != nil || fmt.Sprintf("%04d", h.limit) != kindTok || h.limit < 2 || h.limit > fence.MaxLimit || slot >= h.limit
	}
	if bad {
		return parsedHolder{}, fmt.Errorf("holder key %q: %w", kv.Key, ErrCorrupt)
	}
	h.slot = slot
	return h, nil
}

// nameState is what a failed grant read of a name: its lock key (nil: none), its
// holder keys and its waiter records (for a shared acquire only).
type nameState struct {
	lock    *mvccpb.KeyValue
	holders []parsedHolder
	waiters []*mvccpb.KeyValue
}

// freeSharedSlot returns a random slot that no shared holder key of st has (there
// is one: driver.Decide granted, so fewer than fence.MaxLimit are live).
func (st nameState) freeSharedSlot() int {
	used := make([]bool, fence.MaxLimit)
	for _, h := range st.holders {
		if h.shared {
			used[h.slot] = true
		}
	}
	var free []int
	for i, u := range used {
		if !u {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return 0
	}
	return free[rand.IntN(len(free))]
}

// holdings returns st's live leases as driver.Decide and driver.Info take them,
// and the end of the latest waiter record (zero if none), each with the expiry
// that expires gives its key (false: the key's lease is gone, so is the key).
func (st nameState) holdings(expires func(*mvccpb.KeyValue) (time.Time, bool)) ([]driver.Holding, time.Time) {
	var hs []driver.Holding
	if st.lock != nil {
		if at, ok := expires(st.lock); ok {
			hs = append(hs, driver.Holding{Token: fence.Token(st.lock.CreateRevision), Expires: at})
		}
	}
	for _, h := range st.holders {
		at, ok := expires(h.kv)
		if !ok {
			continue
		}
		d := driver.Holding{Token: fence.Token(h.kv.CreateRevision), Limit: h.limit, Shared: h.shared, Expires: at}
		if !h.shared {
			d.Slot = h.slot
		}
		if _, owner, _, ok := splitHolderValue(string(h.kv.Value)); ok {
			d.Owner = owner
		}
		hs = append(hs, d)
	}
	var until time.Time
	for _, w := range st.waiters {
		if at, ok := expires(w); ok && at.After(until) {
			until = at
		}
	}
	return hs, until
}

// ttlConcurrency bounds the TimeToLive requests a read of many holders has in flight.
const ttlConcurrency = 8

// expiries returns, for the etcd lease of each key of kvs, when it expires as of
// now by etcd's whole seconds (plus a nanosecond, so that a lease in its last
// second counts as live, which it is at etcd), as holdings takes it: a key without
// a lease is live until deleted. A lease gone meanwhile is left out.
func (l *Locker) expiries(ctx context.Context, now time.Time, kvs []*mvccpb.KeyValue) (func(*mvccpb.KeyValue) (time.Time, bool), error) {
	ttls := map[int64]int64{} // TTL by lease; -1: gone (also if not in the map)
	var ids []int64
	for _, kv := range kvs {
		if _, ok := ttls[kv.Lease]; kv.Lease != 0 && !ok {
			ttls[kv.Lease] = -1
			ids = append(ids, kv.Lease)
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, ttlConcurrency)
	)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := l.cli.TimeToLive(ctx, clientv3.LeaseID(id))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ttls[id] = resp.TTL
			case !errors.Is(storeErr(err), fence.ErrNotHeld) && firstErr == nil:
				firstErr = storeErr(err)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return func(kv *mvccpb.KeyValue) (time.Time, bool) {
		if kv.Lease == 0 {
			return now.Add(time.Nanosecond), true
		}
		ttl, ok := ttls[kv.Lease]
		if !ok {
			ttl = -1
		}
		return now.Add(time.Duration(ttl)*time.Second + time.Nanosecond), ttl >= 0
	}, nil
}

// acquireCall is what the tries of one Acquire call keep.
type acquireCall struct {
	waiter string // the key of this call's exclusive-waiter record
	marked bool   // an exclusive try that waits failed: the record may exist
	hint   int    // the semaphore slot to try first; -1: none
	// retried says the try's grant is an earlier one of the same request id
	// (see request.go), which holds its own etcd lease, not the call's.
	retried bool

	queued    int64                     // FIFO: the create revision of waiter, its place; 0: none
	wl        clientv3.LeaseID          // FIFO: the waiter lease that holds waiter; 0: none yet
	stopKA    context.CancelFunc        // FIFO: ends the keep-alives of wl
	kaAt      atomic.Pointer[time.Time] // FIFO: when the last answered keep-alive of wl was sent
	kaLost    atomic.Bool               // FIFO: keepWaiting gave up keeping wl alive
	ahead     map[string]bool           // FIFO: the waiter keys ahead of waiter at the last try
	due       time.Time                 // when the last try that found the name held asked to try again
	expiresIn time.Duration             // what that try reported of the holders' time left
	beats     beatLog                   // FastExpiry: the holders' beats this call saw
}

// try makes one try of r under etcd lease el: one transaction that grants if the
// name's keys allow it, and otherwise reads them (and, for an exclusive acquire
// that waits behind shared holders, records it waiting, under el). A failed
// transaction whose reads show a grant possible (a semaphore slot other than the
// one guessed) is followed by another, at most maxAttempts in all. It returns the
// grant's Result (Token, Slot, ID), or a held Result with the holders' time left
// if last, or a *fence.LimitError from driver.Decide.
func (l *Locker) try(ctx context.Context, r *driver.Request, el clientv3.LeaseID, c *acquireCall, last bool) (driver.Result, error) {
	kind := kindOf(r.Options)
	slot := 0
	switch {
	case kind == sharedKind:
		slot = rand.IntN(fence.MaxLimit) // any free slot will do: few collisions
	case r.Options.Limit > 0 && c.hint >= 0 && c.hint < r.Options.Limit:
		slot = c.hint
	}
	c.hint = -1
	since, res, ok, err := l.holderRetried(ctx, r, kind, c)
	if ok || err != nil {
		return res, err
	}
	for attempt := 1; ; attempt++ {
		resp, lay, err := l.grantTxn(ctx, r, el, c, kind, slot, since)
		replied := l.clock.Now()
		if err != nil {
			// The key may or may not have been created; if it was, it is under el
			// and the caller's revocation of el deletes it.
			return driver.Result{}, storeErr(err)
		}
		if resp.Succeeded {
			// The transaction's revision is the create revision of the key.
			tok := fence.Token(resp.Header.Revision)
			if resp.Header.Revision <= 0 || tok > fence.MaxToken {
				return driver.Result{}, fmt.Errorf("revision %d: %w", resp.Header.Revision, fence.ErrTokenExhausted)
			}
			res := driver.Result{Token: tok}
			if kind != "" {
				res.ID = holderID(r.ID, kind, slot)
			}
			if r.Options.Limit > 0 {
				res.Slot = slot
			}
			return res, nil
		}
		if kind == "" && r.Waiting {
			c.marked = true
		}
		reqKV := takeRequest(r, resp)
		st, err := l.parseState(r.Name, resp, lay)
		if err != nil {
			return driver.Result{}, err
		}
		if res, ok, err := l.retried(ctx, r, st, reqKV); ok || err != nil {
			if err == nil && res.Again && attempt < maxAttempts {
				continue // the grant ended as it was claimed: the name may be free
			}
			c.retried = ok && err == nil && res.Token != 0
			return res, err
		}
		if since > 0 {
			since = resp.Header.Revision
		}
		var silentFor time.Duration // FastExpiry: until a holder's silence may be over
		if l.fast && r.Waiting {
			silent, next := c.beats.judge(resp.Responses[lay.beats].GetResponseRange().GetKvs(), replied)
			ended, err := l.expire(ctx, r.Name, silent)
			if err != nil {
				return driver.Result{}, err
			}
			if ended && attempt < maxAttempts {
				continue
			}
			silentFor = next
		}
		turn := true // FIFO: no waiter is ahead of this call
		if l.fifo {
			turn = c.turn(resp.Responses[lay.queue].GetResponseRange().GetKvs())
			if err := l.holdPlace(ctx, c); err != nil {
				return driver.Result{}, err
			}
		}
		now := l.clock.Now()
		far := func(*mvccpb.KeyValue) (time.Time, bool) { return now.Add(time.Hour), true }
		hs, until := st.holdings(far)
		d, err := driver.Decide(r, hs, now, until)
		if err != nil {
			return driver.Result{}, err
		}
		if d.Grant && turn {
			if attempt < maxAttempts {
				slot = d.Slot
				if kind == sharedKind {
					slot = st.freeSharedSlot()
				}
				continue
			}
			// Others keep taking what this try saw free: look again at once.
			return driver.Result{Again: true}, nil
		}
		res := driver.Result{Retry: fallbackPoll}
		if d.MarkWaiter {
			// The record lives while el does, which each try refreshes: try
			// again before it lapses (el lasts at least WaiterFor(r)).
			res.Retry = min(fallbackPoll, d.Retry)
		}
		if silentFor > 0 {
			res.Retry = min(res.Retry, silentFor)
		}
		if last {
			res.ExpiresIn = l.heldFor(ctx, r, st)
		}
		c.due, c.expiresIn = now.Add(res.Retry), res.ExpiresIn
		return res, nil
	}
}

// heldFor returns how long the name stays held for r as driver.Decide tells it
// from the etcd leases' time left, or 0 if that is not known: best effort, for the
// *fence.HeldError of a call's last try.
func (l *Locker) heldFor(ctx context.Context, r *driver.Request, st nameState) time.Duration {
	kvs := append([]*mvccpb.KeyValue{}, st.waiters...)
	if st.lock != nil {
		kvs = append(kvs, st.lock)
	}
	for _, h := range st.holders {
		kvs = append(kvs, h.kv)
	}
	now := l.clock.Now()
	exp, err := l.expiries(ctx, now, kvs)
	if err != nil {
		return 0
	}
	hs, until := st.holdings(exp)
	d, err := driver.Decide(r, hs, now, until)
	if err != nil || d.Grant {
		return 0
	}
	return d.ExpiresIn.Truncate(time.Second)
}

// txnLayout says where a failed grant transaction's optional reads are among its
// responses; -1: not read.
type txnLayout struct {
	waiters int // the waiter records, for a shared acquire without FIFO
	beats   int // the beat keys (FastExpiry)
	queue   int // the waiter keys (FIFO)
}

// grantTxn sends the one transaction of an attempt: If the name's keys allow a
// grant of kind in slot, Then the grant's writes (the token key, and the lock key
// and owner key or the holder key, under el), Else reads of the lock key, the
// holder keys, and for a shared acquire the waiter records or,
// for an exclusive acquire that waits, the recording of its waiter record when
// only shared leases hold the name. FastExpiry adds the beat's write and a read of
// the beats; FIFO the queue's compares and operations (see queueOps); a request
// id, for a lock, the token key's read, last (see takeRequest); the token key's
// write carries a lock's request id.
//
// A positive since (see holderRetried) makes the grant also depend on no holder
// key of the name having changed after revision since.
func (l *Locker) grantTxn(ctx context.Context, r *driver.Request, el clientv3.LeaseID, c *acquireCall, kind string, slot int, since int64) (*clientv3.TxnResponse, txnLayout, error) {
	lay := txnLayout{waiters: -1, beats: -1, queue: -1}
	name := r.Name
	lk := l.keys.lock(name)
	hFrom, hTo := l.keys.holders(name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}
	then := []clientv3.Op{clientv3.OpPut(l.keys.token(name), tokenValue(r))}
	key := lk // the key of the grant
	els := []clientv3.Op{clientv3.OpGet(lk), clientv3.OpGet(hFrom, clientv3.WithRange(hTo))}
	switch kind {
	case "":
		cmps = append(cmps, none(hFrom, hTo))
		then = append(then, clientv3.OpPut(lk, r.ID, clientv3.WithLease(el)))
		if r.Options.Owner != "" {
			then = append(then, clientv3.OpPut(l.keys.owner(name), r.Options.Owner, clientv3.WithLease(el)))
		}
		if c.marked && !l.fifo {
			then = append(then, clientv3.OpDelete(c.waiter))
		}
		if r.Waiting && !l.fifo {
			semTo, _ := l.keys.kinds(name, sharedKind)
			els = append(els, clientv3.OpTxn(
				[]clientv3.Cmp{
					clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
					none(hFrom, semTo), // no semaphore: shared leases hold it
					clientv3.Compare(clientv3.CreateRevision(c.waiter), "=", 0),
				},
				[]clientv3.Op{clientv3.OpPut(c.waiter, "", clientv3.WithLease(el))}, nil))
		}
	default:
		kFrom, kTo := l.keys.kinds(name, kind)
		key = l.keys.holder(name, kind, slot)
		cmps = append(cmps, none(hFrom, kFrom), none(kTo, hTo), clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		if since > 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(hFrom), "<", since+1).WithRange(hTo))
		}
		then = append(then, clientv3.OpPut(key, holderValue(holderID(r.ID, kind, slot), r.Options.Owner, r.Options.RequestID), clientv3.WithLease(el)))
		if kind == sharedKind && !l.fifo {
			wFrom, wTo := l.keys.waiters(name)
			cmps = append(cmps, none(wFrom, wTo))
			lay.waiters = len(els)
			els = append(els, clientv3.OpGet(wFrom, clientv3.WithRange(wTo)))
		}
	}
	if l.fast {
		then = append(then, l.keys.putBeat(key, r.TTL, el))
		bFrom, bTo := l.keys.beats(name)
		lay.beats = len(els)
		els = append(els, clientv3.OpGet(bFrom, clientv3.WithRange(bTo)))
	}
	if l.fifo {
		qc, qt, qe := l.queueOps(r, el, c)
		cmps, then, els = append(cmps, qc...), append(then, qt...), append(els, qe...)
		lay.queue = len(els) - 1
	}
	if kind == "" {
		// Last: takeRequest reads the token key from the last read.
		els = l.lockRequest(r, els)
	}
	resp, err := l.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	return resp, lay, err
}

// parseState decodes the reads of a failed grant transaction.
func (l *Locker) parseState(name string, resp *clientv3.TxnResponse, lay txnLayout) (nameState, error) {
	var st nameState
	st.lock = only(resp.Responses[0].GetResponseRange().GetKvs())
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		h, err := l.keys.parseHolder(name, kv)
		if err != nil {
			return nameState{}, err
		}
		st.holders = append(st.holders, h)
	}
	if lay.waiters >= 0 {
		st.waiters = resp.Responses[lay.waiters].GetResponseRange().GetKvs()
	}
	return st, nil
}

// unmark deletes the exclusive-waiter record key of a call that ends without a
// grant, best effort: if it fails (the error says so), the record ends with its
// etcd lease.
func (l *Locker) unmark(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err := l.cli.Delete(ctx, key)
	return err
}
