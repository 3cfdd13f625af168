import { UnavailableError } from "./errors.js";
import { Lease } from "./lease.js";
/** The server a client talks to when neither the options nor FENCE_SERVER name one. */
export declare const DEFAULT_SERVER = "http://127.0.0.1:7420";
/** Options of a {@link FenceClient}. Every field is optional. */
export interface FenceClientOptions {
    /**
     * The server: `http://HOST:PORT` or `https://HOST:PORT` (a path prefix is kept), or
     * a bare `HOST:PORT` for `http://HOST:PORT`; a comma-separated list names several
     * servers of one cluster, which the client fails over between (see
     * {@link FenceClient}). Default: `$FENCE_SERVER` (which may be such a list), else
     * http://127.0.0.1:7420.
     */
    server?: string;
    /** More servers of the same cluster, tried after those of `server`. */
    servers?: string[];
    /** The bearer token sent as `Authorization: Bearer TOKEN`. Default: `$FENCE_AUTH_TOKEN`. */
    authToken?: string;
    /** The bound of one request, all its attempts together, beyond its long poll, in ms. Default 30000. */
    requestTimeoutMs?: number;
    /**
     * The bound of one attempt of a request on one server, beyond its long poll, in ms:
     * when it passes, the request moves to the next server. Default: requestTimeoutMs
     * with one server, 5000 (or requestTimeoutMs if shorter) with several.
     */
    attemptTimeoutMs?: number;
    /** The longest wait asked of the server in one long poll, in ms; a longer wait is several polls. Default 30000. */
    maxPollMs?: number;
}
/** Options of {@link FenceClient.acquire}. */
export interface AcquireOptions {
    /** The lease's TTL in ms, 1 to 86400000. Default 30000. */
    ttlMs?: number;
    /** How long to wait for the lock, in ms: 0 (the default) tries once, Infinity waits until acquired. */
    waitMs?: number;
    /** Aborts the wait: acquire then rejects with the signal's reason. */
    signal?: AbortSignal;
    /** Renew the lease every ttl/3 until it is released or lost. Default true. */
    autoRenew?: boolean;
    /**
     * Who takes the lease (`"HOST:PID COMMAND"`, a job id): at most 256 bytes of printable
     * UTF-8, reported by {@link FenceClient.inspect} while the lease is held. A label for
     * people, not a credential. Sent only when set; "" or none: no owner.
     */
    owner?: string;
    /**
     * Takes a permit of a semaphore of `limit` permits, an integer 1 to 1024: at most
     * `limit` leases on the name at once, each with a {@link Lease.slot} in [0, limit)
     * and a token from the name's one counter, so a resource per slot is fenced as a
     * lock's resource is. Every acquirer of a name must use the same limit while leases
     * are live ({@link LimitMismatchError} otherwise). 1 (or none) is a lock. Sent only
     * when above 1.
     */
    limit?: number;
    /**
     * Takes a shared lease: any number of shared holders (at most 1024), or one
     * exclusive holder (an acquire without `shared`). While an exclusive acquire waits,
     * new shared acquires find the lock held, so readers cannot starve a writer. Not with
     * a limit above 1. Sent only when true.
     */
    shared?: boolean;
    /**
     * Names this acquire across its retries: 1 to 128 bytes of printable ASCII without
     * spaces. While the name has a live lease granted under it, a retry answers with that
     * lease instead of a second one (where the server's store keeps request ids: the
     * embedded store, etcd, cluster mode). Default: 128 random bits, the same on every attempt and poll of the
     * call. Whoever knows a live grant's request id gets its lease: keep it secret.
     */
    requestId?: string;
}
/** Options of {@link FenceClient.withLock}: those of acquire, but waitMs defaults to Infinity. */
export interface WithLockOptions extends AcquireOptions {
}
/** The fence of a write: the lock whose counter issued the token, the token, and optionally the lease id. */
export interface FenceSpec {
    /** The lock's name. */
    lock: string;
    /** The fencing token. */
    token: number;
    /** The lease id; without it, a write with a token equal to the key's highest is refused. */
    lease?: string;
}
/** Options of a write to the fenced store ({@link KV.put}, {@link KV.delete}). */
export interface WriteOptions {
    /**
     * The attempt id of the write (sent as Fence-Attempt): 1 to 64 bytes of printable
     * ASCII without spaces, the same on every attempt of one logical write, so that the
     * attempt that reaches the store first claims it and a late one writes nothing: a
     * slow first attempt never replaces a write made after its retry. Default: 128 random
     * bits, the same on every attempt of the call. Give your own to retry a write across
     * calls or processes.
     */
    attempt?: string;
}
/**
 * A key of the fenced store: its value, and its fence (the lock and the highest token
 * the key has admitted: the last write's, or a later fence's or delete's).
 */
