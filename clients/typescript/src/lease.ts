import { FenceError, LeaseExpiredError, LeaseReleasedError, NotHeldError, UnavailableError } from "./errors.js";
import { checkTTL, quote } from "./validate.js";

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
  renew(name: string, leaseId: string, opts: { ttlMs: number; signal?: AbortSignal }): Promise<void>;
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

const now = (): number => performance.now();

/** Retry pause of a renewal that failed transiently: about ttl/10, at least 10ms, at most 1s. */
const retryDelay = (ttlMs: number): number => Math.min(Math.max(ttlMs / 10, 10), 1000);

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
export class Lease {
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

  #ops: LeaseOps;
  #ttlMs: number;
  #deadline: number; // performance.now() time
  #auto: boolean;
  #ac = new AbortController();
  #renewTimer: ReturnType<typeof setTimeout> | undefined;
  #expiryTimer: ReturnType<typeof setTimeout> | undefined;
  #lastRenewError: unknown;
  #released = false;

  /** Returns a lease as granted; FenceClient.acquire makes them. */
  constructor(init: LeaseInit) {
    this.name = init.name;
    this.token = init.token;
    this.id = init.id;
    this.slot = init.slot ?? 0;
    this.#ops = init.ops;
    this.#ttlMs = init.ttlMs;
    this.#deadline = init.start + init.ttlMs;
    this.#auto = init.autoRenew;
    this.#arm();
    this.#scheduleRenew(init.start + init.ttlMs / 3 - now());
  }

  /** The TTL of the last grant or renewal, in ms. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /**
   * The local deadline, as a wall-clock Date: after it the lease may have expired on
   * the server. It is never later than the server's expiry, since it counts from when
   * the granting (or renewing) request was sent. Measured on the monotonic clock.
   */
  get deadline(): Date {
    return new Date(Date.now() + (this.#deadline - now()));
  }

  /** Returns the ms left until the local deadline (0 once it has passed). */
  remainingMs(): number {
    return Math.max(0, this.#deadline - now());
  }

  /**
   * An AbortSignal that aborts when the lease is lost or released; its `reason` is a
   * {@link NotHeldError} saying which (see {@link Lease}).
   */
  get signal(): AbortSignal {
    return this.#ac.signal;
  }

  /** True while the lease is believed held: not aborted and before the local deadline. */
  get held(): boolean {
    return !this.#ac.signal.aborted && now() < this.#deadline;
  }

  /** Returns the headers that fence a write with this lease: Fence-Token, Fence-Lock and Fence-Lease. */
  fence(): FenceHeaders {
    return { "Fence-Token": String(this.token), "Fence-Lock": encodeURIComponent(this.name), "Fence-Lease": this.id };
  }

  /**
   * Extends the lease to ttlMs (default: its TTL) from now. Rejects with a
   * {@link NotHeldError} (and aborts the signal) if the server says the lease is gone;
   * with the signal's reason if the lease already ended; with an InvalidError for a
   * bad ttlMs; with an UnavailableError, the deadline unchanged, if the server cannot
   * be reached.
   */
  async renew(opts: { ttlMs?: number } = {}): Promise<void> {
    const ttlMs = checkTTL("renew", this.name, opts.ttlMs ?? this.#ttlMs);
    if (this.#ac.signal.aborted) throw this.#ac.signal.reason;
    await this.#renew(ttlMs, undefined);
    this.#scheduleRenew(ttlMs / 3);
  }

  /**
   * Releases the lease on the server, which wakes its waiters, and aborts the signal
   * with a {@link LeaseReleasedError}. A second release resolves at once. Rejects with
   * a {@link NotHeldError} if the server no longer had the lease (the signal aborts all
   * the same), and with other errors (UnavailableError) leaving the lease as it was,
   * so that release can be retried.
   */
  async release(): Promise<void> {
    if (this.#released) return;
    try {
      await this.#ops.release(this.name, this.id);
    } catch (err) {
      if (err instanceof NotHeldError) this.#end(this.#releasedReason());
      throw err;
    }
    this.#end(this.#releasedReason());
  }

  #releasedReason(): LeaseReleasedError {
    this.#released = true;
    return new LeaseReleasedError(undefined, `lease on ${quote(this.name)} (token ${this.token}) released`, this.name);
  }

  async #renew(ttlMs: number, signal: AbortSignal | undefined): Promise<void> {
    const start = now();
    try {
      await this.#ops.renew(this.name, this.id, { ttlMs, signal });
    } catch (err) {
      if (err instanceof NotHeldError) this.#end(err);
      throw err;
    }
    if (this.#ac.signal.aborted) throw this.#ac.signal.reason;
    this.#ttlMs = ttlMs;
    this.#deadline = start + ttlMs;
    this.#lastRenewError = undefined;
    this.#arm();
  }

  #arm(): void {
    clearTimeout(this.#expiryTimer);
    if (this.#ac.signal.aborted) return;
    this.#expiryTimer = setTimeout(() => this.#onDeadline(), Math.max(0, this.#deadline - now()));
    this.#expiryTimer.unref?.();
  }

  #onDeadline(): void {
    if (this.#ac.signal.aborted) return;
    const left = this.#deadline - now();
    if (left > 0) {
      this.#arm(); // renewed since the timer was set, or the timer fired early
      return;
    }
    const last = this.#lastRenewError;
    const why = last instanceof Error ? ` (last renewal: ${last.message})` : "";
    this.#end(
      new LeaseExpiredError(undefined, `lease on ${quote(this.name)} (token ${this.token}) expired before it was renewed${why}`, this.name, { cause: last }),
    );
  }

  #scheduleRenew(delay: number): void {
    clearTimeout(this.#renewTimer);
    if (!this.#auto || this.#ac.signal.aborted) return;
    this.#renewTimer = setTimeout(() => void this.#autoRenew(), Math.max(1, delay));
    this.#renewTimer.unref?.();
  }

  async #autoRenew(): Promise<void> {
    const left = this.#deadline - now();
    if (this.#ac.signal.aborted || left <= 0) return;
    const ttlMs = this.#ttlMs;
    try {
      // A renewal answered after the deadline is no use: bound it by the time left.
      await this.#renew(ttlMs, AbortSignal.timeout(Math.max(1, Math.ceil(left))));
      this.#scheduleRenew(ttlMs / 3);
    } catch (err) {
      if (this.#ac.signal.aborted) return;
      this.#lastRenewError =
        err instanceof Error && err.name === "TimeoutError"
          ? new UnavailableError("unavailable", undefined, `renew ${quote(this.name)}: no answer before the lease's local deadline`, { cause: err })
          : err;
      this.#scheduleRenew(Math.min(retryDelay(ttlMs), Math.max(1, this.#deadline - now())));
    }
  }

  #end(reason: FenceError): void {
    if (this.#ac.signal.aborted) return;
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#expiryTimer);
    this.#ac.abort(reason);
  }
}
