// Package chaos runs fence under real faults and checks what it recorded.
//
// A run starts a real `fence serve` process (embedded bolt store in a temp data
// directory) and several worker processes (the fence binary in its hidden
// `fence chaos worker` mode). Each worker loops: acquire the lock (HTTP client),
// advance the key's fence to the lease's fence (so a paused predecessor is fenced off
// before the new holder reads), read the key, write value+1 with the lease's fence,
// release. Every operation is logged as one JSON line ([Op]) with invoke and complete
// times on the machine's monotonic clock, relative to the run's start.
//
// Nemeses inject faults while the workers run, each bounded in count and time:
//
//   - pause: SIGSTOP the current lock holder (found by matching the server's lock
//     token against the workers' logs, looked for again for up to a TTL until it is
//     inside its critical section; a random worker if none matches) for longer than
//     the TTL, then SIGCONT;
//   - kill: SIGKILL the `fence serve` process and restart it on the same port and
//     data directory;
//   - link: the workers reach the server through an in-process TCP proxy of this
//     package (toxiproxy is not available to this build) that injects latency (0.5
//     to 1.5 TTL per chunk forwarded), resets (every connection aborted with RST) and
//     cuts (a black hole for 3 TTLs, then a reset);
//   - failover: the locks come from a Redis primary (redis.Locker in the workers,
//     through a proxy), the fenced key stays in `fence serve`; the replica is cut off
//     from replication (REPLICAOF NO ONE), the workers go on for 2 TTLs, the primary
//     is killed and the proxy sent to the old replica, whose counter is behind. New
//     grants then carry regressed tokens: the key refuses them, and the worker heals
//     the counter (fence.Healer) with the highest token the refusal reported;
//   - member: `fence serve` runs with --store etcd:// on a 3-member etcd cluster
//     whose members are processes of the fence binary (its hidden `fence chaos
//     etcd-member` mode, an embedded etcd with a 500 ms election timeout); the
//     current leader (found through the members' Status) is killed with SIGKILL,
//     kept down for about 2 TTLs (at least etcd's 1 s minimum lease TTL) and
//     restarted on the same data directory;
//   - disk: fence serve's data directory is a small tmpfs of its own, filled and
//     freed;
//   - partition: every host (fence serve, each worker, each etcd member or Redis
//     server) runs in a network namespace of its own on a bridge (it needs root and
//     iproute2), and hosts are cut off from each other for 3 TTLs, frames dropped
//     silently so connects time out: on bolt fence serve from every worker, or the
//     lock holder from fence serve; on etcd the leader from the other members and
//     fence serve (a minority partition), or from the other members alone; on redis
//     the primary from its replica and the workers. The harness reaches every host
//     through a gateway veth, the one thing it adds to the machine's namespace.
//   - clock: the clock of one process steps forward or backward by several seconds
//     (a multiple of the TTL) and back: fence serve's on the bolt store (while it
//     runs, or while it is down before a restart on its data) or the lock holder's,
//     through the fault clock of a fence binary built with -tags faultclock (see
//     NemesisClock).
//   - crash: the database under `fence serve` is killed with SIGKILL, kept down for
//     about 2 TTLs and restarted on its data: with Config.Store postgres (fence serve
//     --store postgres:// on the run's own PostgreSQL, the counter a row of the same
//     database written through postgres.Guard) the postmaster and every backend,
//     while the workers write; with Config.Store zookeeper (fence serve --store zk://
//     on a 3-server ensemble, the counter in fence serve's KV on it) the leader, found
//     by the mode its srvr four-letter command reports.
//
// With Config.Store cluster there is no single fence serve: three `fence serve --node`
// processes form a cluster (each an embedded etcd member, the Raft timing of the etcd
// store's members), started together, each with its own data directory and log, and
// the workers are given the nodes' URLs. The nemeses act on the nodes: kill takes
// down the leader (found through GET /v1/cluster) or any node and restarts it with
// the same flags and data after about 2 TTLs; pause stops, every second fault with
// fencing on, a node rather than the holder; link puts a proxy before each node and
// slows or cuts one node's at a time; partition cuts the leader or a follower off
// from the other nodes (the workers still reach it), or the leader off from the
// nodes and the workers; clock steps the workers' clocks.
//
// The counter lives in the fenced KV of `fence serve`, or with Config.Resource
// ResourcePostgres in a PostgreSQL table whose row is written through
// postgres.Guard (the resource fence advanced in the same transaction as the row
// update; the fence step is Guard.Fence), so the checker judges the database's
// enforcement instead of the server's.
//
// [Check] then verifies the history: a linearizability check with porcupine of each
// key against a fenced-register model (a write is legal only if fence.Admit accepts
// its lease's fence against the highest fence accepted so far; a rejected write is
// legal only if Admit refuses it), and direct invariants: no stale write accepted,
// no acknowledged write lost (the counter the workers increment is at least the
// number of acknowledged increments, and the final read shows the last accepted
// write), no value of a rejected write ever read.
//
// Control runs (fencing off) must fail: the workers then skip the fence step and
// write with a token of a control lock that no worker holds, drawn (acquired and
// released) just before the write, which the server admits whenever it arrives
// later, exactly like a store that does not check tokens. (A token invented from
// the wall clock would be refused: a store that grants the locks refuses tokens it
// never issued. With the redis store, whose locks fence serve never grants, fence
// serve runs with --external-locks.) The history still records each write's real lease fence, so the checker
// judges it as a fenced write. A control run that finds no violation means the
// checker proved nothing, and [Run] reports that as a failure.
//
// [Matrix] (fence chaos --matrix) runs every store of [Stores] against every nemesis
// that applies to it ([Applies]), one run (a cell) each with that nemesis alone and
// fencing on, and per store one control cell (fencing off, pauses: [ControlNemesis],
// a hold of at least 100ms), one cell after another. It is driven by Stores and the
// stores' rows of applicable nemeses alone, so a store or nemesis added there joins
// the matrix with no change to it. A fenced cell passes when it injected at least
// one fault of its nemesis and the checker found no violation; a control cell when
// the checker found violations; a cell that could not run (a server binary missing)
// is an error that names what to install, never a skip. [FormatMatrix] writes the
// table: a row per cell with ops, acquisitions, faults, stale rejected, stale
// accepted, lost, linearizable, verdict, and the cell's seed, so that one cell can
// be run again alone.
package chaos
