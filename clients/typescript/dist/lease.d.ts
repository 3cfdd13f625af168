/** The headers of a fenced write: send them to any resource that keeps the highest token it has seen. */
export interface FenceHeaders {
    /** The fencing token, in decimal. */
    "Fence-Token": string;
    /** The lock whose counter issued the token, URL-escaped as a path segment. */
    "Fence-Lock": string;
    /** The lease id (a credential: send it only to resources you trust). */
    "Fence-Lease": string;
}
/** What a Lease needs of its client: renew and release on the server. */
export interface LeaseOps {
    renew(name: string, leaseId: string, opts: {
        ttlMs: number;
        signal?: AbortSignal;
    }): Promise<void>;
    release(name: string, leaseId: string): Promise<void>;
}
/** How a Lease starts: made by FenceClient.acquire. */
export interface LeaseInit {
    ops: LeaseOps;
    name: string;
    token: number;
    id: string;
    /** The permit's slot of a semaphore lease; 0 (the default) for a lock or shared lease. */
    slot?: number;
    ttlMs: number;
    /** When the grant started, by performance.now(): never later than the server's start. */
    start: number;
    autoRenew: boolean;
}
/**
 * Lease is one grant of a lock: its name, fencing token and lease id, and what the
 * holder knows of its expiry.
 *
 * Its {@link Lease.signal} aborts when the holder can no longer be sure it holds the
 * lock: when a renewal is refused ({@link NotHeldError} from the server), when the local
 * deadline passes without a successful renewal ({@link LeaseExpiredError}, whose
 * `cause` is the last renewal's error), or on release ({@link LeaseReleasedError}).
 * Run work that must stop on loss under the signal, and still fence every write with
 * {@link Lease.fence}: a holder can pause right after checking, and only the
 * resource's token check closes that window.
 *
 * With auto-renew (the default), the lease renews itself every ttl/3, and retries a
 * failed renewal (an unreachable server, a 503) about every ttl/10 until the local
 * deadline. Its timers do not keep the Node.js process alive.
 */
export declare class Lease {
    #private;
    /** The lock's name. */
    readonly name: string;
    /** The fencing token: per lock, higher than every earlier grant's. */
    readonly token: number;
    /** The lease id, the credential that renews and releases the lease. */
    readonly id: string;
    /**
     * The permit's slot, in [0, limit), of a lease on a semaphore
     * (the `limit` of {@link FenceClient.acquire}): no two unexpired leases on the name share a slot, so
     * a resource per slot (partition 3) is fenced by the name's tokens as a lock's
     * resource is. 0 for a lock and for a shared lease.
     */
    readonly slot: number;
    /** Returns a lease as granted; FenceClient.acquire makes them. */
    constructor(init: LeaseInit);
    /** The TTL of the last grant or renewal, in ms. */
    get ttlMs(): number;
    /**
     * The local deadline, as a wall-clock Date: after it the lease may have expired on
     * the server. It is never later than the server's expiry, since it counts from when
     * the granting (or renewing) request was sent. Measured on the monotonic clock.
     */
    get deadline(): Date;
    /** Returns the ms left until the local deadline (0 once it has passed). */
    remainingMs(): number;
    /**
     * An AbortSignal that aborts when the lease is lost or released; its `reason` is a
     * {@link NotHeldError} saying which (see {@link Lease}).
     */
    get signal(): AbortSignal;
    /** True while the lease is believed held: not aborted and before the local deadline. */
    get held(): boolean;
    /** Returns the headers that fence a write with this lease: Fence-Token, Fence-Lock and Fence-Lease. */
    fence(): FenceHeaders;
    /**
     * Extends the lease to ttlMs (default: its TTL) from now. Rejects with a
     * {@link NotHeldError} (and aborts the signal) if the server says the lease is gone;
     * with the signal's reason if the lease already ended; with an InvalidError for a
     * bad ttlMs; with an UnavailableError, the deadline unchanged, if the server cannot
     * be reached.
     */
    renew(opts?: {
        ttlMs?: number;
    }): Promise<void>;
    /**
     * Releases the lease on the server, which wakes its waiters, and aborts the signal
     * with a {@link LeaseReleasedError}. A second release resolves at once. Rejects with
     * a {@link NotHeldError} if the server no longer had the lease (the signal aborts all
     * the same), and with other errors (UnavailableError) leaving the lease as it was,
     * so that release can be retried.
     */
    release(): Promise<void>;
}