export interface KVItem {
    /**
     * The value's bytes; null when the key holds no value but is fenced (it was only
     * fenced with {@link KV.fence}, or its value was deleted with {@link KV.delete}).
     */
    value: Uint8Array | null;
    /** The key's fencing token. */
    token: number;
    /** The lock that fences the key. */
    lock: string;
    /** Returns the value decoded as UTF-8 ("" when there is none). */
    text(): string;
}
/** Options of {@link FenceClient.list}. Every field is optional. */
export interface ListOptions {
    /** Only the locks whose names start with this (a valid lock name). Default: all. */
    prefix?: string;
    /** At most this many locks, 0 to 10000; 0 (the default) is no limit. */
    limit?: number;
    /**
     * Also the free names the server's store knows (held false, with their last token).
     * Default false: held locks only.
     */
    all?: boolean;
}
/**
 * The state of a lock, as {@link FenceClient.inspect} returns it. For a semaphore or
 * a shared lock with live leases, token, owner and expiresInMs describe the holder
 * with the highest token, and holders lists them all.
 */
export interface LockInfo {
    name: string;
    held: boolean;
    /** The current holder's token (0 when not held). */
    token: number;
    /** The current holder's owner ({@link AcquireOptions.owner}); "" when not held or the holder named none. */
    owner: string;
    /** The last token granted (0 if never). */
    lastToken: number;
    /** What the holder's lease has left, in ms (0 when not held). */
    expiresInMs: number;
    /** The semaphore's limit while it has live permits; 0 for a lock (or a free name). */
    limit: number;
    /** True while shared leases hold the lock. */
    shared: boolean;
    /**
     * Every live lease of a semaphore (in slot order) or of a shared lock (in token
     * order); empty for a lock held exclusively, or not held.
     */
    holders: Holder[];
}
/** One live lease of a semaphore or a shared lock, as {@link LockInfo.holders} lists it (never its lease id). */
export interface Holder {
    /** The permit's slot, in [0, limit); 0 for a shared lease. */
    slot: number;
    /** The lease's fencing token. */
    token: number;
    /** Its owner ({@link AcquireOptions.owner}); "" if it named none. */
    owner: string;
    /** What the lease has left, in ms. */
    expiresInMs: number;
}
/**
 * The state of a lock as {@link FenceClient.watch} yields it: a {@link LockInfo} and
 * the lock's change index.
 */
