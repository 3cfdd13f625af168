// Package redis is a fence.Locker on Redis (go-redis v9): a plain server, a Sentinel
// failover client or a Cluster, with semaphores (fence.WithLimit) and shared locks
// (fence.WithShared) as well as locks (see fence.FeatureLocker). It also
// implements fence.Healer, fence.Inspector, fence.Revoker and fence.Watcher, and a
// fenced KV store (KV) for data kept in the same Redis.
//
//	l, err := redis.NewLocker(goredis.NewClient(&goredis.Options{Addr: addr}), nil)
//	lease, err := l.Acquire(ctx, "payments", 30*time.Second, fence.WithWait(10*time.Second))
//	defer lease.Release(ctx)
//	err = guard.Put(ctx, key, value, lease.Fence()) // the resource enforces the token
//
// # Keys and Cluster
//
// A lock name N uses two keys and a channel that share the hash tag {N}, so a Cluster
// routes them to one slot and one script can touch both:
//
//	fence:{N}:lock    "<lease id> <token>", or "<lease id> <owner> <token>" with an
//	                  owner (fence.WithOwner), with the lease's TTL (PX)
//	fence:{N}:token   the fencing counter: never expires, never deleted by fence
//	fence:{N}:wake    the channel a grant, release, revoke or heal publishes on
//	                  (SPUBLISH), for waiters and watchers
//
// The owner lives in the lock value, so it is set and expires with the lease in the
// same SET. The lease id has no spaces and the token ends the value, so the owner is
// what lies between the first space and the last; a value without owner is the form
// versions before owners wrote, read as owner "". Those versions read both forms:
// they match the lease id prefix (renew, release) and the trailing token (inspect),
// and see the lock held; they do not see the owner.
//
// Semaphore (fence.WithLimit) and shared (fence.WithShared) leases use three
// more keys of the same tag, which exist only while such leases may be live and
// expire with the last of them:
//
//	fence:{N}:holders a hash: each lease's slot, token and owner; the limit; the
//	                  waiter record of an exclusive acquire (writer preference)
//	fence:{N}:expiry  a sorted set of the leases by expiry (TIME of the server, ms)
//	fence:{N}:slots   a bitmap of the semaphore slots taken
//
// Meanwhile the lock key holds " <token>" (a space first: no lease id), expiring
// no earlier than any of those leases. A lock acquire that finds no lock key is
// granted as before, in INCR and SET NX; one that finds a lease held pays one
// byte comparison more. Every operation on these leases but Inspect takes
// O(log n) in the n live leases (ZCARD counts them, BITPOS finds the lowest free
// slot), plus the leases that expired since the name last changed, which it
// drops; Redis 7.4's per-field HEXPIRE is not needed.
//
// Since a hash tag ends at the first '}', the characters '{', '}' and '%' of a name
// are percent-encoded in the tag (%7B, %7D, %25); every valid fence name works.
//
// # One round trip
//
// Acquire runs one Lua script (EVALSHA, falling back to EVAL on NOSCRIPT after a
// restart or failover) that refuses if a key holds foreign data (ErrWrongType),
// replies with the holder's PTTL if the lock is held, fails closed at
// fence.MaxToken (2^53-1, so tokens survive Lua's doubles), and otherwise INCRs the
// counter and SETs the lock with PX. Renew and Release compare the stored lease id in
// a script, so a retried call never touches a newer holder's lease. Revoke deletes
// whatever lease the lock key holds, in one script that looks and deletes, so it
// never ends a lease granted after its look, and publishes like Release. If the reply to
// an acquire is lost (timeout, cancelled context, dropped connection), the Locker
// releases that grant in the background by its fresh lease id.
//
// A plain lock's acquire runs a lean script of its own (two keys: INCR, SET NX
// PX, the publish of the grant; a name found taken undoes the INCR in the same
// script, so its counter is never seen raised, but that try writes a no-op
// transaction to replicas and the AOF); only if it finds semaphore or shared
// leases or foreign data on the name does the full script run after it, in a
// second round trip. A release runs a lean script too (one key: GET, DEL, the
// publish), or the full one at once for a semaphore or shared lease that the
// Locker granted (it keeps their lease ids, dropping expired ones as the set
// grows); a release of such a lease granted elsewhere (`fence release` of
// another process's permit) finds the marker and takes a second round trip. The
// lean scripts take as few arguments as they can (Redis sets up each as a Lua
// string per call): the client builds the lock value's prefix, MaxToken and the
// publish command are written in (a PUBLISH variant for ClassicPubSub), and the
// wake channel is derived from the lock key. A lock's acquire+release costs
// redis-server 72.9k instructions (callgrind, 2000 sequential pairs; 89.2k
// before the lean release; bsm/redislock's 56.0k: fence's pair makes six
// commands, INCR and two publishes more than redislock's three, at about 3k
// each). The acquires and releases of concurrent calls on one Locker go to Redis
// together, pipelined (at most two pipelines in flight; a call that finds one free
// goes out at once), so that under load each write and read of client and server
// carries many calls: with 16 clients that is more pairs per second than
// bsm/redislock's on the same server (BenchmarkAcquireReleaseParallel). Hooks of
// the client see these as pipelines. A Cluster client is not batched, nor are
// acquires with WAIT or WAITAOF (see Durability).
//
// # Rolling upgrade
//
// Versions before semaphores see the marker " <token>" as a lock held by
// another lease: their Acquire waits (until a release's message or the marker's
// expiry), their Renew and Release cannot match it (no lease id starts with a
// space), and their Inspect reports it held, with the token of the first lease
// of the marker and no owner. Their Revoke deletes the lock key only: that ends
// every semaphore and shared lease too, since the other keys mean nothing
// without the marker (and are dropped by the next grant). Old binaries never
// grant a lock while new-kind leases are live. A release of one of several leases
// does not bring the marker's expiry forward, so an old binary's waiter may
// wait until the expiry of a lease already released, or its poll.
//
// # Waiting
//
// A waiting Acquire subscribes to the name's channel (SSUBSCRIBE; SUBSCRIBE with
// Options.ClassicPubSub), waits for the subscription to be confirmed, and only then
// tries again, so a release between a failed try and the subscription is never missed.
// Release publishes after deleting the lock, so handoff takes about one round trip.
// Because messages can be lost (reconnects, a Cluster slot moving), a waiter also
// retries when the holder's lease expires and at least every Options.PollInterval.
// The expiry is the PTTL the script returned, plus the millisecond Redis keeps a key
// at PTTL 0; a try that still finds the key in its last millisecond (0 or 1 ms left)
// is retried a millisecond later, a few times, then with a doubling delay, so a
// holder that never releases is replaced about a millisecond after its TTL, not a
// PollInterval later. Each waiting call holds one pub/sub connection.
//
// Semaphore and shared waiters wait the same way: each release of a permit or
// a shared lease publishes "released", and a waiter that found the name full
// retries at the expiry of the lease whose end could let it in (the soonest
// permit's; for an exclusive acquire held by shared leases, the last of them).
// An exclusive acquire that waits for shared holders records itself in the
// holders hash until the try's time plus the smaller of its TTL and its wait
// left (driver.WaiterFor), and tries again within half that, so the record
// lasts as long as it waits; new shared acquires are held until the record
// ends, or until an exclusive grant clears it.
//
// Herd behaviour: a release wakes every waiter on that name; each runs the acquire
// script once, one wins and the others go back to waiting with the new holder's
// PTTL. A release therefore costs one script call per waiter on that name, and
// waiting is not FIFO. Waiters on other names are not woken, nor are waiters woken
// by the messages of grants and heals, which only watchers want.
//
// # Watching
//
// Watch (fence.Watcher) follows one lock's state. The scripts that change it
// publish on its channel ("granted", "released", "revoked", "healed"; not a
// renewal), so a grant stays one round trip: the publish costs the server about
// 2.9k instructions of a pair's 72.9k when nobody listens (callgrind; almost all
// of it the script's call into Redis, which asking whether anyone listens would
// cost as well). An expiry is
// read at the holder's PTTL, and the state every 5s in case a message was lost.
// A Locker's watches share one pub/sub connection (one per watched hash slot on a
// Cluster), closed with the last watch; after a reconnect (go-redis's; after a
// Sentinel failover, to the new primary) every watch reads again, and a moved slot
// is subscribed again at its new owner. Versions before Watch do not publish grants
// and heals: in a rolling upgrade watchers see theirs at the 5s poll.
//
// # Persistence
//
// The counters live in Redis's dataset. A server restarted without persistence
// starts them again at zero, so run Redis with AOF (appendonly yes; appendfsync
// always if a crash may not lose one increment) wherever tokens must keep rising
// across restarts. Whatever the configuration, guards still reject regressed
// tokens and Heal repairs the counter.
//
// # Durability: WAIT and WAITAOF
//
// Redis replicates asynchronously, so a failover can promote a replica that never saw
// the latest INCRs; the new primary then hands out tokens that were already used.
// With Options.WaitReplicas (and/or WaitAOFLocal, WaitAOFReplicas on Redis 7.2+),
// Acquire pipelines WAIT (WAITAOF) after the script on the same connection and hands
// out the lease only if enough replicas (fsyncs) acknowledged the grant; otherwise it
// releases the lock and returns ErrNotReplicated (fail closed: the token is skipped).
//
// On a Cluster the pipeline goes to the master of the name's slot; after a MOVED
// reply the Locker refreshes the slot map and tries the new owner once, and during
// a migration (ASK) it returns fence.ErrUnavailable, to be retried.
//
// What that guarantees: when Acquire returns a token, that many replicas had received
// (or fsynced) the counter increment. If a failover then promotes one of them, the
// counter does not go backwards past that token.
//
// What it does not guarantee: it does not make Redis consistent. WAIT is not a
// consensus commit; a failover may still promote a replica that did not acknowledge
// (Sentinel and Cluster choose by replication offset, but a partition or a manual
// failover can pick any), a replica can lose acknowledged data if it restarts without
// AOF, and lock exclusivity (P6) is not protected at all: a promoted replica may not
// know about a lease it did see expire on a different clock. Tokens stay best effort;
// guards still reject regressed tokens, and Heal repairs the counter.
//
// # What each failure can lose
//
// Only Acquire and Revoke wait for WAIT / WAITAOF; Renew, Release and Heal return as
// soon as the primary applied them. A Revoke that was not acknowledged as Options
// ask has still ended the lease on the primary; it returns fence.ErrUnavailable, since
// a failover may bring the lease back. Lock exclusivity (P6) rests on Redis keeping the lock
// key, token order (P1) on Redis keeping the counter. Per failure, what an
// acknowledged call can lose, and what the options and Heal do about it:
//
//   - redis-server killed or restarted without AOF (RDB snapshots or no
//     persistence): everything since the last snapshot. Counters go back (tokens
//     are issued again), grants, renewals and releases are forgotten (a name is
//     granted twice). WAIT does not help (the same node restarts from its own
//     files); WaitAOFLocal makes every Acquire fail (WAITAOF needs appendonly yes).
//   - redis-server killed (kill -9, OOM killer) with AOF on, the OS running: nothing
//     in the normal case, since Redis writes the AOF to the OS before it replies;
//     with appendfsync everysec and a disk so slow that an fsync is still running,
//     Redis delays that write by up to 2s while replying, and those writes can be lost.
//     WaitAOFLocal=1 closes that gap for grants.
//   - OS crash or power loss with appendfsync everysec: up to about 1-2s of writes
//     (last INCRs, grants, renewals, releases). WaitAOFLocal=1: every acknowledged
//     grant (its INCR and lock key) was fsynced and survives; a renewal can still be
//     lost (the lease then ends early after the restart: P6) and so can a release
//     (the name stays held until its TTL). With appendfsync always nothing
//     acknowledged is lost.
//   - Failover (Sentinel, Cluster) to a replica that missed writes (replication is
//     asynchronous): whatever it had not received, as above. WaitReplicas=n: a grant
//     survives if one of the n replicas that acknowledged it is promoted (they are
//     preferred by replication offset), not if another is (a manual failover, a
//     partition); WaitAOFReplicas=n also survives that replica's own restart.
//     Renewals, releases and Heal are not covered.
//   - Partition with the old primary on the minority side: every write it accepts
//     there is dropped when it rejoins as a replica; with WaitReplicas it fails
//     closed (ErrNotReplicated) once fewer than n replicas reach it.
//   - A step of the Redis host's clock, or a promoted replica whose clock differs:
//     nothing is lost, but leases end by that clock (keys expire at absolute times).
//
// Whatever is lost, guards reject a token that went backwards (P2), and Heal, fed
// the highest token a guard reports, raises the counter so the next grant is above
// it (P4). Nothing restores a lost lease: where P6 must hold across failures, use
// the embedded, etcd or PostgreSQL store, or rely on the guards for the window.
//
// # Fenced KV and Store
//
// KV is a fenced key-value store (fence.KV and fence.Guard) in the same Redis: each
// key is a hash fence:{K}:kv holding the highest fence accepted and the value, and
// one Lua script applies fence.Admit and writes both atomically. Store bundles a
// Locker and a KV on a client it opens from a redis:// or rediss:// URL (Open);
// it is what `fence serve --store redis://...` runs on. See KV for its durability:
// without WaitReplicas, a failover can lose an acknowledged Put.
//
// Delete removes a key's value and keeps its fence (the hash keeps name, token and
// lease; Get returns a nil value with them), fenced as Put in the same script, so a
// stale writer is still refused; a key holding no value is fence.ErrNotFound,
// after the fence checks. Purge (fence.Purger) deletes the hash: value and fence,
// the one way a key's fence goes back.
//
// Issued tokens (P9). A Store's KV (NewIssuedKV) refuses, with a
// *fence.UnissuedTokenError and nothing written, a Put, Delete or Fence whose fence
// names a lock whose counter fence:{N}:token does not exist (never granted under
// the prefix), whose token is above that counter (the last token issued, or healed
// past), or whose non-empty lease id is not that of the lease holding that token
// now: the lock key's lease, or for semaphore permits and shared leases the
// holders record that has the token. A lease that ended leaves no record of its
// token, so its token is admitted with any lease id (the key's own fence still
// refuses an equal token under another lease once written). On one Redis server
// (what Open connects to) the check is in the KV's script, which reads the
// name's counter, lock key and holders beside the record, so the check and the
// write are one atomic step. On a Cluster the record {K} and the name's keys {N}
// are in different slots, which one script cannot touch: the KV then runs the
// check as a script on the name's slot first and the write on the record's slot
// after. That is as safe while the counter only grows (a token at or below it
// stays so; a lease that had no record of its token never gets one). A failover
// that loses counter increments (see "What each failure can lose") lowers the
// counter, on either path: then the holders of tokens issued before the failover
// and above the counter that survived are refused with fence.ErrUnissuedToken
// (Last is the surviving counter) until a grant or a heal raises the counter to
// their token. Heal(ctx, name, token) of the refused token (at most
// fence.MaxHealAhead above Last) fixes it, as it fixes a regression reported by a
// guard (P4). A KV made by NewKV checks none of this: it guards with the tokens of
// any lock, of any store.
//
// # Regression healing (P4)
//
// After a failover that lost increments, a new grant can carry a token no greater than
// one a guard already accepted; the guard rejects the write with a
// *fence.StaleTokenError carrying the highest token it has seen. Report it and try
// again:
//
//	if err := guard.Put(ctx, key, v, lease.Fence()); errors.Is(err, fence.ErrStaleToken) {
//		_ = lease.Release(ctx)
//		_ = fence.Heal(ctx, locker, name, err) // counter = max(counter, highest seen)
//		// acquire again: the new token is above what the guard has seen
//	}
//
// Call Heal whenever a guard reports a stale token for a lease you hold right now (not
// for a lease you know expired: then the rejection is the guard doing its job and
// healing is harmless but unnecessary). Heal never lowers a counter, and raises
// only its own name's (each name has its own counter key). It refuses, with a
// *fence.HealBoundError, a seen more than fence.MaxHealAhead (2^32) above the
// name's counter: a failover loses a few increments, never that many, so no
// client can burn a name's token space with one call. After a larger regression
// (a primary restored from an old backup), check that the guards' highest
// tokens are real and heal in steps of at most the bound.
package redis
