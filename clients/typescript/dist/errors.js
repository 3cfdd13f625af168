/**
 * Errors of the fence client. Every error the client throws or rejects with is a
 * {@link FenceError}; its `message` is the one line a user should read. For an answer
 * of the server it is the server's `"error"` line verbatim (it names the operation and
 * the lock or key: `release "job1": lease not held (expired, released, or never
 * granted)`); errors the client makes itself are worded the same way.
 *
 * Subclasses carry the detail of their code: branch on `instanceof` or on `code`.
 *
 * @module
 */
/**
 * FenceError is the base of every error of this package.
 *
 * - `code`: the server's code (`"held"`, `"stale_token"`, ...), `"unexpected"` for an
 *   answer that is not fence's JSON.
 * - `status`: the HTTP status of the answer, or `undefined` when no answer was received
 *   (the client refused the arguments, or could not reach the server).
 * - `message`: the one line to show a user.
 */
export class FenceError extends Error {
    /** The error's code. */
    code;
    /** The HTTP status of the server's answer; undefined if there was none. */
    status;
    /**
     * Returns an error reading `message`. Callers rarely make these: the client does.
     * @param code the server's code, or the client's own
     * @param status the HTTP status, or undefined without an answer
     * @param message the one line a user reads
     * @param options `cause`: the underlying error, if any
     */
    constructor(code, status, message, options) {
        super(message, options);
        this.name = new.target.name;
        this.code = code;
        this.status = status;
    }
}
/** InvalidError: bad input (400 `invalid`), refused by the server or by the client before any request. */
export class InvalidError extends FenceError {
    /** The field, header or argument that was refused (`"name"`, `"ttlMs"`, `"Fence-Lock"`, ...). */
    field;
    /** Why it was refused (`"is empty"`). */
    reason;
    /** Returns an InvalidError of `field`; see {@link FenceError} for the rest. */
    constructor(status, message, field, reason) {
        super("invalid", status, message);
        this.field = field;
        this.reason = reason;
    }
}
/** UnauthorizedError: the server refused the bearer token, or got none (401). */
export class UnauthorizedError extends FenceError {
}
/**
 * NotFoundError: a key that holds no value (never written; from kv.delete, already
 * deleted too; from kv.purge, neither a value nor a fence), or an unknown route (404).
 */
export class NotFoundError extends FenceError {
}
/** HeldError: the lock stayed held through the wait (409 `held`). */
export class HeldError extends FenceError {
    /** The lock's name. */
    lockName;
    /** What the holder's lease had left when the wait ended, in ms; 0 if unknown. */
    expiresInMs;
    /** Returns a HeldError; see {@link FenceError}. */
    constructor(status, message, lockName, expiresInMs) {
        super("held", status, message);
        this.lockName = lockName;
        this.expiresInMs = expiresInMs;
    }
}
/**
 * LimitMismatchError: the lock's live leases were granted with another limit than
 * the acquire asked for (409 `limit_mismatch`): every acquirer of a semaphore must
 * use the same limit (a lock and a shared lock count as 1). Nothing changed; the
 * same acquire succeeds once the live leases end.
 */
export class LimitMismatchError extends FenceError {
    /** The lock's name. */
    lockName;
    /** The limit the acquire asked for (1 for a lock). */
    limit;
    /** The limit of the live leases (1 for a lock). */
    heldLimit;
    /** Returns a LimitMismatchError; see {@link FenceError}. */
    constructor(status, message, lockName, limit, heldLimit) {
        super("limit_mismatch", status, message);
        this.lockName = lockName;
        this.limit = limit;
        this.heldLimit = heldLimit;
    }
}
/**
 * StaleTokenError: the key has accepted a higher token (409 `stale_token`). The write
 * changed nothing. `highest` is the key's token, `token` the one presented.
 */
export class StaleTokenError extends FenceError {
    /** The key written. */
    key;
    /** The highest token the key has accepted. */
    highest;
    /** The token the refused write presented. */
    token;
    /** True if the token equals `highest` but was accepted under another lease. */
    sameToken;
    /** Returns a StaleTokenError; see {@link FenceError}. */
    constructor(status, message, key, highest, token, sameToken) {
        super("stale_token", status, message);
        this.key = key;
        this.highest = highest;
        this.token = token;
        this.sameToken = sameToken;
    }
}
/** WrongLockError: the key is fenced by another lock than the one named (409 `wrong_lock`). */
export class WrongLockError extends FenceError {
    /** The key written. */
    key;
    /** The lock that fences the key. */
    lock;
    /** The lock the refused write named. */
    got;
    /** Returns a WrongLockError; see {@link FenceError}. */
    constructor(status, message, key, lock, got) {
        super("wrong_lock", status, message);
        this.key = key;
        this.lock = lock;
        this.got = got;
    }
}
/**
 * UnissuedTokenError: the server never issued this fence (409 `unissued_token`): the
 * token is above the last one it issued for the lock (`last`; 0 if it never granted
 * the lock), or, with `otherLease`, it issued the token to another lease than the one
 * sent. Nothing was written. Fence only with the token (and lease) of a real grant:
 * a {@link Lease}, or the lock and token of one.
 */
