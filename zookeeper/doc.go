// Package zookeeper is a fence.Locker on ZooKeeper (github.com/go-zookeeper/zk),
// with semaphores (fence.WithLimit), shared locks (fence.WithShared),
// fence.Inspector, fence.Revoker and fence.Watcher, and a fenced KV ([KV]).
//
//	l, err := zookeeper.Open([]string{"127.0.0.1:2181"}, nil) // or NewLocker(conn, events, opts)
//	lease, err := l.Acquire(ctx, "reconcile", 30*time.Second, fence.WithWait(time.Minute))
//
// [OpenStore] makes a [Store], a Locker and a KV that refuses unissued tokens:
// what `fence serve --store zk://...` runs on.
//
// # The recipe
//
// Each lock name has a persistent directory znode under [Options].Root (default
// [DefaultRoot]; the name is percent-encoded into one znode name, and
// directories are never deleted). Acquire creates an ephemeral sequential node
// in it, in the Locker's ZooKeeper session; the lowest node holds the lock and
// every other waits, watching only its predecessor, so a release wakes one
// client and grants are FIFO. Semaphore permits and shared leases queue in the
// same directory: the holding group is the lowest node if it is a lock, or the
// run of nodes of its kind that follows it (up to N permits, or
// fence.MaxLimit shared leases). A shared acquire made while an exclusive one
// waits queues behind it, so readers cannot starve a writer. An acquire whose
// limit is not the holding group's fails with a *fence.LimitError.
//
// # Tokens
//
// The token is the lock node's czxid, the zxid of the transaction that created
// it. zxids only increase, across leader changes too, and grants follow
// creation order, so every grant's token is above every earlier grant's (P1).
// Tokens are sparse (they skip the zxids of other writes). A zxid above
// fence.MaxToken (an epoch above 2^21, two million leader elections) fails
// closed with fence.ErrTokenExhausted.
//
// # TTL, expiry and whose clock
//
// ZooKeeper has no per-node TTL that fits, so the TTL is kept in the holder's
// node data and counted from the node's mtime, the ZooKeeper leader's clock. The
// waiter first in line deletes the holder's node once the leader's clock is
// past mtime+TTL (a renewal in between wins), so a holder that never releases
// is replaced a few round trips after its TTL. P6 thus holds by the leader's
// clock: if a new leader's clock is behind the old one's, a lease can last
// longer by the skew; if ahead, shorter. Keep the ensemble's clocks
// synchronised (NTP), and fence every write anyway.
//
// All grants of a Locker live in its session. Done closes at the lease's local
// deadline, when the session is LOST or expired (the ephemeral node is gone or
// about to be), but not on a disconnect the session may survive (SUSPENDED).
// Session loss is watched through zk.Connect's event channel, which Open wires
// in; a Locker made by NewLocker with a nil channel learns of it only when Renew
// finds the node gone. A holder whose TTL passed but that no waiter took over
// gets fence.ErrNotHeld from Renew.
//
// Revoke deletes the holding group's nodes, each with the data version it
// read, so a later grant is never deleted. Watch follows a lock through a child
// watch on its directory; its LastToken is the directory's pzxid, so a waiter
// joining or leaving also moves it.
//
// # Fenced KV and issued tokens
//
// [KV] keeps each key as a znode with a JSON record of the value and the highest
// fence, written by a read-Admit-compare-and-set loop; values are at most
// [MaxValueSize] bytes. Delete keeps the key's fence (a stale writer is still
// refused); Purge removes value and fence, the one way a key's fence goes back.
//
// A Store's KV refuses, with a *fence.UnissuedTokenError and nothing written, a
// fence its Locker did not issue (P9), within a bound: ZooKeeper keeps no record
// of a name's last token, so the KV reads the directory and takes as the last
// token L the holding lock's czxid, else the czxid of the first node behind the
// holding group less one, else the directory's pzxid. A fence is refused for a
// name never acquired, a token above L (so a waiter's token until it is
// granted), or a lease id that is not that of the holding node with its token;
// and, with a *fence.LeaseRequiredError, a fence without a lease id whose token
// is a holding node's (stored without a lease, it would refuse that lease's own
// writes). An expired lease's node can outlive its expiry (until its session
// ends or the next acquire takes it over), and its token alone is refused that
// much longer, never shorter; once the node is gone, the token alone is
// admitted as fence.Admit admits it.
// What the bound admits that an exact record would not: a token at or below L
// that was no grant's; while semaphore permits or shared leases hold the name,
// such a token can fence a key off from the current holders until the name's
// next grant. A KV made by [NewKV] checks no issuance.
//
// # Limits and errors
//
// Versions before owners read a holder's data with an owner as a waiter's and
// never take it over at expiry: upgrade every client before acquires name
// owners (fence.WithOwner). Errors wrap the fence sentinels: ZooKeeper
// unreachable, or nodes that kept changing under a call, is
// fence.ErrUnavailable; any call after Close is fence.ErrClosed.
//
// The recipe in detail (node names, slots, waking, the issued-token bound) is
// in docs/zookeeper.md in the repository.
package zookeeper