export interface WatchedLockInfo extends LockInfo {
    /**
     * The lock's change index (the server's `Fence-Index`), at least 1: the same while
     * the lock is unchanged (a renewal is no change), different after each acquire,
     * release, expiry, revoke or heal.
     */
    index: number;
}
/** Options of {@link FenceClient.watch} and {@link FenceClient.observeLeader}. Every field is optional. */
export interface WatchOptions {
    /**
     * Ends the watch: once it aborts, the iteration rejects with the signal's reason at
     * once, the request in flight aborted, as fetch does.
     */
    signal?: AbortSignal;
    /**
     * How long one blocking query waits for a change, in ms, at most the client's
     * maxPollMs (the default); the server cuts it to its `--max-wait`. When it passes
     * with no change the watch simply asks again, so it matters only to a proxy that
     * drops idle requests sooner.
     */
    waitMs?: number;
    /**
     * Called with the {@link UnavailableError} of each blocking query that found the
     * server unreachable or unavailable (503: restarting, draining), before the watch
     * backs off (50ms, doubling to 1s) and asks again. Throw from it to end the watch
     * with that error instead. Without it, the watch retries silently.
     */
    onUnavailable?: (err: UnavailableError) => void;
}
/** The leader of an election (the holder of its lock), as {@link FenceClient.leader} and {@link FenceClient.observeLeader} report it. */
export interface Leader {
    /** The election's lock name. */
    name: string;
    /** Whether somebody leads. */
    leading: boolean;
    /** The leader's owner ({@link AcquireOptions.owner}); "" if nobody leads or the leader named none. */
    owner: string;
    /** The term's epoch: its lease's fencing token, greater for every later term; 0 if nobody leads. */
    epoch: number;
    /** What the leader's lease had left as of the read, in ms; 0 if nobody leads. */
    expiresInMs: number;
}
/** A value to store: a string (as UTF-8) or bytes. */
export type Value = string | Uint8Array | ArrayBuffer;
/**
 * FenceClient talks to a `fence serve` server (HTTP API v1) with the global fetch.
 * It is safe to share; it keeps no state but its options.
 *
 * Errors: every method rejects with a {@link FenceError}. For an answer of the server,
 * its message is the server's `"error"` line verbatim and its class is that of the
 * code ({@link HeldError}, {@link StaleTokenError}, ...). A server that cannot be
 * reached gives an {@link UnavailableError} reading `cannot reach the fence server at
 * URL: REASON`. Bad arguments give an {@link InvalidError} before any request
 * (thrown at the call by watch and observeLeader, which return iterables). A
 * caller's aborted signal rejects with the signal's reason, as fetch does.
 *
 * Several servers (the nodes of a cluster): each request goes to the server that
 * last answered, and moves to the next one, each server once per request, when it
 * cannot connect or fails without an answer, passes attemptTimeoutMs, or is
 * answered 502, 503 or 504 (503: a node cut off from the majority, a server shutting
 * down). Long polls move too. When no server answers, the error names each server
 * tried (`cannot reach the fence server at URL1: REASON; at URL2: REASON`), or is the
 * last 503. A retry is safe: an acquire carries a request id, the same on every
 * attempt, so a store that keeps request ids answers it with the grant whose answer
 * was lost; a renewal twice is one; a release whose earlier attempt may have been
 * applied and whose retry is answered 410 resolves (the lease is over either way,
 * and a release never touches another lease).
 */
