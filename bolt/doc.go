// Package bolt is fence's embedded, durable store: a fence.Locker (with
// fence.Healer and fence.Inspector) and a fenced key-value store (fence.KV and
// fence.Guard) in one bbolt file. It is the default store of `fence serve`, which
// opens DIR/fence.db.
//
//	st, err := bolt.Open("fence.db", nil)
//	...
//	lease, err := st.Acquire(ctx, "payments", 30*time.Second)
//	...
//	err = st.Put(ctx, "ledger/42", data, lease.Fence())
//
// # Durability without one fsync per acquisition
//
// Leases live in memory: a map from name to a compact entry, an expiry heap (one
// clock timer for the earliest expiry, so expired leases are reclaimed in
// O(log n) each, never by scanning) and a per-name channel that wakes waiters at
// once on Release and on expiry. What must survive kill -9 is made durable ahead
// of time, by a single background flusher that group-commits to the file:
//
//   - Tokens (P1). One counter serves all names (tokens need only increase per
//     name, and a global counter is the simplest way to make that hold across
//     crashes). The file stores a ceiling C; tokens up to C may be handed out,
//     and none above C is handed out before C is on disk. When the counter comes
//     within half a block of C, the flusher raises C by Options.TokenBlock in the
//     background, so acquisitions rarely wait. After a crash the counter restarts
//     at C+1: tokens skip values (allowed), never repeat or go down.
//
//   - Leases (P6). A lease whose TTL is at most Options.SyncTTL is covered by a
//     durable lease horizon H, a wall-clock time after which no such lease
//     expires. A grant whose expiry would pass H waits for the flusher to write a
//     later H (H is pushed Options.HorizonChunk past the grant, and pushed ahead in
//     the background when a grant comes within half a chunk of it). After a crash,
//     Open refuses every grant (fence.ErrNotAcquired with a *fence.HeldError, or a
//     wait with fence.WithWait) until H has passed: at most SyncTTL+HorizonChunk.
//     A lease with a longer TTL is written to the file (group commit) before
//     Acquire or Renew returns, and so is its Release; after a crash it is
//     restored and honoured until its own expiry.
//
//   - A clean Close writes every held lease to the file and lowers H, so a store
//     closed cleanly reopens with its leases and without a grace period.
//
//   - Each name's last token is written behind for Inspect and List when its
//     lease ends (every Options.FlushInterval), and then the name leaves memory.
//     After a crash LastToken may lag (or be 0 for a name whose short lease was
//     never released); the next grant's token is still above every token handed
//     out before the crash, since it comes from the ceiling.
//
// Heal raises the one counter, so it raises the next token of every name. That is
// allowed (tokens only increase) and keeps Heal durable with the same ceiling. A
// store never regresses, so guards have no reason to report a token above its
// counter; but note that Heal(name, fence.MaxToken) exhausts every name (the store
// fails closed with fence.ErrTokenExhausted).
//
// The horizon and written leases are wall-clock times: if the system clock jumps
// forward across a restart, the grace period (and written leases) are shortened by
// the jump, and leases granted before the crash may be granted again early; a jump
// backward lengthens them. While the process runs, expiry is measured with the
// monotonic clock. Keep the clock synchronised (NTP slews, it does not jump).
//
// # Costs
//
// An acquisition or release of a lease of at most SyncTTL takes one mutex and
// touches the lease map and the expiry heap (O(log n)); it waits for no write. The
// flusher writes in the background: the ceiling every TokenBlock/2 tokens, the
// horizon every HorizonChunk/2 of time, ended leases' last tokens every
// FlushInterval. A store holding a million
// leases keeps about 160 bytes per lease (BenchmarkHeldLeases; each *fence.Lease
// a caller holds adds about 600 more). The file keeps one small record per lock
// name ever used (its last token), as counters of other backends do.
//
// # Fenced key-value store
//
// Put checks the fence with fence.Admit and stores the value and its fence in one
// bbolt transaction, durable (fsync) when Put returns; concurrent writers share
// commits through bbolt's db.Batch. Values are at most MaxValueLen bytes; keys
// follow fence.ValidateKey. Guard.Fence advances a key's fence and keeps its value.
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
package bolt
