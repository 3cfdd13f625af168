// Package sim is fence's deterministic discrete-event simulator: it replays the
// races that fencing tokens exist for, tick for tick, and shows what the library
// does about them.
//
// It drives the real reference implementation (package inmem: its Locker, Guard and
// ManualClock), not a simplified copy of the logic, so a timeline shows what the
// library does. Workers, pauses, lease expiry, renewals, writes, network delay, a
// lock-server clock jump and a lock-service failover that loses recent increments
// are events on a virtual clock; randomness comes from a seeded math/rand/v2 source
// passed explicitly. Nothing reads the wall clock, lease ids are shown as labels
// ("A1" is worker A's first lease) and no output depends on map order, so the same
// scenario, fencing mode and seed always give byte-identical output.
//
// Simulate runs a scenario (see Scenarios) and returns a Report; WriteText,
// WriteJSON, WriteMermaid and WriteSVG render it. With fencing off, writes go to the
// resource unconditionally, as with a TTL-only lock; with fencing on they go through
// an inmem.Guard, which rejects stale tokens. CheckWrites is the invariant the
// random scenario checks: per resource, accepted writes carry strictly increasing
// tokens, equal only within one lease.
//
// Scenario semaphore-pause does the same for a semaphore (fence.WithLimit): a
// permit holder pauses past its TTL, and with fencing on each slot's resource has
// its own guard, as fence.WithLimit says a semaphore's resources are fenced.
//
// Virtual time is counted in ticks of one second (Tick) from T0.
package sim
