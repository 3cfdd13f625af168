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
// # Semaphores and shared locks
//
// The Locker declares fence.Features{Semaphores: true, Shared: true}. Every kind
// queues in the same directory, so the kinds of a name are ordered by one
// sequence and share the czxid as token. A node's name says its kind between the
// tag and the sequence: "n-<tag>-<seq>" a lock, "n-<tag>-r-<seq>" a shared lease,
// "n-<tag>-l<N>-<seq>" a permit of a semaphore of N (a version before these
// kinds reads all three as lock nodes, and waits for them). One listing of the
// directory tells who holds: the holding group is the lowest node alone if it is a
// lock, or else the run of nodes of its kind that follows it, up to N for a
// semaphore and fence.MaxLimit for shared leases. A node holds while it is in the
// group. Nodes join only at the end, so a member stays one until it is deleted,
// at most N permits are ever held, and every grant's czxid is above every earlier
// grant's, whatever their kinds: a member was created before every node behind it.
//
// A permit's slot is the ephemeral node "s-<k>" in the directory (data: its
// holder's node name), created in one transaction (multi) with its holder's data
// "H <ms> <k> [owner]": of two acquires that try slot k, one fails and takes the
// next. Release, Revoke, a takeover after expiry and Renew's end of an expired
// permit delete the holder's node and its slot node in one transaction, and a
// session's end deletes both, so a slot is taken exactly while its holder's node
// exists. The permit's lease id ends in "-s<k>", so Release needs no read. A
// permit takes the lowest slot that no live lease has: before it takes one above
// a taken slot it judges the other holders by the leader's clock and takes over
// those whose TTL passed (two round trips more, only then, and not if it judged
// them live moments before while waiting). Permits claim in queue order: one whose
// predecessors in the group have not all taken their slots (the slot nodes are
// fewer) waits for the last of them to, by a watch on its data, so each slot's
// holders have rising tokens and a slot's guard never refuses its current holder.
// This is Curator's InterProcessSemaphoreV2 without its internal mutex: acquirers
// queue in the one directory instead, and the slot nodes keep permits apart.
//
// An acquire whose limit (1 for a lock or a shared lease) is not the holding
// group's fails with a *fence.LimitError while a member is live; expired members
// are taken over first, and the acquire's node is deleted. So kinds meet only as
// the rules of the driver package allow: locks and shared leases, or permits of
// one limit.
//
// Waking: the node right behind the group (first in line) judges every member's
// TTL by the leader's clock and sleeps until the expiry that could let it in (the
// last for a lock, the first for a permit or a shared lease). A lock, and any
// waiter behind a group of one, watches its predecessor; a permit or a shared
// lease behind a larger group sets one child watch on the directory, since any
// member's end lets it in. Further back, a waiter watches its predecessor (whose
// deletion or claim may put it first in line), except that a shared waiter
// watches the nearest node before it that is not shared: when that exclusive node
// goes, every shared waiter behind it up to the next exclusive one is woken and
// granted together, as Curator's InterProcessReadWriteLock grants readers.
//
// Writer preference, and how it maps onto the rules of driver.Decide: a shared
// node behind an exclusive node is not in the holding group, so a shared acquire
// made while an exclusive acquire waits queues behind it and finds the name held;
// a stream of readers cannot starve a writer. Where driver.Decide keeps a record
// of the exclusive waiter until its try plus min(TTL, wait left), here the record
// is the waiter's node: it lasts exactly as long as the waiting call, and ends at
// once when the call gives up (its node is deleted), or when its session ends if
// its process died (within the session timeout, not the TTL). The queue also
// orders what driver.Decide leaves free: an exclusive waiter holds off the shared
// acquires behind it whatever holds the name (Decide records it only while shared
// leases hold), so when an exclusive holder leaves, the shared waiters before the
// next exclusive waiter are granted, and those behind it wait for it. And an
// exclusive acquire that only tries once (no wait) has a node for the round trip
// of its try, so a shared try at that instant may find the name held. None of this
// loosens a rule: at most one exclusive holder or up to fence.MaxLimit shared
// ones, no shared grant while an exclusive acquire waits, tokens rising in grant
// order.
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
// Revoke (fence.Revoker) deletes every node of the holding group (for a lock, the
// lowest), judged as Inspect does, each with the data version it read: a renewal
// in between makes it judge again, and a later grant, always another node, is
// never deleted. The waiters behind are woken by their watches, as by a Release. A promoted waiter that has not claimed yet counts as held (as
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
//
// # Fenced KV and issued tokens
//
// KV keeps each key as a znode with a JSON record (see KV). Delete clears the
// record's value and writer and records the fence, in the same read-Admit-CAS loop
// as Put, so the fence stays (a stale writer is still refused; Get returns a nil
// value with it) and a key holding no value is fence.ErrNotFound, after the fence
// checks. Purge (fence.Purger) deletes the znode, value and fence: the one way a
// key's fence goes back.
//
// A Store's KV refuses, with a *fence.UnissuedTokenError and nothing written, a
// Put, Delete or Fence whose fence its Locker did not issue (P9), within a bound,
// because ZooKeeper keeps no record of the last token a name was issued: a grant
// here is not a write but a node reaching the front of the queue, so the czxid of
// every node ever created in the name's directory is a candidate, and most are
// waiters' that gave up. No such record is written either: it would be a quorum
// write per grant after the grant, not part of it, so a holder whose process died
// between the two would hold a token the record does not have, and every acquire
// would pay a round trip more. Instead each write first reads the directory (its
// children and pzxid) and the holding group's nodes, and takes as the name's last
// token L:
//
//   - the czxid of the holder, when a lock (not a semaphore or shared lease)
//     holds the name: the name's last grant, exactly;
//   - else the czxid of the first node behind the holding group, less one: no
//     node behind a waiter has been granted;
//   - else (no node waits) the directory's pzxid: the zxid of its last child
//     created or deleted, at or above every czxid it ever had.
//
// A fence is refused when the name has no directory (never acquired; Last 0), when
// its token is above L (so a waiter's token is refused until it is granted, and a
// token of the future always), or when it has a lease id and a node of the holding
// group has its token but is not the lease's node, or is the lease's node with
// another token (OtherLease). What the bound admits that a store with a
// last-token record would not: a token at or below L that was no grant's, the zxid
// of another write. While a lock holds the name no such token is above the
// holder's, so none can fence a key off from it; while semaphore permits or shared
// leases hold it, one between their tokens and L can fence a key off from the
// current holders until the name's next grant, whose token is above L; while
// nothing holds it, nobody is fenced off. A lease that ended leaves no node, so
// its token is admitted with any lease id (the key's own fence still refuses an
// equal token under another lease once written). The reads come before the
// conditional write, not in one transaction (a ZooKeeper multi compares data
// versions only): that is as safe, since L only grows, a waiter's node is above it
// and every node created later is above the pzxid read. A KV made by NewKV checks
// none of this: it guards with the tokens of any lock.
package zookeeper
