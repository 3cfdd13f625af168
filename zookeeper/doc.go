// Package zookeeper is a fence.Locker on ZooKeeper (github.com/go-zookeeper/zk).
//
// # The recipe
//
// Each lock name has a persistent directory znode under Options.Root (default
// /fence/locks). The name is encoded into one znode name: ASCII letters, digits, '-' and
// '_' stay, every other byte (including '/', '.', '%', spaces and UTF-8) becomes %XX, so
// "jobs/nightly" lives in /fence/locks/jobs%2Fnightly. Directories are never deleted:
// one small znode per lock name ever used.
//
// Acquire creates an ephemeral sequential node "n-<tag>-<sequence>" in the directory,
// in the Locker's ZooKeeper session. The node with the lowest sequence holds the lock;
// every other node is a waiter and watches only its predecessor (no herd: a release
// wakes one client), so grants are FIFO. A waiter whose Acquire ends (wait over,
// context done) deletes its node. The tag is derived from the lease id's secret by
// SHA-256, so readers of the tree see which node is whose without learning the lease
// id; the lease id is "<secret>-<sequence>", which names the node directly, so Renew
// and Release cost no search. The tag also lets Acquire find its own node again when
// the connection drops in the middle of the create, so no orphan blocks the lock.
//
// # Fencing token: the czxid
//
// The token is the lock node's czxid, the zxid of the transaction that created it.
// zxids are assigned by the leader in commit order and only increase, across leader
// changes too: the high 32 bits are the leader's epoch, which every election raises.
// Since grants follow creation order (the lowest node is granted first), every grant's
// token is above every earlier grant's (P1). The sequence suffix is not used as a token:
// it is a 32-bit counter per directory that restarts if the directory is deleted and
// recreated.
//
// A zxid above fence.MaxToken (2^53-1), that is an epoch above 2^21 (two million leader
// elections), fails closed: Acquire deletes its node and returns
// fence.ErrTokenExhausted. Tokens are sparse: they skip the zxids of every other write.
//
// # TTL, expiry and whose clock
//
// ZooKeeper has no per-node TTL that fits (TTL nodes cannot be ephemeral), so the fence
// TTL is kept in the holder's node data ("h <ms>") and counted from the node's mtime, the
// ZooKeeper leader's wall-clock time when the node was created or last renewed. Renew
// rewrites the data (a new mtime). The waiter right behind the holder reads the
// holder's mtime and TTL and the leader's current time (the mtime of a write to the lock
// directory, which nobody watches), and deletes the holder's node once the leader's
// millisecond clock is past mtime+TTL, with a version check so that a renewal in
// between wins. It sleeps until then; when that timer fires it reads the leader's
// clock and deletes straight away (the version check covers a renewal meanwhile),
// then takes the lock without listing the directory again, so a holder that never
// releases is replaced a few round trips after its TTL. So P6 holds by the
// ZooKeeper leader's clock: a lock is never granted before mtime+TTL by that clock. If
// a new leader's clock is behind the old one's, a lease can last longer by the skew; if
// ahead, shorter by the skew. Keep the ensemble's clocks synchronised (NTP), and fence
// every write anyway. Waiters' nodes have data "w" and no TTL: they last as long as the
// session, which the client keeps alive.
//
// # Owner and revoke
//
// The owner an acquire names (fence.WithOwner) follows in the node's data: "h <ms>
// <owner>" for a holder, "w <owner>" for a waiter, so Inspect and List report it
// (Renew keeps it); the lease id never appears. Without an owner the data is exactly
// "h <ms>" or "w", as versions before owners wrote, and such data reads as owner "".
// A version before owners reads a holder's data with an owner as a waiter's (it cannot
// parse the TTL): its waiters never judge that holder expired and wait for its release
// or its session's end, its Inspect reports it held with no expiry, and its Renew of
// such a lease (by lease id) returns fence.ErrNotHeld and leaves the node; its
// Release works. No safety is lost, only the takeover at expiry. Upgrade every client
// before acquires name owners.
//
// Revoke (fence.Revoker) deletes the lowest node, judged as Inspect does, with the
// data version it read: a renewal in between makes it judge again, and a later grant,
// always another node, is never deleted. The waiter behind it is woken by its watch,
// as by a Release. A promoted waiter that has not claimed yet counts as held (as
// Inspect reports it): revoking it makes its Acquire start over with a new node.
//
// A holder whose TTL passed but that no waiter took over is still the lowest node:
// Renew notices (the new mtime is past the old mtime+TTL), deletes the node and returns
// fence.ErrNotHeld. Release of such a lease returns nil.
//
// # Session and lease: which one closes Done
//
// All grants of a Locker live in its connection's session. The client heartbeats the
// session; a disconnect is SUSPENDED (the session may still be alive: the nodes stay,
// nothing changes) until it outlasts the session timeout as measured by the client,
// which is LOST. Done closes on LOST and on session expiry reported by the server,
// because from then on the ephemeral node is gone or about to be, and another client
// may hold the lock. It does not close on SUSPENDED: the next server may still have the
// session, and closing on every blip would end leases that were never in danger.
// Independently, Done closes at the lease's local deadline (the time the acquire or
// renewal was sent plus the TTL) as for every fence.Lease, which is never later than the
// server-side expiry. Done is advisory: only the guard's token check makes writes safe.
//
// Session loss is watched through the event channel of zk.Connect, which Open wires in;
// a Locker made with NewLocker and a nil channel learns of it only when Renew finds the
// node gone.
//
// # Watching
//
// Watch (fence.Watcher) follows a lock through a ZooKeeper child watch on its
// directory: grants, releases, revokes and takeovers all create or delete a node
// there, so the server signals them itself, whatever version of this package made
// them, and nothing on the acquire path writes more. An expiry that no waiter took
// over changes no node: it is read at the holder's expiry by the leader's clock. A
// Locker keeps one watch and one goroutine per lock name watched, however many watch
// it, and its watchers of a name share the read after each change; the watch is
// never a data watch on the directory, whose data Inspect writes to read the
// leader's clock. A disconnect within the session keeps the watch (the client sets
// it again and the server fires it for what changed meanwhile); a session that ends
// drops it, and every watcher subscribes again in the new session. LastToken is the
// directory's pzxid, so a waiter joining or leaving also moves the change index:
// watchers may see the same holder again with a greater LastToken.
package zookeeper