export declare class FenceClient {
    #private;
    /** The servers, in the order the client tries them, each without a trailing slash. */
    readonly servers: readonly string[];
    /** The fenced key-value store of the server. */
    readonly kv: KV;
    /**
     * Returns a client of the server in options (see {@link FenceClientOptions}); a
     * string is the server alone. Throws an {@link InvalidError} if the server is not an
     * http(s) URL or HOST:PORT, or a timeout is not a positive number.
     */
    constructor(options?: FenceClientOptions | string);
    /** The server that last answered (the first, before any answer), without a trailing slash. */
    get server(): string;
    /**
     * Acquires the lock `name` and resolves with its {@link Lease}, which renews itself
     * unless autoRenew is false.
     *
     * With waitMs, the server long-polls (woken by the release); a wait longer than one
     * poll is several, and an unreachable or restarting server is retried with backoff
     * until the wait is over. The lease's local deadline counts from when the granting
     * request was sent plus the server's waited_ms, so it is never later than the
     * server's expiry.
     *
     * With limit, it takes a permit of a semaphore (the lease's {@link Lease.slot} says
     * which); with shared, a shared lease.
     *
     * Rejects with a {@link HeldError} if the lock stayed held (expiresInMs: what the
     * holder had left as the wait ended; for a semaphore, all its permits); a
     * {@link LimitMismatchError} if the name's live leases have another limit; an
     * {@link InvalidError} for a bad name, ttlMs, waitMs, owner or limit, or shared with
     * a limit above 1; a {@link NotImplementedError} if the server's store has no
     * semaphores or shared locks (as asked); an {@link UnavailableError} if the server cannot be reached (it may
     * have granted a lease nobody learns of; it expires after its TTL); the signal's
     * reason if the signal aborted the wait. When it gives up while an attempt's
     * outcome is unknown (the signal aborted, no server answered) it first sends a
     * best-effort abandon (a release by request id), so that a grant made for it
     * after all is released at once.
     */
    acquire(name: string, opts?: AcquireOptions): Promise<Lease>;
    /**
     * Extends the lease `leaseId` of `name` to ttlMs (default 30000) from now. Most
     * callers use {@link Lease.renew} or auto-renew instead. Rejects with a
     * {@link NotHeldError} if the lease is gone (or not yours), an {@link InvalidError}
     * for bad arguments, an {@link UnavailableError} if the server cannot be reached.
     */
    renew(name: string, leaseId: string, opts?: {
        ttlMs?: number;
        signal?: AbortSignal | undefined;
    }): Promise<void>;
    /**
     * Releases the lease `leaseId` of `name` and wakes the server's waiters. Most callers
     * use {@link Lease.release}. Rejects with a {@link NotHeldError} if the lease is no
     * longer held (or not yours), an {@link InvalidError} for bad arguments, an
     * {@link UnavailableError} if the server cannot be reached (retrying is safe). With
     * several servers, a release whose earlier attempt may have been applied and whose
     * retry is answered 410 resolves: the lease is not held either way.
     */
    release(name: string, leaseId: string): Promise<void>;
    /**
     * Tells the server that a resource saw token `seen` for lock `name`, so that its next
     * grant's token is higher (for stores whose counters can go backwards). Rejects with
     * a {@link NotImplementedError} if the server's store has nothing to heal, an
     * {@link InvalidError} for bad arguments, an {@link UnavailableError} if the server
     * cannot be reached (healing again is safe).
     */
    heal(name: string, seen: number): Promise<void>;
    /**
     * Resolves with the state of the lock `name`. Rejects with a
     * {@link NotImplementedError} if the server's store cannot report it, an
     * {@link InvalidError} for a bad name, an {@link UnavailableError} if the server
     * cannot be reached.
     */
    inspect(name: string): Promise<LockInfo>;
    /**
     * Resolves with the held locks whose names start with opts.prefix, in name order,
     * each as {@link FenceClient.inspect} reports it; with opts.all, the free names the
     * server's store knows too. Rejects with an {@link InvalidError} for a bad prefix,
     * limit or all, a {@link NotImplementedError} if the server's store cannot list,
     * an {@link UnavailableError} if the server cannot be reached.
     */
    list(opts?: ListOptions): Promise<LockInfo[]>;
    /**
     * Follows the state of the lock `name`: an async iterable that yields its state at
     * once, then its state after each change (an acquire, release, expiry, revoke or
     * heal), each with the lock's change {@link WatchedLockInfo.index}, until stopped.
     * Each step is one blocking query (`GET /v1/locks/{name}?index=N&wait_ms=W`, N the
     * last index) that the server answers when the lock changes, woken by its store; a
     * query whose wait passed with no change is asked again, unseen. A consumer that
     * falls behind skips states but always gets the latest next, never an older one
     * after a newer: nothing is buffered, each query starts when the loop asks for the
     * next state.
     *
     * Stop it with `break` in a `for await` loop, or with opts.signal: the iteration
     * then rejects with the signal's reason at once, aborting the query in flight.
     * While the server cannot be reached or answers 503 (restarting, draining), the
     * watch backs off (50ms to 1s) and asks again, telling opts.onUnavailable if set,
     * so it rides out a restart of the server.
     *
     * Throws an {@link InvalidError} at once for a bad name or option. The iteration
     * rejects with a {@link NotImplementedError} if the server cannot answer blocking
     * queries (a store that cannot watch: 501; a server older than blocking queries,
     * known by its answer without a `Fence-Index` header), and with any other error
     * answer of the server ({@link UnauthorizedError}, ...), and ends.
     */
    watch(name: string, opts?: WatchOptions): AsyncGenerator<WatchedLockInfo, void, undefined>;
    /**
     * Resolves with the leader of the election `name` (the holder of its lock, as
     * `fence elect` and `fence leader` use it): `leading` false, with epoch 0, if
     * nobody leads; that is an answer, not an error. Rejects as {@link FenceClient.inspect} does.
     */
    leader(name: string): Promise<Leader>;
    /**
     * Follows the leader of the election `name`: an async iterable that yields the
     * current {@link Leader} at once, then each change of leader: a new term (a new
     * epoch) or the end of one (a vacancy: `leading` false, epoch 0). A renewal is not
     * a change. An observer that falls behind skips terms but always gets the latest
     * leader, never an older one after a newer. It is {@link FenceClient.watch} of the
     * election's lock, with its options, stopping and errors.
     */
    observeLeader(name: string, opts?: WatchOptions): AsyncGenerator<Leader, void, undefined>;
    /**
     * Ends the current lease of the lock `name` now, whoever holds it, and wakes the
     * server's waiters: an operator's force-release. The revoked holder learns it at its
     * next renewal (its Lease's signal aborts with a {@link NotHeldError}); a paused holder
     * may still write with its token until the next holder writes or fences the resource,
     * so revoke only locks whose resources are fenced.
     *
     * Rejects with a {@link NotHeldError} (404 `not_held`) if no unexpired lease holds the
     * lock (nothing changed), a {@link NotImplementedError} if the server's store cannot
     * revoke, an {@link InvalidError} for a bad name, an {@link UnavailableError} if the
     * server cannot be reached (revoking again is safe: it then rejects as not held).
     */
    revoke(name: string): Promise<void>;
    /**
     * Acquires `name` (waiting until acquired unless opts.waitMs bounds it), runs
     * `fn(lease, signal)` and releases the lease when fn settles. `signal` aborts when the
     * lease is lost (or when opts.signal aborts): stop work on it, and fence every write
     * with the lease.
     *
     * Resolves with fn's result. Rejects with fn's error if it threw; else with a
     * {@link NotHeldError} if the lease was lost while fn ran, even though fn finished: the
     * signal's reason, or the release's 410 if the loss was not yet known; and with
     * acquire's errors. A release that fails because the
     * server cannot be reached is not an error of the work: the lease then expires after
     * its TTL.
     */
    withLock<T>(name: string, fn: (lease: Lease, signal: AbortSignal) => T | Promise<T>, opts?: WithLockOptions): Promise<T>;
}
/**
 * KV is the server's fenced key-value store: a write is stored only if its fence's
 * token is at least the highest the key has accepted (and of the lock that fences it).
 * Get it as {@link FenceClient.kv}.
 */
