// Package bolt is fence's embedded, durable store: a fence.Locker (with
// fence.Healer, fence.Revoker, fence.Inspector and fence.Watcher) and a fenced
// key-value store (fence.KV and fence.Guard) in one bbolt file and its lease log
// (PATH-wal). It is the default
// store of `fence serve`, which opens DIR/fence.db.
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
//   - a lease granted before the restart is held by the same lease id, token and
//     owner (fence.WithOwner) until its expiry; its holder renews and releases it
//     as before (P6);
//   - a name without a live lease (never used, released, or expired) is granted
//     at once: there is no grace period;
//   - no token is reissued or lower than one handed out before (P1).
//
// The cost of opening is a read-only consistency walk of the file, a replay of
// the lease log and one scan of the lock records (O(file size)); `fence serve`
// on a small store answers again about 20ms after it is started.
//
// # How: group commit, tokens reserved ahead
//
// Leases live in memory (a map from name to a compact entry, an expiry heap with
// one clock timer for the earliest expiry, a per-name channel that wakes waiters
// at once on Release, on Revoke and on expiry), and every change is on disk
// before it is acknowledged:
//
//   - Leases. Acquire, Renew, Release and Revoke update memory (so other callers
//     see the change at once), mark the name dirty and wait for a commit, which
//     appends every dirty name's record (name, lease id, token, expiry, owner)
//     to the lease log with one write and one fdatasync. A caller that finds no
//     commit running writes it itself, on its own goroutine; operations that
//     arrive while a commit runs share the next one (group commit), which a
//     background flusher writes: one commit carries about one operation per
//     waiting caller. If a commit fails, a grant is taken back and a renewal
//     undone, and the caller gets fence.ErrUnavailable.
//
//   - The lease log (PATH-wal) holds what the bbolt file does not have yet. Each
//     record carries the log's generation and a CRC. When the log passes 4 MiB,
//     and at Close, the flusher folds it into the bbolt file (one transaction
//     with the latest record of each name and the next generation) and then
//     restarts the log under that generation; Open replays the log into the bbolt
//     file the same way. A crash at any point leaves either a log to replay (the
//     fold is idempotent: each record is a name's whole state) or one already
//     folded (its generation is behind the file's, so it is skipped). Replay
//     stops at the first record that is short, zero, of another generation or
//     fails its CRC: the tail of a write a crash cut, which was never
//     acknowledged, since a commit is acknowledged after its fdatasync.
//
//   - Tokens (P1). One counter serves all names (tokens need only increase per
//     name; a global counter makes that hold across crashes simply). The file
//     stores a ceiling C; tokens up to C may be handed out, none above C before C
//     is on disk. When the counter comes within half a block of C, the flusher
//     raises C by Options.TokenBlock in the same commits, so grants rarely wait for
//     it. After a crash the counter restarts at C+1: tokens skip values (allowed),
//     never repeat or go down.
//
//   - A grant acknowledged is on disk; a grant whose answer the caller never saw
//     (the store died between its commit and the reply) may be on disk too, and is
//     then honoured until its expiry, as a grant whose reply was lost would be.
//
// Heal raises the one counter, so it raises the next token of every name. That is
// allowed (tokens only increase) and keeps Heal durable with the same ceiling. A
// store never regresses, so guards have no reason to report a token above its
// counter; but note that Heal(name, fence.MaxToken) exhausts every name (the store
// fails closed with fence.ErrTokenExhausted).
//
// # Clocks
//
// While the store runs, expiry is measured with the monotonic clock. The file
// stores expiries as wall-clock times, since the wall clock is the only clock that
// survives a restart: a lease time t is written as W0+t, where W0 is the wall
// reading at Open. If the wall clock steps forward while the store runs (common
// at boot, before NTP syncs), the store sees it (at its next grant or renewal, and
// every Options.FlushInterval when idle), raises W0 by the step and rewrites every
// held lease in the next commit, so after a restart no lease ends earlier than it
// would have; the operation that saw the step is acknowledged only after that
// rewrite. A step backward is not followed: written expiries then lie later by the
// wall clock, so a restart honours leases longer (by the step), never shorter.
//
// What the store cannot see: a crash in the moment between a forward step and the
// commit that absorbs it (at most one FlushInterval plus one commit when idle), and
// a step while the store is not running (between the crash and the reopen). Both
// shorten the leases restored by the step. Keep the clock synchronised before
// starting the store (NTP slews, it does not step, once synchronised).
//
// # Costs
//
// Every Acquire, Renew and Release waits for one group commit: one write and one
// fdatasync of the lease log, about 0.1ms on the reference machine (2 vCPUs,
// ext4 on a virtual disk; a bbolt commit, two fsyncs, is about 0.2ms). In-process,
// an uncontended Acquire+Release pair takes about 0.27ms (two commits; 3.7k
// pairs/s) where it took about 2µs with the lease horizon, which wrote nothing
// per grant. With more callers a commit carries more operations
// (BenchmarkAcquireRelease reports pairs/s and grants/commit): at 1, 16 and 64
// callers a commit carries 0.5, 7 and 20 grants (and as many releases), for
// about 3.7k, 49k and 110k pairs/s. An uncontended caller writes its commit
// itself: handing it to the flusher costs two goroutine wakeups, which behind
// fence serve's HTTP handler took about 0.15ms an operation with idle CPUs
// (0.45ms against 0.30ms, the fdatasync included). A checkpoint (every 4 MiB of log, about
// 50,000 operations) is one bbolt transaction. Reopening after a crash takes
// about 70ms with 100,000 live leases and 0.8s with a million
// (BenchmarkReopenAfterCrash). Memory: about
// 140 bytes per held lease in the store, measured at a million before
// semaphores, whose inline lease record added about 20 (182 to 202 bytes at
// 300,000 leases) (BenchmarkHeldLeases; each *fence.Lease a
// caller holds adds about 500 more), plus the latest record of each name logged
// since the last checkpoint. The file keeps one small record per lock name ever
// used (its last token, and its lease while held), as counters of other backends
// do; the log keeps up to 4 MiB, allocated ahead.
//
// # Semaphores and shared locks
//
// The store makes both natively (Store.Features): fence.WithLimit(n) grants one
// of n permits, with the lowest free slot, and fence.WithShared a shared lease.
// A name's entry keeps its first lease inline, so a lock costs what it did, and
// the others of a semaphore or shared lock beside it; every lease is in the one
// expiry heap. Each try hands the name's live leases to driver.Decide, locks'
// too, so every backend that decides in Go follows one set of rules. Grants,
// renewals, releases, revokes (of every live lease of the name) and expiries are
// written and acknowledged as for locks, and a restart restores each lease with
// its id, token, owner and slot. The record of an exclusive acquire waiting for
// shared holders (writer preference) is kept in memory only: the waiting call
// ends with the process, and a remote waiter asking again records itself at its
// first try on the reopened store.
//
// A lock's record is unchanged (see Files). A semaphore's or shared lock's
// record holds all its live leases (flagMulti), so each grant or release on such
// a name writes every live lease of it: O(holders) bytes, about 40 plus the
// owner per lease, in that name's commit.
//
// # Watching
//
// Store.Watch follows one lock (fence.Watcher): the state, then the state after
// every grant, release, expiry, revoke and heal. Changes are signalled in
// process, under the store's lock, as they happen in memory (a release is seen
// by watchers before its commit returns to the releaser); expiries, which no
// operation announces, are read at the holder's expiry by the store's clock.
// A watch holds one subscription and no goroutine of its own; the fallback
// poll of driver.Engine.Watch (every 5s) is never what finds a change here. The
// file is open in one process at a time, so there is no older process whose
// changes would go unsignalled. In process, a watcher has the free state about
// 0.1ms before Release returns (BenchmarkWatch). Signalling costs two lookups of
// about 11ns each per acquire+release pair when nobody watches the name, lost
// in the pair's 0.27ms commit.
//
// # Fenced key-value store
//
// Put checks the fence with fence.Admit and stores the value and its fence in one
// bbolt transaction, durable (fsync) when Put returns; concurrent writers share
// commits through bbolt's db.Batch. Values are at most MaxValueLen bytes; keys
// follow fence.ValidateKey. Guard.Fence advances a key's fence and keeps its value.
// Delete removes a key's value under the same check and keeps the key's fence
// (the Delete's own), so a stale writer is still refused; Purge (an
// administrator's, fence.Purger) removes the value and the fence, the one way a
// key's fence goes back. Both are durable when they return.
//
// # Only issued tokens fence
//
// The store grants the locks whose fences its KV checks, so Put, Delete and
// Fence refuse a fence the store never issued (P9), with an
// *fence.UnissuedTokenError and nothing written, before fence.Admit is asked:
//
//   - a token above the name's last token (fence.CheckIssued): the last token the
//     store granted for that name, or healed it to (the one in memory, else the
//     one in the lease log or the file, so the check holds across restarts and
//     crashes alike); a name never granted has last token 0, so any fence of it
//     is refused;
//   - a non-empty lease id when a live lease of the name (unexpired, or expired
//     and not yet ended) holds the fence's token under another id. Once that
//     lease has ended the store no longer knows which lease its token had, so a
//     token of an ended lease is checked by its value only; fence.Admit then
//     refuses it if a later token fenced the key. A fence without a lease id is
//     checked by its token only.
//
// The check reads the lock table under the store's lock just before the KV
// transaction, not inside it. That admits exactly what a check inside it would:
// what it finds never becomes false later (a name's last token only grows, and
// a token is issued to one lease only). A grant's token counts as issued as soon
// as the grant is made in memory, while its commit is in flight; if a crash
// loses that grant, its token is still below the durable token ceiling, so every
// later grant's token is above it and no holder is fenced out.
//
// # Files
//
// Open refuses, with a clear error and without writing to it, a file that is not a
// bbolt database (ErrNotStore), a bbolt database of another program or of another
// schema version (ErrNotStore), and a damaged one (ErrCorrupt): before opening an
// existing file for writing it opens it read-only and walks every page (bbolt's
// consistency check, O(file size)), so damage is reported at Open rather than as a
// panic later. A second process opening a file in use gets fence.ErrUnavailable
// after Options.Timeout.
//
// The lease log PATH-wal belongs to the file: move, copy and back up both
// together. After a clean Close the bbolt file alone is complete (Close folds the
// log into it), so a copy of it taken then opens without the log. Otherwise Open
// refuses a file whose log is missing (ErrCorrupt) rather than forget the leases
// and tokens the log held, and it refuses a log with a damaged header.
//
// Owners came after schema version 1 without changing it: a lease record carries
// its owner behind a flag bit only when the lease has one, so files and logs of
// earlier releases open as leases without owner, and an earlier release opens a
// file of this one as long as no lease with an owner is recorded in it (in the
// bbolt file, or in a log not folded by a clean Close); otherwise it refuses the
// file with ErrCorrupt ("lock record ... is malformed") and writes nothing, so
// no lease is lost. A lease's record loses its owner when the lease ends.
//
// Semaphores and shared locks came after schema version 1 without changing it
// either: a lock's record is what earlier releases wrote, so files with locks
// only open in either direction. A record of a semaphore or shared lock with
// live leases has a flag earlier releases do not know: they refuse such a file
// with ErrCorrupt ("lock record ... is malformed") and write nothing; once those
// leases end, the name's record is a lock's again.
package bolt
