// Package etcd implements fence.Locker, fence.Inspector, fence.Revoker,
// fence.Watcher, fence.KV, fence.Guard and fence.Purger on etcd v3
// (go.etcd.io/etcd/client/v3): consensus-backed fencing tokens, and the store
// that lets several `fence serve` instances share one etcd cluster.
//
//	store, err := etcd.Open(ctx, []string{"http://127.0.0.1:2379"}, nil) // or NewLocker(cli, opts)
//	lease, err := store.Acquire(ctx, "reconcile", 10*time.Second, fence.WithWait(time.Minute))
//	err = store.Put(ctx, "ledger", value, lease.Fence())
//
// # Tokens
//
// The token of a grant is the create revision of its lock key
// (Prefix+"lock/"+name), written by one transaction. etcd's revision is
// Raft-ordered and persisted, and a new leader continues from the highest
// committed one, so a token is unique per grant cluster-wide and only
// increases, across restarts and leader changes: fence.Healer is neither
// needed nor implemented. Tokens skip values, as the fence contract allows.
// Semaphore permits (fence.WithLimit) and shared leases (fence.WithShared) are
// native, take their tokens from the same revision, and are kept apart by the
// transactions' compares, not by a lock; an exclusive acquire waiting for
// shared holders holds off new shared acquires (writer preference). Versions
// of this package before semaphores compare only the lock key: while any of
// them acquires on a prefix, do not use semaphores or shared locks there.
//
// # TTLs: etcd's floor
//
// Each grant has its own etcd lease of ceil(ttl) whole seconds, raised by etcd
// to its minimum lease TTL (2s with the default 1s election timeout), and etcd
// revokes expired leases every 500ms. So etcd never expires a lease before the
// holder's deadline, but a holder that never releases blocks the lock for
// max(ceil(ttl), the minimum) plus up to 500ms after its grant. Use TTLs of
// whole seconds, at least the minimum lease TTL, where a crashed holder must be
// replaced within its TTL. A shorter TTL is neither rejected nor rounded up on
// the holder's side: the lease's deadline (and Done) stays the TTL asked, so it
// ends early rather than late, and Inspect reports the lock held, with etcd's
// whole seconds left, until etcd deletes the key. A release hands over at once.
//
// # Fast expiry and FIFO waiting
//
// [Options].FastExpiry lifts that floor for waiters: each renewal writes a beat
// key beside the lease's key (one Raft write per renewal), and a waiter that has
// seen no new revision of it for the holder's TTL, plus 1% and 50ms, on its own
// monotonic clock ends the grant with a transaction that compares the revision
// it saw: a renewal that raced in wins, and the holder's clock, whose deadline
// runs from when it sent its last renewal, always ends its lease first (P6), as
// long as the clocks' rates differ by less than that margin. A holder that
// stops renewing is replaced about 60 to 90ms after its deadline. With no waiter,
// etcd's lease expires it as before. [Options].FIFO grants waiters in the order
// they started to wait (P10): each waiting acquire keeps a waiter key whose create
// revision is its place, and only the lowest may be granted; a new arrival cannot
// jump the queue, and a waiter that gives up deletes its key as it returns. Both
// are off by default; cluster mode turns them on. docs/etcd.md has the
// transactions, the argument and the measurements.
//
// Renew sends a keep-alive for the grant's etcd lease (a different TTL moves
// the key to a new etcd lease, keeping its token); Release and Revoke delete
// the key in a transaction that compares the lease id (Revoke: that the lock is
// held), so neither can end a newer holder's grant. A lock key written by hand
// without a lease holds the lock until someone deletes it.
//
// # Waiting and watching
//
// A waiter watches the lock key from the current revision and tries again when
// a release or expiry deletes it, so a handoff costs the release's write, one
// watch notification and the waiter's grant. Every waiter on a name is woken
// and they race: waiting is not FIFO unless [Options].FIFO is set. A waiter whose try fails because etcd is
// unavailable (a leader election, a short partition) backs off and tries again
// until its wait ends; TryAcquire returns fence.ErrUnavailable at once. A
// broken watch is made anew, and every waiter and watcher reads again at least
// every 5s, so a stalled watch cannot strand it. A Locker's watches share one
// gRPC stream and one etcd watch per name.
//
// # Fenced KV and issued tokens
//
// [KV] keeps each key as one etcd key under Prefix+"kv/" holding the highest
// fence accepted and the data; a write compares the record's mod revision, so
// the check and the write are atomic, and several KVs (several servers) on one
// cluster and prefix serve the same data. The KV of a [Store] (what `fence serve
// --store etcd://` runs on) also refuses, with a *fence.UnissuedTokenError
// (fence.ErrUnissuedToken) and nothing written, a fence its prefix's grants did
// not issue (P9): a name never granted, a token above the name's last token, or
// a lease id that is not the live lease's for that token; and, with a
// *fence.LeaseRequiredError, a fence without a lease id whose token is a live
// lease's (its key still exists), which stored without a lease would refuse
// that lease's own writes. Once the lease's key is gone, its token alone is
// admitted as fence.Admit admits it. A KV made by [NewKV]
// checks no issuance. Delete keeps the key's fence (a stale writer is still
// refused; Get returns a nil value with the fence); Purge removes value and
// fence, the one way a key's fence goes back. Values are at most
// [MaxValueSize] bytes.
//
// # Errors
//
// Errors wrap the fence sentinels: an unreachable cluster, a lost leader or a
// timeout is fence.ErrUnavailable (the etcd client's error is kept in the
// chain), a lease gone at etcd fence.ErrNotHeld, a closed client
// fence.ErrClosed, and a record this package cannot decode [ErrCorrupt].
//
// The transactions, keys, lease pool and timing in detail are in docs/etcd.md
// in the repository; the measured costs (kinds, expiry handoff, watchers) are
// in docs/performance.md.
package etcd