export class UnissuedTokenError extends FenceError {
    /** The lock named by the write. */
    lock;
    /** The token the refused write presented. */
    token;
    /** The last token the server issued for the lock; 0 if it never granted it. */
    last;
    /** True if the token was issued, but to another lease than the one sent. */
    otherLease;
    /** The key written, when the server names it ("" otherwise). */
    key;
    /** Returns an UnissuedTokenError; see {@link FenceError}. */
    constructor(status, message, lock, token, last, otherLease, key) {
        super("unissued_token", status, message);
        this.lock = lock;
        this.token = token;
        this.last = last;
        this.otherLease = otherLease;
        this.key = key;
    }
}
/**
 * LeaseRequiredError: the token is a live lease's and the write came without its lease
 * id (409 `lease_required`). Nothing was written. The token is public (a lock's state
 * shows it); stored without a lease, the fence would refuse the holder's own writes
 * under that token. Write with the {@link Lease} (or the lock, token and `lease` of
 * one). Once the lease has ended, the token alone is admitted as any token is.
 */
export class LeaseRequiredError extends FenceError {
    /** The lock named by the write. */
    lock;
    /** The token the refused write presented, a live lease's. */
    token;
    /** The key written, when the server names it ("" otherwise). */
    key;
    /** Returns a LeaseRequiredError; see {@link FenceError}. */
    constructor(status, message, lock, token, key) {
        super("lease_required", status, message);
        this.lock = lock;
        this.token = token;
        this.key = key;
    }
}
/** TokenExhaustedError: the lock's counter is at its maximum; it grants no more leases (409). */
export class TokenExhaustedError extends FenceError {
}
/**
 * NotHeldError: the lease expired, was released, was revoked, or is not yours (410
 * `not_held`); from {@link FenceClient.revoke}, no unexpired lease holds the lock (404
 * `not_held`). It is also the reason of a {@link Lease}'s signal: see
 * {@link LeaseReleasedError} and {@link LeaseExpiredError}.
 */
export class NotHeldError extends FenceError {
    /** The lock's name. */
    lockName;
    /** Returns a NotHeldError; see {@link FenceError}. */
    constructor(status, message, lockName, options) {
        super("not_held", status, message, options);
        this.lockName = lockName;
    }
}
/** LeaseReleasedError is the reason of a lease's signal after its holder released it. */
export class LeaseReleasedError extends NotHeldError {
}
/**
 * LeaseExpiredError is the reason of a lease's signal when its local deadline passed
 * without a successful renewal; `cause` is the last renewal's error, if one failed.
 */
export class LeaseExpiredError extends NotHeldError {
}
/** TooLargeError: the request body (a value) is over the server's limit (413). */
export class TooLargeError extends FenceError {
}
/**
 * NotImplementedError: the server's store lacks the feature (501): no KV, heal or
 * inspect, or no semaphores (`limit`) or shared locks (`shared`).
 */
export class NotImplementedError extends FenceError {
}
/**
 * UnavailableError: the store is unavailable or the server is shutting down (503), or
 * the server could not be reached at all: then it reads `cannot reach the fence server
 * at URL: REASON` and `status` is undefined (or the 502/503/504 of a proxy).
 */
export class UnavailableError extends FenceError {
}
const str = (v) => (typeof v === "string" ? v : "");
const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
/**
 * Returns the error an error answer describes: the subclass of its code, with the
 * body's detail, reading as the body's `"error"`. A code this client does not know
 * gives a plain FenceError with that code.
 */
export function errorFromBody(status, body) {
    const code = str(body.code);
    const msg = str(body.error) || `server answered ${status} ${code}`;
    switch (code) {
        case "invalid":
            return new InvalidError(status, msg, str(body.field), str(body.reason));
        case "unauthorized":
            return new UnauthorizedError("unauthorized", status, msg);
        case "not_found":
            return new NotFoundError("not_found", status, msg);
        case "held":
            return new HeldError(status, msg, str(body.name), num(body.expires_in_ms));
        case "limit_mismatch":
            return new LimitMismatchError(status, msg, str(body.name), num(body.limit), num(body.held_limit));
        case "stale_token":
            return new StaleTokenError(status, msg, str(body.key), num(body.highest), num(body.token), body.same_token === true);
        case "wrong_lock":
            return new WrongLockError(status, msg, str(body.key), str(body.lock), str(body.got));
        case "unissued_token":
            return new UnissuedTokenError(status, msg, str(body.lock), num(body.token), num(body.last), body.other_lease === true, str(body.key));
        case "lease_required":
            return new LeaseRequiredError(status, msg, str(body.lock), num(body.token), str(body.key));
        case "token_exhausted":
            return new TokenExhaustedError("token_exhausted", status, msg);
        case "not_held":
            return new NotHeldError(status, msg, str(body.name));
        case "too_large":
            return new TooLargeError("too_large", status, msg);
        case "not_implemented":
            return new NotImplementedError("not_implemented", status, msg);
        case "unavailable":
            return new UnavailableError("unavailable", status, msg);
    }
    return new FenceError(code, status, msg);
}
