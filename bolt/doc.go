// Package bolt is fence's embedded, durable store: a fence.Locker (with
// fence.Healer, fence.Revoker, fence.Inspector and fence.Watcher) and a fenced
// key-value store (fence.KV and fence.Guard) in one bbolt file and its lease log
// (PATH-wal). It is the default store of `fence serve`, which opens
// DIR/fence.db. The file is open in one process at a time.
//
//	st, err := bolt.Open("fence.db", nil)
//	...
//	lease, err := st.Acquire(ctx, "payments", 30*time.Second)
//	...
//	err = st.Put(ctx, "ledger/42", data, lease.Fence())
//
// # A restart is a non-event
//
// After a clean Close and after kill -9 alike, a reopened store knows exactly
// which names had live leases and until when:
//
//   - a lease granted before the restart is held by the same lease id, token,
//     owner (fence.WithOwner) and semaphore slot until its expiry; its holder
//     renews and releases it as before (P6);
//   - a name without a live lease (never used, released, or expired) is granted
//     at once: there is no grace period;
//   - no token is reissued or lower than one handed out before (P1).
//
// Opening costs a read-only consistency walk of the file, a replay of the lease
// log and one scan of the lock records: O(file size).
//
// # Durability
//
// Every Acquire, Renew, Release, Revoke and Heal is on disk before it returns.
// Leases live in memory and each change is appended to the lease log with one
// write and one fdatasync; operations that arrive while a commit runs share the
// next one (group commit). If a commit fails, a grant is taken back and a renewal
// undone, and the caller gets fence.ErrUnavailable. A grant whose answer the
// caller never saw (the store died between its commit and the reply) may be on
// disk, and is then honoured until its expiry, as one whose reply was lost.
// Options.NoSync skips the fdatasync: a power loss or an OS crash can then lose
// what was acknowledged (kill -9 of the process cannot); for tests only.
//
// The log is folded into the bbolt file when it passes 4 MiB, at Close and at
// Open. A crash at any point leaves either a log to replay or one already
// folded; replay stops at the tail of a write a crash cut, which was never
// acknowledged.
//
// Tokens come from one counter for all names. The file stores a ceiling that
// no token handed out passes, raised Options.TokenBlock at a time ahead of use;
// after a crash the counter restarts above it, so tokens skip values (at most
// TokenBlock per crash), never repeat or go down. Heal raises one name's next
// token and no other's: the name's record keeps the healed token as a floor its
// next grant passes. A heal may go at most fence.MaxHealAhead above the highest
// token the name could have been issued; a larger one is refused with a
// *fence.HealBoundError.
//
// # Clocks
//
// While the store runs, expiry is measured with the monotonic clock; the file
// stores expiries as wall-clock times, the one clock that survives a restart. A
// forward step of the wall clock while the store runs (common at boot, before
// NTP syncs) is seen at the next operation, or within Options.FlushInterval when
// idle, and every held lease is rewritten, so that a restart does not end it
// early. A step backward makes restored leases last longer by the step, never
// shorter. What the store cannot see, a crash between a forward step and the
// commit that absorbs it, or a step while it is not running, shortens restored
// leases by the step: synchronise the clock before starting the store.
//
// # Semaphores, shared locks and watches
//
// fence.WithLimit(n) grants one of n permits (the lowest free slot) and
// fence.WithShared a shared lease (Store.Features), decided by driver.Decide as
// on every backend, and written and restored as locks are. An exclusive acquire
// waiting for shared holders is remembered in memory only: after a crash a
// remote waiter records itself again at its first try. Store.Watch follows one
// lock: the state, then the state after every grant, release, expiry, revoke and
// heal, signalled in process as each happens.
//
// # Fenced key-value store
//
// Put checks the fence with fence.Admit and stores the value and its fence in
// one bbolt transaction, durable when it returns. Guard.Fence advances a key's
// fence and keeps its value. Delete removes a value under the same check and
// keeps the key's fence, so a stale writer is still refused; Purge (fence.Purger,
// an administrator's) removes the value and the fence. Keys follow the rules of
// lock names (1 to fence.MaxNameLen bytes of UTF-8 without control characters).
//
// # Only issued tokens fence
//
// Put, Delete and Fence refuse (P9), with a *fence.UnissuedTokenError and
// nothing written, a token above the last one the store granted or healed for
// the fence's lock name (a name never granted has none), across restarts and
// crashes alike, and a fence naming another lease id than the live lease that
// holds its token. They refuse a fence without a lease id whose token an
// unexpired lease holds, with a *fence.LeaseRequiredError and nothing written:
// stored without a lease, it would refuse that lease's own writes. Once that
// lease has ended (released, revoked or expired), its token is checked by value
// only, with or without a lease id, and fence.Admit refuses it if a later token
// fenced the key. A store whose keys are fenced by another locker's tokens (a Redis whose
// locks guard them) cannot know what that locker issued: open it with
// Options.ExternalLocks, and it checks fences with fence.Admit only.
//
// # Errors
//
//   - Open: ErrNotStore (not a bbolt file, another program's, or another schema
//     version), ErrCorrupt (a damaged file, or a lease log that is missing or has
//     a damaged header), fence.ErrUnavailable (another process holds the file
//     past Options.Timeout), fence.ErrInvalid (empty path, negative options). Open
//     writes nothing to a file it refuses.
//   - A failed write: fence.ErrUnavailable, and syscall.ENOSPC or EDQUOT when
//     the disk is full; nothing that failed was acknowledged, and the store
//     writes again once space is freed, without a restart.
//   - After Close: fence.ErrClosed from every method; waiting acquires end with it.
//   - The rest are fence's, as on every backend: fence.ErrNotAcquired,
//     fence.ErrNotHeld, fence.ErrInvalid (*fence.InvalidError), and from the
//     KV fence.ErrStaleToken (*fence.StaleTokenError), fence.ErrNamespace,
//     fence.ErrNotFound, *fence.UnissuedTokenError and *fence.LeaseRequiredError.
//
// # Limits
//
// Values are at most MaxValueLen bytes. The file keeps one small record per lock
// name ever used (its last token, and its leases while held), as the counters
// of other backends do; the log keeps up to 4 MiB, allocated ahead. Memory grows
// with held leases, about 200 bytes each (figures in docs/performance.md).
//
// # Files
//
// The lease log PATH-wal belongs to the file: move, copy and back up both
// together. After a clean Close the bbolt file alone is complete, so a copy of
// it taken then opens without the log.
//
// ReadContents reads what a stopped store holds beyond its leases (the token
// ceiling, each name's last token with heal floors, the KV items) from the file
// and its log without writing to either: `fence cluster migrate` carries it to a
// cluster.
//
// Owners, semaphores, shared locks and heal floors came after schema version 1
// without changing it. A file without them opens in earlier releases; an
// earlier release refuses a file holding a lease with an owner or a semaphore's
// or shared lock's live leases (ErrCorrupt, "lock record ... is malformed") and
// writes nothing. Do not open a file in which a name was healed above the shared
// counter with a release that knows no floors: it would grant that name tokens
// below its floor.
package bolt
