/**
 * Client of `fence serve`, fence's lock server: fenced locks whose grants carry
 * fencing tokens, and the fenced key-value store, over the HTTP API v1.
 *
 * ```js
 * import { FenceClient } from "@fencelock/fence";
 * const fence = new FenceClient(); // $FENCE_SERVER or http://127.0.0.1:7420
 * await fence.withLock("report", async (lease, signal) => {
 *   await fence.kv.put("ledger", "balance=100", lease); // refused if a later holder wrote
 * });
 * ```
 *
 * A semaphore of 3 permits: at most three holders at once, each with a slot in
 * [0, 3) whose resource the lease fences (`shared: true` asks for a shared lease
 * instead):
 *
 * ```js
 * await fence.withLock("exports", async (lease) => {
 *   await fence.kv.put(`export-${lease.slot}`, "batch 7", lease);
 * }, { limit: 3 });
 * ```
 *
 * Follow a lock, or an election's leader, as it changes (blocking queries):
 *
 * ```js
 * for await (const leader of fence.observeLeader("scheduler", { signal })) {
 *   console.log(leader.leading ? `${leader.owner} leads, epoch ${leader.epoch}` : "no leader");
 * }
 * ```
 *
 * @module
 */
export { FenceClient, KV, DEFAULT_SERVER, type FenceClientOptions, type AcquireOptions, type ListOptions, type WithLockOptions, type FenceSpec, type WriteOptions, type KVItem, type LockInfo, type Holder, type WatchedLockInfo, type WatchOptions, type Leader, type Value, } from "./client.js";
export { Lease, type FenceHeaders, type LeaseInit, type LeaseOps } from "./lease.js";
export { FenceError, InvalidError, UnauthorizedError, NotFoundError, HeldError, LimitMismatchError, StaleTokenError, WrongLockError, UnissuedTokenError, LeaseRequiredError, TokenExhaustedError, NotHeldError, LeaseReleasedError, LeaseExpiredError, TooLargeError, NotImplementedError, UnavailableError, type FenceErrorCode, } from "./errors.js";
