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
// implementation passes.
//
// # Limits
//
//   - Lock names and resource keys: 1 to [MaxNameLen] (255) bytes of valid UTF-8 with no
//     control characters.
//   - TTLs: [MinTTL] (1ms) to [MaxTTL] (24h), in whole milliseconds. A lease's deadline is
//     never later than the backend's expiry, but a backend may keep a lock longer than
//     its TTL, which delays the next holder when a holder never releases: etcd keeps
//     it at least its minimum lease TTL (2s with etcd's default timing) and revokes
//     expired leases every 500ms, so a 100ms lease is handed over about 2.4s after its
//     deadline. Bolt, inmem, Redis, PostgreSQL, ZooKeeper and the HTTP server on them
//     hand over within a few milliseconds of the TTL.
//   - Tokens: 1 to [MaxToken] (2^53-1, so they survive JSON numbers and Lua doubles);
//     0 is never a valid token.
//   - Lease ids: 1 to [MaxLeaseIDLen] (128) bytes of printable ASCII; the ids fence
//     makes carry 128 random bits.
package fence
