// Package redis is a fence.Locker on Redis (go-redis v9): a plain server, a
// Sentinel failover client or a Cluster, with semaphores (fence.WithLimit) and
// shared locks (fence.WithShared) as well as locks. It also implements
// fence.Healer, fence.Inspector, fence.Revoker and fence.Watcher, and a fenced KV
// store ([KV]) for data kept in the same Redis.
//
//	l, err := redis.NewLocker(goredis.NewClient(&goredis.Options{Addr: addr}), nil)
//	lease, err := l.Acquire(ctx, "payments", 30*time.Second, fence.WithWait(10*time.Second))
//	defer lease.Release(ctx)
//	err = guard.Put(ctx, key, value, lease.Fence()) // the resource enforces the token
//
// [Open] makes a [Store], a Locker and a KV on a client opened from a redis:// or
// rediss:// URL: what `fence serve --store redis://...` runs on.
//
// # Contract
//
// A name N lives in keys that share the hash tag {N} (fence:{N}:lock,
// fence:{N}:token, ...), so every valid name works on a Cluster; the counter key
// fence:{N}:token is never expired or deleted by fence. Acquire is one Lua
// script (a second only when the name holds semaphore or shared leases), Renew and
// Release compare the stored lease id, so a retried call never touches a newer
// holder's lease, and Revoke looks and deletes in one script. If the reply to
// an acquire is lost, the Locker releases that grant in the background.
// Concurrent calls on one Locker are pipelined together (not on a Cluster
// client, nor acquires with WAIT); hooks of the client see pipelines.
//
// A waiting Acquire subscribes to the name's channel (SSUBSCRIBE; SUBSCRIBE with
// [Options].ClassicPubSub) before it tries again, so a release is never missed;
// it also retries at the holder's expiry (about a millisecond after its TTL) and
// at least every [Options].PollInterval. Each waiting call holds one pub/sub
// connection. A release wakes every waiter on its name: one wins, and waiting is
// not FIFO. Watch reads a lock at its holder's expiry, at each change, and every
// 5s; a Locker's watches share one pub/sub connection (one per hash slot on a
// Cluster).
//
// # Durability and what a failure can lose
//
// Redis is not a consensus store. The counters live in Redis's dataset: run it
// with AOF (appendonly yes; appendfsync always if a crash may not lose one
// increment) wherever tokens must keep rising across restarts. Replication is
// asynchronous, so a failover can lose grants and increments; with
// [Options].WaitReplicas (or WaitAOFLocal, WaitAOFReplicas on Redis 7.2+),
// Acquire hands out a lease only once that many replicas (fsyncs) acknowledged
// it, and otherwise releases it and returns [ErrNotReplicated]. That keeps the
// counter from going back past an acknowledged token if an acknowledging
// replica is promoted; it does not protect lock exclusivity (P6) across a
// failover, nor renewals and releases. Where P6 must hold across failures, use
// the embedded, etcd or PostgreSQL store, or rely on the guards for the window.
//
// Whatever is lost, guards reject a token that went backwards (P2), and
// fence.Heal, fed the highest token a guard reports, raises the name's counter
// past it (P4):
//
//	if err := guard.Put(ctx, key, v, lease.Fence()); errors.Is(err, fence.ErrStaleToken) {
//		_ = lease.Release(ctx)
//		_ = fence.Heal(ctx, locker, name, err) // counter = max(counter, highest seen)
//		// acquire again: the new token is above what the guard has seen
//	}
//
// Heal never lowers a counter, raises only its own name's, and refuses with a
// *fence.HealBoundError a seen more than fence.MaxHealAhead above the counter.
//
// # Fenced KV and issued tokens
//
// [KV] keeps each key as a hash holding the highest fence accepted and the
// value, checked and written by one script. Delete keeps the key's fence (a
// stale writer is still refused; Get returns a nil value with the fence);
// Purge removes value and fence, the one way a key's fence goes back. A KV made
// by [NewIssuedKV] (a Store's) also refuses, with a *fence.UnissuedTokenError and
// nothing written, a fence its prefix's Locker never issued (P9): a name never
// granted, a token above the name's counter, or a lease id that is not the one
// holding that token now; and, with a *fence.LeaseRequiredError, a fence
// without a lease id whose token a live lease holds (stored without a lease, it
// would refuse that lease's own writes; once the lease ended, the token alone is
// admitted as fence.Admit admits it). After a failover that lowered a counter, holders of
// tokens above it are refused until a grant or a Heal raises it. A KV made by
// [NewKV] checks no issuance. Without WaitReplicas, a failover can lose an
// acknowledged Put.
//
// # Limits and errors
//
// Tokens run to fence.MaxToken (2^53-1, so they survive Lua's doubles); at that
// bound Acquire fails closed with fence.ErrTokenExhausted. KV values are at most
// [MaxValueLen] bytes. Versions before semaphores and owners keep working beside
// this one during a rolling upgrade, but do not grant semaphores or shared
// leases and do not see owners.
//
// Errors wrap the fence sentinels; a key that holds data fence did not write is
// [ErrWrongType], an acquire not acknowledged by enough replicas
// [ErrNotReplicated] (which matches fence.ErrUnavailable), and a Cluster slot in
// migration fence.ErrUnavailable, to be retried.
//
// How the keys, scripts, waiting and failure cases work in detail is in
// docs/redis.md in the repository; the measured costs are in
// docs/performance.md.
package redis