export declare class KV {
    #private;
    /** Returns the store of client c; use {@link FenceClient.kv}. */
    constructor(c: FenceClient);
    /**
     * Stores value under key if the server admits the fence (a {@link FenceSpec} or a
     * {@link Lease}). Rejects with a {@link StaleTokenError} (highest: the key's token) or a
     * {@link WrongLockError} when the write is refused and changed nothing; an
     * {@link InvalidError} for a bad key, fence or value; a {@link TooLargeError} for a value
     * over the server's limit; a {@link NotImplementedError} if the server has no store;
     * an {@link UnavailableError} if the server cannot be reached (the write may or may
     * not have happened). Every attempt of the call carries one attempt id
     * ({@link WriteOptions.attempt}), so a late first attempt never replaces a later write.
     */
    put(key: string, value: Value, fence: FenceSpec | Lease, opts?: WriteOptions): Promise<void>;
    /**
     * Advances key's fence to `fence` without writing a value. Rejects as
     * {@link KV.put} does, and with a {@link NotImplementedError} if the store cannot fence
     * without writing.
     */
    fence(key: string, fence: FenceSpec | Lease): Promise<void>;
    /**
     * Removes key's value if the server admits the fence (a {@link FenceSpec} or a
     * {@link Lease}), as {@link KV.put} admits a write: the key keeps its fence (now this
     * delete's), so a stale writer is still refused, and {@link KV.get} then resolves
     * with a null value. Rejects with a {@link NotFoundError} if the key holds no value
     * (never written, only fenced, or already deleted; nothing changed), and as
     * {@link KV.put} does otherwise. Its attempts carry one attempt id, as put's do.
     */
    delete(key: string, fence: FenceSpec | Lease, opts?: WriteOptions): Promise<void>;
    /**
     * Purges key: removes its value and its fence, so that the next write under any lock
     * is admitted. An admin's operation (the admin right, with scoped tokens), and the
     * one way a key's fence goes back: for a key fenced under the wrong lock. Rejects
     * with a {@link NotFoundError} if the key has neither a value nor a fence, a
     * {@link NotImplementedError} if the server's store cannot purge, an
     * {@link InvalidError} for a bad key, an {@link UnavailableError} if the server cannot
     * be reached.
     */
    purge(key: string): Promise<void>;
    /**
     * Resolves with the value under key and the key's fence (never a lease id); a key
     * that is fenced but holds no value (only fenced, or its value deleted) resolves with
     * a null value. Rejects with a {@link NotFoundError} if key was never written nor
     * fenced (or was purged), an {@link InvalidError} for a bad key, an
     * {@link UnavailableError} if the server cannot be reached.
     */
    get(key: string): Promise<KVItem>;
}
