// Package fence is the domain of fence: distributed locks whose every grant carries a
// fencing token, and guards that make the protected resource enforce those tokens.
//
// A lock holder can pause (GC, VM stall, network delay) past its lease and then write
// while the next holder writes too. No TTL fixes that. Fencing tokens do: each
// acquisition of a lock gets a [Token] greater than every earlier one for that lock name,
// every write carries it, and the resource stores the highest token it has accepted and
// rejects lower ones. Correctness is enforced by the resource ([Guard], [KV]), not by the
// lock service ([Locker]).
//
// This package holds the types and interfaces only and imports nothing outside the
// standard library. Implementations live in sub-packages named after what they wrap: inmem (the
// reference, for tests and the simulator), bolt (embedded and durable, the default),
// and the network backends. The fencetest package is the conformance suite every
// implementation passes. Backend authors use package driver; the few names here that
// only they need ([NewLease], [LeaseConfig], the fields of [AcquireOptions]) say so,
// and the validators ([ValidateName] and the others) check what every backend checks.
//
// # Semaphores and shared locks
//
// A name can also be a counting semaphore ([WithLimit]) or a shared lock
// ([WithShared]); every grant still takes a token from the name's one counter
// (P8), so the same guards fence them.
//
//   - A semaphore of N grants at most N unexpired leases at once. Each has a slot
//     in [0, N) ([Lease.Slot]); no two unexpired leases share a slot. Fence a
//     resource per slot (partition 3, connection 3): a holder of slot 3 that paused
//     past its TTL is refused once the next holder of slot 3 writes or fences. A
//     resource shared by several slots cannot be fenced per holder.
//   - Every acquirer of a name agrees on N: an acquire with another limit while
//     leases are live fails with a [LimitError] (matching [ErrInvalid]).
//   - A shared lock has any number of shared holders (at most [MaxLimit]) or one
//     exclusive holder. Exclusive waiters are preferred: while one waits, new shared
//     acquires find the lock held, so readers cannot starve a writer.
//   - Release, Renew, expiry, ownership (P5), exclusivity (P6, per slot), the
//     lost-lease signal (P7), waiting woken by a release and a durable store's
//     restart hold as they do for locks. Revoke ends every live lease on the name.
//   - A Locker declares them in [Features]; one that lacks a kind returns
//     [ErrNotImplemented].
//
// # Healing a regressed counter
//
// A counter that went backwards (a Redis failover that lost increments, a store
// restored from a backup) hands out tokens a guard has already accepted; the
// guard refuses them with a [StaleTokenError] carrying its highest token, and
// [Heal] (a [Healer]) raises the name's counter past it (P4). A heal raises
// only its own name's tokens, never another name's, and by at most
// [MaxHealAhead] (2^32) above the name's last token: a larger seen is refused
// with a [HealBoundError] (matching [ErrInvalid]; over HTTP, 400 with the last
// token and the bound) and changes nothing. So no client, whatever it sends and
// whatever names its token may act on, can exhaust the tokens of another name,
// nor burn its own name's in one request (P9).
//
// A regression larger than the bound is an operator's matter: first check that
// the guards' highest tokens are real (that they came from this store's grants,
// not from a typo or a forged fence: P9 refuses those on the stores that keep
// the resource), then heal in steps, each at most MaxHealAhead above the last
// token the refusal reported:
//
//	for {
//		err := h.Heal(ctx, name, seen)
//		var b *fence.HealBoundError
//		if !errors.As(err, &b) {
//			return err // nil: healed
//		}
//		if err := h.Heal(ctx, name, b.Last+fence.MaxHealAhead); err != nil {
//			return err
//		}
//	}
//
// or with `fence` over HTTP, POST /v1/locks/NAME/heal with seen at most last +
// 4294967296 (the "last" and "bound" of the 400 answer), repeated. Each step
// uses up that many tokens of the name; the name has 2^53-1 in all.
//
// # Limits
//
//   - Lock names and resource keys: 1 to [MaxNameLen] (255) bytes of valid UTF-8 with no
//     control characters.
//   - TTLs: [MinTTL] (1ms) to [MaxTTL] (24h), in whole milliseconds. A lease's deadline is
//     never later than the backend's expiry, but a backend may keep a lock longer than
//     its TTL, which delays the next holder when a holder never releases: etcd keeps
//     it at least its minimum lease TTL (2s with etcd's default timing) and revokes
//     expired leases every 500ms (see package etcd). Bolt, inmem, Redis, PostgreSQL,
//     ZooKeeper and the HTTP server on them hand over within a few milliseconds of
//     the TTL.
//   - Tokens: 1 to [MaxToken] (2^53-1, so they survive JSON numbers and Lua doubles);
//     0 is never a valid token.
//   - Semaphore limits: 1 to [MaxLimit] (1024) permits; at most MaxLimit shared
//     holders of a lock at once.
//   - Lease ids: 1 to [MaxLeaseIDLen] (128) bytes of printable ASCII; the ids fence
//     makes carry 128 random bits.
//   - Write attempt ids ([WithWriteAttempt]): 1 to [MaxAttemptIDLen] (64) bytes of
//     printable ASCII; a KV remembers the newest [MaxWriteAttempts] (32) per key
//     under the key's fence.
package fence
