// Package etcd implements fence.Locker, fence.Inspector, fence.Revoker,
// fence.Watcher, fence.KV, fence.Guard and fence.Purger on etcd v3 (go.etcd.io/etcd/client/v3):
// consensus-backed fencing tokens, and the store that lets several `fence serve`
// instances share one etcd cluster.
//
// # Tokens
//
// The fencing token of a grant is the create revision of the lock key
// (Prefix+"lock/"+name). etcd's revision is the Raft-ordered store revision: every
// write of the whole cluster advances it, it is persisted in the Raft log, and a new
// leader continues from the highest committed revision, so a token is unique per
// grant cluster-wide and only increases, across restarts and leader changes
// (fence.Healer is not needed and not implemented). Tokens skip values, as the
// fence contract allows. A grant is one transaction:
//
//	If   CreateRevision(lock) == 0
//	Then Put(lock, leaseID, WithLease(etcdLease)), Put(Prefix+"token/"+name, "")
//	     [, Put(Prefix+"owner/"+name, owner, WithLease(etcdLease))]
//
// and the token is the transaction's revision. The token record's mod revision is
// therefore the last token of name, kept after release for Inspect and List.
//
// # Semaphores and shared locks
//
// A Locker makes semaphore permits (fence.WithLimit) and shared leases
// (fence.WithShared) natively (fence.Features). Each such lease is one holder key
// next to the lock key, under the grant's own etcd lease, as a lock key is:
//
//	Prefix+"lock/"+name+"\x00h"+KIND+"\x00"+SLOT   value: lease id, "\x00", owner
//
// with KIND the limit in four digits ("0003") or "sh" for a shared lease, and SLOT
// four digits. No name contains a control character, so these keys, and the
// exclusive-waiter records (Prefix+"lock/"+name+"\x00w"+id), belong to name alone,
// and [lock key, lock key+"\x01") is all of a name's lease state: one watch wakes
// its waiters and watchers. A grant is still one transaction, whose compares make
// concurrent grants safe by etcd's serialisation, not by a lock:
//
//	semaphore of N, slot s:  no lock key; no holder key of another KIND; no key for slot s
//	shared, slot s:          no lock key; no semaphore holder key; no waiter record; no key for slot s
//	exclusive:               no lock key; no holder key
//
// Then it writes the lease's key and the token key (the token is, as for a lock,
// the transaction's revision: one counter for every kind of grant). Slots lie in
// [0, N), so more than N permits, or two live leases in one slot, would need two
// keys for one slot: the compare on the slot key refuses the second. Shared leases
// take slots of [0, fence.MaxLimit) too, at random (Lease.Slot and Holders report
// 0), so at most MaxLimit are live. A try first guesses its slot (0; a waiter the
// lowest slot whose release woke it; a shared acquire a random one); when the guess was
// taken, the failed transaction's reads show the lowest free slot, and the try
// sends one more transaction for it, so "the lowest free slot" is the lowest as
// etcd had it at that read: a permit that ends between the read and the grant
// leaves a lower slot free. The same reads, passed to driver.Decide, tell a limit
// mismatch (a *fence.LimitError) from a name that is held.
//
// Writer preference: an exclusive acquire that waits while only shared leases
// hold the name records itself waiting, in the transaction that found it held,
// with a waiter record of its own under its etcd lease (the lease that it will
// hold the lock with); shared grants compare that no record exists. The record
// lives while the waiter's tries refresh its etcd lease (a waiter behind shared
// holders tries again within half the smaller of its TTL and its wait left, as
// driver.Decide says); the exclusive grant
// deletes it in its transaction, and a waiter that gives up (its wait, its context,
// Close) deletes it as it returns. A waiter that crashes holds off shared acquires
// until its etcd lease expires: its ceil(TTL) seconds, or etcd's minimum, plus up
// to 500 ms, not the smaller of its TTL and its wait left. Several exclusive
// waiters each keep their own record.
//
// Renew, Release and Revoke find a permit's key from its lease id, which ends in
// ".LIMIT.SLOT" (".r.SLOT" for a shared lease) after the 128 random bits that make
// it a credential, and compare the key's value with the id, as for a lock. Revoke
// deletes the lock key and every holder key in one transaction. Inspect and List
// report the holders (fence.LockInfo.Holders, as driver.Info shapes them) with the
// time left of each one's etcd lease: one TimeToLive request per holder, at most 8
// at a time. Grants survive a restart of etcd as locks do: the keys and their etcd
// leases are in etcd's Raft log.
//
// Measured on one member on a 2-CPU machine, quiet (BenchmarkKinds_*): an
// uncontended acquire+release pair takes 1.5 ms for a lock, 1.5 ms for a permit
// and 1.7 ms for a shared lease; the median handoff is 3.8 ms for a lock, 4.2 ms
// from a permit of a full semaphore to a waiting one, and 4.3 ms from a shared
// lease to a waiting writer.
//
// Versions of this package before semaphores compare only the lock key: while
// any of them acquires on the same prefix, do not use semaphores or shared locks
// there, as such a version would grant a lock beside them.
//
// # Owners
//
// The owner of a grant (fence.WithOwner) is the owner key, written by the grant's
// transaction under the grant's etcd lease, so it ends with the lock key: deleted by
// Release and Revoke in the transaction that deletes the lock key, moved along when
// Renew moves the lock key to another etcd lease, removed by etcd with the lease. The
// lock key's value stays the lease id, so versions before owners (which have no
// owner key and compare the value with the lease id) still renew and release every
// grant, and this version reports their grants without owner. An owner key counts
// only if written at or after the lock key's creation: one that an older version's
// release left behind until its etcd lease ends is not a later grant's owner.
//
// # Leases and TTLs
//
// Each grant has its own etcd lease, of ceil(ttl) whole seconds: etcd counts lease
// TTLs in seconds, and raises a TTL below its minimum (1.5 election timeouts, 2 s with
// the default 1 s election timeout) to that minimum, so etcd never expires a lease
// before the holder's deadline, but may keep a short lease up to about a second (or
// the minimum) longer. etcd also extends every lease by an election timeout when a
// new leader takes over, which errs the same, safe, way. The holder's deadline
// (Lease.Deadline, Done) is the requested ttl from when the request that started the
// etcd lease's countdown was sent.
//
// So a holder that never releases blocks the lock for longer than its TTL: etcd
// deletes the lock key when it revokes the expired etcd lease, and its leader looks
// for expired leases every 500 ms. The next holder gets the lock max(ceil(ttl), the
// minimum lease TTL) plus up to 500 ms after the holder's grant. Measured
// (BenchmarkExpiryHandoff, a 100 ms lease): about 2.4 s after the holder's deadline
// with etcd's default timing, 1.4 s with a 500 ms election timeout (1 s minimum). A
// TTL of whole seconds at or above the minimum is handed over at most about half a
// second after the holder's deadline. A release hands over at once (a watch event).
// This is etcd's floor, not fence's: use TTLs of at least the minimum lease TTL (and
// whole seconds) where a crashed holder must be replaced within its TTL.
//
// A shorter TTL is neither rejected nor rounded up on the holder's side: the holder's
// deadline stays the TTL asked, which is never later than etcd's expiry, so Done
// closes early rather than late. What etcd keeps is reported as it is: Inspect (and
// so `fence status` and the HTTP API's lock state) shows the lock held, with etcd's
// remaining TTL in whole seconds (0 in its last second), until etcd deletes the key.
// `fence serve --store etcd://` does the same: an acquire with "ttl_ms":100 succeeds
// with "ttl_ms":100 in the reply (the holder's deadline), and a waiter is granted
// the lock only when etcd has revoked the holder's lease.
//
// Renew checks that the lock key still holds the lease id, then sends a keep-alive
// for its etcd lease (which restarts the lease at its granted TTL); a different TTL
// moves the key to a new etcd lease, keeping its create revision and so its token.
// Release deletes the key if it still holds the lease id, then revokes the etcd
// lease. Neither can touch a newer holder's key: every write compares the lease id.
// fence.WithAutoRenew renews through Renew. A lock key that a person wrote by hand
// without a lease holds the lock until someone deletes it: never granted twice.
//
// Revoke (fence.Revoker) is one transaction, If CreateRevision(lock) > 0 Then delete
// the lock and owner keys: the check and the delete are one step, so it ends the
// grant that holds the lock as etcd applies it and never a later one. Waiters are
// woken by the delete, as after a release; the holder's etcd lease is then revoked.
//
// # Waiting
//
// A waiter that finds the lock held keeps its etcd lease, opens a watch on the lock
// key from the current revision (confirmed by etcd before it goes on), tries once
// more, and then sleeps until the watch reports a delete: a release or the expiry of
// the holder's lease. It then refreshes its etcd lease with a keep-alive (not a Raft
// write) and tries the transaction again. A handoff therefore costs the release's
// write, one watch notification and the waiter's grant write. The loop is
// driver.Engine's, as on every backend; this package supplies the one try. The
// holder's time left in a "not acquired" error (etcd's whole seconds) is looked up
// by a try that may be the call's last, not by every try of a wait.
//
// etcd's concurrency.Mutex is slower at this because its waiter watches from its
// predecessor's revision: such a watch is "unsynced" in etcd and is served by a
// background loop every 100 ms. A watch from the current revision is synced and
// notified as the delete is applied. (Watching from "the failed attempt's revision
// + 1" is synced only if no other write happened in between, so it is not used.)
//
// A waiter whose attempt fails because etcd is unavailable (a leader election, a
// short partition) backs off (50 ms doubling to 1 s) and tries again until its wait
// ends, so a leader change mid-wait costs time, not the wait; TryAcquire (no wait)
// returns fence.ErrUnavailable at once.
//
// A Locker keeps the etcd leases of its released grants (their key is gone) and of
// failed tries in a small pool, and reuses them with a keep-alive instead of a grant:
// a grant is a Raft write with a backend commit, a keep-alive is answered by the
// leader alone. So an uncontended acquire+release is two Raft writes, like
// concurrency.Mutex's lock+unlock.
//
// Waiting is not FIFO: every waiter on a name is woken by the delete and they race
// with one transaction each; one wins and the others keep watching. With many
// waiters on one lock this is a thundering herd of one failed transaction each per
// handoff. A watch that breaks (no leader: watches require one; compaction) is
// re-created after one more attempt, and every waiter also retries every 5 s
// without an event, so a stalled watch cannot strand it.
//
// # Watching
//
// Watch (fence.Watcher; the loop is driver.Engine's) follows one lock through an
// etcd watch on its keys (the lock key, its holder keys and waiter records): every
// change writes one of them in the transaction that makes it (a grant creates it, a release or revoke deletes it, etcd deletes it when
// it revokes an expired holder's lease), older versions' grants and releases too, so
// a rolling upgrade loses no signal and nothing extra is written for watchers. There
// is no heal on etcd. An expiry is seen when etcd deletes the key, up to the minimum
// lease TTL plus 500 ms after the holder's deadline, as for a waiter. The watchers of
// a name on one Locker share one etcd watch and the reads a change causes; all of a
// Locker's watches share one gRPC stream. A broken connection is resumed by the
// client from the last revision seen; a watch that etcd ends (compaction, no leader)
// is made anew; a read every 5 s catches whatever a watch missed. Measured on one
// member on a 2-CPU machine: a watcher yields the free state a median of 0.2 ms
// after Release returns (0.6 ms after it is called), p90 0.3 ms (BenchmarkWatch);
// an acquire+release pair on a watched lock takes 1.15 times as long as on an
// unwatched one with one watcher, 1.2 times with ten on one Locker, 2.8 times with
// ten Lockers on clients of their own, whose reads compete with the member for
// the CPU (BenchmarkAcquireRelease).
//
// # Fenced KV
//
// KV keeps each key as one etcd key under Prefix+"kv/" whose value holds the
// highest fence accepted and the data. Put reads the record, applies fence.Admit and
// writes with a transaction that compares the record's mod revision; on a conflict
// the transaction returns the new record and the check runs again, so the check and
// the write are atomic. Several KVs (several servers) on one cluster with one
// prefix serve the same data.
//
// The KV of a Store (what `fence serve --store etcd://` runs on) accepts only
// fences its prefix's grants were issued (P9). With the record, Put, Delete and
// Fence read f.Name's token record (Prefix+"token/"+name, whose mod revision is the
// name's last token), its lock key and its holder keys, and refuse with a
// *fence.UnissuedTokenError (fence.ErrUnissuedToken), writing nothing:
//
//   - a name with no token record: never granted on this prefix (Last 0);
//   - a token above the token record's mod revision: never issued;
//   - a non-empty lease id that differs from that of the live lease whose key
//     (lock key or holder key) was created at f's token (OtherLease). Once that
//     lease ended, no key records it, and a fence with its token is admitted
//     whatever its lease id: the token was issued, and the key's own fence
//     (fence.Admit) still refuses an equal token of another lease after it.
//
// The write's transaction compares, besides the record's mod revision, that the
// token record's mod revision is at least f's token, so the check and the write are
// one step. A KV made by NewKV does not check issuance: it guards with the tokens
// of any lock, including locks of other stores.
//
// Delete removes a key's value and records the fence in the same kind of
// transaction, fenced as Put (P9 included on a Store's KV); the key keeps its fence,
// so Get returns a nil value with it and a stale writer is still refused. A key
// holding no value (never written, only fenced, or deleted) is fence.ErrNotFound,
// after the fence checks. Purge (fence.Purger) deletes the key's etcd key, value and
// fence: the one way its fence goes back.
//
// # Errors
//
// Errors wrap the fence sentinels: an unreachable cluster, a lost leader or a
// timeout is fence.ErrUnavailable (the error of the etcd client is kept in the
// chain), a lease gone at etcd fence.ErrNotHeld, a closed client fence.ErrClosed,
// and a record this package cannot decode ErrCorrupt.
package etcd
