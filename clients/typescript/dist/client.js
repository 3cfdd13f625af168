import { FenceError, HeldError, InvalidError, LeaseReleasedError, NotHeldError, NotImplementedError, UnavailableError, errorFromBody } from "./errors.js";
import { Lease } from "./lease.js";
import { checkLeaseId, checkLimit, checkName, checkOwner, checkQueryWait, checkRequestId, checkToken, checkTTL, checkWait, escapeSegment, invalid, opName, quote } from "./validate.js";
/** The server a client talks to when neither the options nor FENCE_SERVER name one. */
export const DEFAULT_SERVER = "http://127.0.0.1:7420";
const MIN_BACKOFF_MS = 50;
/** Bounds the abandon an acquire sends when it gives up: it is best effort. */
const ABANDON_TIMEOUT_MS = 1_000;
const MAX_BACKOFF_MS = 1000;
const env = (k) => (typeof process === "undefined" ? undefined : process.env[k]) || undefined;
const textDecoder = new TextDecoder();
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
export class FenceClient {
    /** The servers, in the order the client tries them, each without a trailing slash. */
    servers;
    /** The fenced key-value store of the server. */
    kv;
    #auth;
    #cur = 0;
    #attemptMs;
    #timeoutMs;
    #maxPollMs;
    #ops;
    /**
     * Returns a client of the server in options (see {@link FenceClientOptions}); a
     * string is the server alone. Throws an {@link InvalidError} if the server is not an
     * http(s) URL or HOST:PORT, or a timeout is not a positive number.
     */
    constructor(options = {}) {
        if (typeof options === "string")
            options = { server: options };
        const first = options.server ?? (options.servers?.length ? undefined : env("FENCE_SERVER") ?? DEFAULT_SERVER);
        const all = [...(first === undefined ? [] : String(first).split(",")), ...(options.servers ?? [])];
        this.servers = Object.freeze(all.map((s) => parseServer(typeof s === "string" ? s.trim() : s)));
        this.#auth = options.authToken ?? env("FENCE_AUTH_TOKEN");
        this.#timeoutMs = positive("requestTimeoutMs", options.requestTimeoutMs ?? 30_000);
        this.#attemptMs = positive("attemptTimeoutMs", options.attemptTimeoutMs ?? (this.servers.length > 1 ? Math.min(5_000, this.#timeoutMs) : this.#timeoutMs));
        this.#maxPollMs = positive("maxPollMs", options.maxPollMs ?? 30_000);
        this.kv = new KV(this);
        this.#ops = {
            renew: (name, id, o) => this.renew(name, id, o),
            release: (name, id) => this.release(name, id),
        };
    }
    /** The server that last answered (the first, before any answer), without a trailing slash. */
    get server() {
        return this.servers[this.#cur];
    }
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
    async acquire(name, opts = {}) {
        const op = "acquire";
        checkName(op, "name", name);
        const ttlMs = checkTTL(op, name, opts.ttlMs ?? 30_000);
        const waitMs = checkWait(op, name, opts.waitMs ?? 0);
        const owner = checkOwner(op, name, opts.owner ?? "");
        const limit = opts.limit === undefined ? 1 : checkLimit(op, name, opts.limit);
        if (opts.shared !== undefined && typeof opts.shared !== "boolean") {
            throw invalid(op, name, "shared", String(opts.shared), "must be a boolean");
        }
        const shared = opts.shared === true;
        if (shared && limit > 1) {
            throw invalid(op, name, "shared", "true", `cannot be combined with limit ${limit}: a semaphore's permits are not shared`);
        }
        const requestId = opts.requestId === undefined ? randomId() : checkRequestId(op, name, opts.requestId);
        // A lock is sent as before (no limit, no shared), so older servers take it.
        const kind = { ...(limit > 1 && { limit }), ...(shared && { shared }) };
        const signal = opts.signal;
        const path = `/v1/locks/${escapeSegment(name)}/acquire`;
        const abortedBefore = signal?.aborted === true;
        try {
            return await this.#acquireLoop(op, name, { ttlMs, waitMs, owner, limit, kind, signal, path, requestId, opts });
        }
        catch (e) {
            // Given up with an attempt's outcome unknown (aborted mid-poll, no server
            // answered): abandon the acquire, so that a grant made for it after all frees
            // the lock at once instead of at its expiry.
            if (!abortedBefore && (signal?.aborted || e instanceof UnavailableError)) {
                await this.#abandon(name, { request_id: requestId, ttl_ms: ttlMs, ...kind });
            }
            throw e;
        }
    }
    /**
     * Sends, best effort, the abandon of the acquire of `name` whose request id and
     * kind `body` has: a release by request id, which ends that acquire's grant if it
     * was granted after all. Its errors are dropped: what it cannot free expires.
     */
    async #abandon(name, body) {
        try {
            await this.request("POST", `/v1/locks/${escapeSegment(name)}/release`, { json: body, signal: AbortSignal.timeout(ABANDON_TIMEOUT_MS) });
        }
        catch {
            // best effort
        }
    }
    /** The polls of {@link acquire}, with its checked arguments. */
    async #acquireLoop(op, name, a) {
        const { ttlMs, waitMs, owner, limit, kind, signal, path, requestId, opts } = a;
        const waitEnd = now() + waitMs; // Infinity for ever
        let backoff = MIN_BACKOFF_MS;
        for (;;) {
            signal?.throwIfAborted();
            const left = waitEnd - now();
            const poll = left <= 0 ? 0 : Math.max(1, Math.ceil(Math.min(left, this.#maxPollMs)));
            const start = now();
            let err;
            try {
                const resp = await this.#json(op, name, "POST", path, { json: { ttl_ms: ttlMs, wait_ms: poll, ...(owner !== "" && { owner }), ...kind, request_id: requestId }, signal, extraMs: poll });
                return this.#lease(op, name, resp, start, opts.autoRenew ?? true, limit);
            }
            catch (e) {
                err = e;
            }
            if (signal?.aborted)
                throw signal.reason;
            const waitLeft = waitEnd - now() > 0;
            if (err instanceof HeldError && waitLeft) {
                backoff = MIN_BACKOFF_MS;
                continue; // the server's poll ended before our wait: poll again
            }
            if (err instanceof UnavailableError && waitLeft) {
                // Restarting or draining (it ends long polls with 503): back off and retry.
                await sleep(Math.min(backoff, waitEnd - now()), signal);
                backoff = Math.min(2 * backoff, MAX_BACKOFF_MS);
                continue;
            }
            throw err;
        }
    }
    #lease(op, name, r, start, autoRenew, limit) {
        const { token, lease, ttl_ms: ttl, waited_ms: waited } = r;
        // A permit's answer carries its slot in [0, limit); a lock's has none.
        const slot = limit > 1 ? r.slot : (r.slot ?? 0);
        if (r.name !== name ||
            typeof token !== "number" || !Number.isSafeInteger(token) || token < 1 ||
            typeof lease !== "string" || lease === "" ||
            typeof ttl !== "number" || ttl <= 0 ||
            typeof waited !== "number" || waited < 0 ||
            typeof slot !== "number" || !Number.isInteger(slot) || slot < 0 || slot >= limit) {
            throw this.#malformed(op, name);
        }
        // The server's store started the TTL waited_ms after the server got the request,
        // which left here no later than start. Never date it after now.
        const began = Math.min(start + waited, now());
        return new Lease({ ops: this.#ops, name, token, id: lease, slot, ttlMs: ttl, start: began, autoRenew });
    }
    /**
     * Extends the lease `leaseId` of `name` to ttlMs (default 30000) from now. Most
     * callers use {@link Lease.renew} or auto-renew instead. Rejects with a
     * {@link NotHeldError} if the lease is gone (or not yours), an {@link InvalidError}
     * for bad arguments, an {@link UnavailableError} if the server cannot be reached.
     */
    async renew(name, leaseId, opts = {}) {
        const op = "renew";
        checkName(op, "name", name);
        checkLeaseId(op, name, leaseId);
        const ttlMs = checkTTL(op, name, opts.ttlMs ?? 30_000);
        await this.#json(op, name, "POST", `/v1/locks/${escapeSegment(name)}/renew`, { json: { lease: leaseId, ttl_ms: ttlMs }, signal: opts.signal });
    }
    /**
     * Releases the lease `leaseId` of `name` and wakes the server's waiters. Most callers
     * use {@link Lease.release}. Rejects with a {@link NotHeldError} if the lease is no
     * longer held (or not yours), an {@link InvalidError} for bad arguments, an
     * {@link UnavailableError} if the server cannot be reached (retrying is safe). With
     * several servers, a release whose earlier attempt may have been applied and whose
     * retry is answered 410 resolves: the lease is not held either way.
     */
    async release(name, leaseId) {
        const op = "release";
        checkName(op, "name", name);
        checkLeaseId(op, name, leaseId);
        const r = await this.request("POST", `/v1/locks/${escapeSegment(name)}/release`, { json: { lease: leaseId } });
        if (r.status === 410 && r.uncertain)
            return;
        if (r.status !== 200)
            throw this.#answerError(r);
        this.#objectOf(op, name, r);
    }
    /**
     * Tells the server that a resource saw token `seen` for lock `name`, so that its next
     * grant's token is higher (for stores whose counters can go backwards). Rejects with
     * a {@link NotImplementedError} if the server's store has nothing to heal, an
     * {@link InvalidError} for bad arguments, an {@link UnavailableError} if the server
     * cannot be reached (healing again is safe).
     */
    async heal(name, seen) {
        const op = "heal";
        checkName(op, "name", name);
        checkToken(op, name, "seen", seen);
        await this.#json(op, name, "POST", `/v1/locks/${escapeSegment(name)}/heal`, { json: { seen } });
    }
    /**
     * Resolves with the state of the lock `name`. Rejects with a
     * {@link NotImplementedError} if the server's store cannot report it, an
     * {@link InvalidError} for a bad name, an {@link UnavailableError} if the server
     * cannot be reached.
     */
    async inspect(name) {
        const op = "inspect";
        checkName(op, "name", name);
        return lockInfoOf(await this.#json(op, name, "GET", `/v1/locks/${escapeSegment(name)}`, {}), name);
    }
    /**
     * Resolves with the held locks whose names start with opts.prefix, in name order,
     * each as {@link FenceClient.inspect} reports it; with opts.all, the free names the
     * server's store knows too. Rejects with an {@link InvalidError} for a bad prefix,
     * limit or all, a {@link NotImplementedError} if the server's store cannot list,
     * an {@link UnavailableError} if the server cannot be reached.
     */
    async list(opts = {}) {
        const op = "list";
        const q = new URLSearchParams();
        if (opts.prefix !== undefined) {
            try {
                q.set("prefix", checkName(op, "name", opts.prefix));
            }
            catch (e) {
                throw e instanceof InvalidError ? invalid(op, "", "prefix", typeof opts.prefix === "string" ? opts.prefix : undefined, e.reason) : e;
            }
        }
        const limit = opts.limit ?? 0;
        if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 0 || limit > 10_000) {
            throw invalid(op, "", "limit", String(limit), "must be an integer from 0 to 10000");
        }
        if (limit > 0)
            q.set("limit", String(limit));
        if (opts.all !== undefined && typeof opts.all !== "boolean")
            throw invalid(op, "", "all", String(opts.all), "must be a boolean");
        if (opts.all === true)
            q.set("all", "true");
        const query = q.toString();
        const r = await this.#json(op, "", "GET", `/v1/locks${query ? "?" + query : ""}`, {});
        if (!Array.isArray(r.locks))
            throw this.#malformed(op, "");
        return r.locks.map((l) => {
            if (l === null || typeof l !== "object" || typeof l.name !== "string")
                throw this.#malformed(op, "");
            return lockInfoOf(l, "");
        });
    }
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
    watch(name, opts = {}) {
        return this.#watch(this.#watchArgs("watch", name, opts));
    }
    /**
     * Resolves with the leader of the election `name` (the holder of its lock, as
     * `fence elect` and `fence leader` use it): `leading` false, with epoch 0, if
     * nobody leads; that is an answer, not an error. Rejects as {@link FenceClient.inspect} does.
     */
    async leader(name) {
        checkName("leader", "name", name);
        return leaderOf(await this.inspect(name));
    }
    /**
     * Follows the leader of the election `name`: an async iterable that yields the
     * current {@link Leader} at once, then each change of leader: a new term (a new
     * epoch) or the end of one (a vacancy: `leading` false, epoch 0). A renewal is not
     * a change. An observer that falls behind skips terms but always gets the latest
     * leader, never an older one after a newer. It is {@link FenceClient.watch} of the
     * election's lock, with its options, stopping and errors.
     */
    observeLeader(name, opts = {}) {
        return leaderChanges(this.#watch(this.#watchArgs("observe", name, opts)));
    }
    #watchArgs(op, name, opts) {
        checkName(op, "name", name);
        const waitMs = Math.min(checkQueryWait(op, name, opts.waitMs ?? this.#maxPollMs), Math.ceil(this.#maxPollMs));
        const onUnavailable = opts.onUnavailable;
        if (onUnavailable !== undefined && typeof onUnavailable !== "function") {
            throw invalid(op, name, "onUnavailable", undefined, "must be a function");
        }
        return { name, waitMs, signal: opts.signal, onUnavailable };
    }
    async *#watch({ name, waitMs, signal, onUnavailable }) {
        let index = 0; // the last index yielded; 0 before the first (every index is at least 1)
        let backoff = 0;
        for (;;) {
            signal?.throwIfAborted();
            let state;
            try {
                state = await this.#blockingQuery(name, index, waitMs, signal);
            }
            catch (err) {
                if (signal?.aborted)
                    throw signal.reason;
                if (!(err instanceof UnavailableError))
                    throw err;
                onUnavailable?.(err);
                backoff = Math.min(Math.max(2 * backoff, MIN_BACKOFF_MS), MAX_BACKOFF_MS);
                await sleep(backoff, signal);
                continue;
            }
            backoff = 0;
            if (state.index !== index) {
                index = state.index;
                yield state;
            }
        }
    }
    /** Sends one blocking query of a watch: resolves with the state the server answered and its Fence-Index. */
    async #blockingQuery(name, index, waitMs, signal) {
        const op = "watch";
        const r = await this.request("GET", `/v1/locks/${escapeSegment(name)}?index=${index}&wait_ms=${waitMs}`, { signal, extraMs: waitMs });
        if (r.status !== 200)
            throw this.#answerError(r);
        const body = this.#objectOf(op, name, r);
        if (body.name !== name)
            throw this.#malformed(op, name);
        const header = r.headers.get("Fence-Index");
        if (header === null) {
            // A server older than blocking queries ignores index and answers at once:
            // asking again would be a busy loop.
            throw new NotImplementedError("not_implemented", r.status, `${opName(op, name)}: the fence server at ${this.server} does not answer blocking queries (no Fence-Index header): it is older than this client`);
        }
        const next = /^[0-9]+$/.test(header) ? Number(header) : NaN;
        if (!Number.isSafeInteger(next) || next < 1)
            throw this.#malformed(op, name);
        return { ...lockInfoOf(body, name), index: next };
    }
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
    async revoke(name) {
        const op = "revoke";
        checkName(op, "name", name);
        const r = await this.#json(op, name, "POST", `/v1/locks/${escapeSegment(name)}/revoke`, { json: {} });
        if (r.name !== name || r.revoked !== true)
            throw this.#malformed(op, name);
    }
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
    async withLock(name, fn, opts = {}) {
        if (typeof fn !== "function")
            throw invalid("withLock", typeof name === "string" ? name : "", "fn", undefined, "must be a function");
        const lease = await this.acquire(name, { ...opts, waitMs: opts.waitMs ?? Infinity, autoRenew: opts.autoRenew ?? true });
        const signal = opts.signal ? AbortSignal.any([lease.signal, opts.signal]) : lease.signal;
        let result;
        try {
            result = await fn(lease, signal);
        }
        catch (err) {
            // Release even a lost lease: the server may still hold it (the local deadline
            // is earlier than the server's), and releasing frees it for the next holder.
            await lease.release().catch(() => undefined);
            throw err;
        }
        const reason = lease.signal.aborted ? lease.signal.reason : undefined;
        const lost = reason !== undefined && !(reason instanceof LeaseReleasedError) ? reason : undefined; // fn may release it itself
        try {
            await lease.release();
        }
        catch (err) {
            // 410: the lease ended before the release, so fn ran (partly) without it.
            if (lost === undefined && err instanceof NotHeldError)
                throw err;
        }
        if (lost !== undefined)
            throw lost;
        return result;
    }
    /** The request of a lock or key operation: resolves with the 200 answer's JSON object. */
    async #json(op, name, method, path, init) {
        const r = await this.request(method, path, init);
        if (r.status !== 200)
            throw this.#answerError(r);
        return this.#objectOf(op, name, r);
    }
    /** Returns the JSON object of a 200 answer, or throws the error of a malformed one. */
    #objectOf(op, name, r) {
        let v;
        try {
            v = JSON.parse(textDecoder.decode(r.body));
        }
        catch {
            throw this.#malformed(op, name);
        }
        if (v === null || typeof v !== "object" || Array.isArray(v))
            throw this.#malformed(op, name);
        return v;
    }
    /**
     * Sends one request and reads its whole answer, whatever its status, failing over
     * between the servers (see {@link FenceClient}). Used by KV; not part of the public
     * API.
     * @internal
     */
    async request(method, path, init) {
        const headers = { ...init.headers };
        let body = init.body;
        if (init.json !== undefined) {
            body = JSON.stringify(init.json);
            headers["Content-Type"] = "application/json";
        }
        if (this.#auth)
            headers["Authorization"] = `Bearer ${this.#auth}`;
        const extra = init.extraMs ?? 0;
        const whole = AbortSignal.timeout(this.#timeoutMs + extra);
        const n = this.servers.length;
        const first = this.#cur;
        const fails = [];
        let lastErr;
        let lastAnswer;
        let uncertain = false;
        for (let i = 0; i < n; i++) {
            const k = (first + i) % n;
            const server = this.servers[k];
            const attempt = AbortSignal.timeout(this.#attemptMs + extra);
            const signal = AbortSignal.any(init.signal ? [init.signal, whole, attempt] : [whole, attempt]);
            try {
                // Never follow a redirect: the server sends none, and one from elsewhere (a
                // proxy cleaning a path) could point the request at another lock.
                const res = await fetch(server + path, { method, headers, body, signal, redirect: "manual" });
                const data = new Uint8Array(await res.arrayBuffer());
                const answer = { status: res.status, headers: res.headers, body: data, server, uncertain };
                if (n === 1 || !FAILOVER_STATUS.has(res.status)) {
                    this.#cur = k;
                    return answer;
                }
                uncertain = true;
                lastAnswer = { ...answer, uncertain };
                fails.push(`at ${server}: ${res.status} ${STATUS_TEXT[res.status] ?? ""}`.trimEnd());
            }
            catch (err) {
                if (init.signal?.aborted)
                    throw init.signal.reason;
                lastErr = err;
                uncertain ||= !notSent(err);
                fails.push(`at ${server}: ${reachReason(err)}`);
            }
            if (whole.aborted)
                break; // requestTimeoutMs is over: no time for another server
        }
        if (lastAnswer)
            return lastAnswer;
        throw new UnavailableError("unavailable", undefined, `cannot reach the fence server ${fails.join("; ")}`, { cause: lastErr });
    }
    /** Returns the error of a non-200 answer: the server's error, or a description of a foreign answer. */
    #answerError(r) {
        let body;
        try {
            const v = JSON.parse(textDecoder.decode(r.body));
            if (v !== null && typeof v === "object" && typeof v.code === "string" && v.code !== "")
                body = v;
        }
        catch {
            // not fence's JSON: described below
        }
        if (body)
            return errorFromBody(r.status, body);
        const status = `${r.status} ${STATUS_TEXT[r.status] ?? ""}`.trimEnd();
        if (r.status === 502 || r.status === 503 || r.status === 504) {
            return new UnavailableError("unavailable", r.status, `cannot reach the fence server at ${r.server}: ${status}`);
        }
        let text = textDecoder.decode(r.body).split(/\s+/).filter(Boolean).join(" ");
        if (text.length > 200)
            text = text.slice(0, 200) + "...";
        return new FenceError("unexpected", r.status, `unexpected answer from ${r.server} (not a fence server?): ${status}${text ? ": " + text : ""}`);
    }
    /** @internal */
    answerError(r) {
        return this.#answerError(r);
    }
    #malformed(op, name) {
        return new UnavailableError("unavailable", 200, `${opName(op, name)}: malformed answer from the fence server at ${this.server}`);
    }
    /** @internal */
    malformed(op, name) {
        return this.#malformed(op, name);
    }
}
/**
 * KV is the server's fenced key-value store: a write is stored only if its fence's
 * token is at least the highest the key has accepted (and of the lock that fences it).
 * Get it as {@link FenceClient.kv}.
 */
export class KV {
    #c;
    /** Returns the store of client c; use {@link FenceClient.kv}. */
    constructor(c) {
        this.#c = c;
    }
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
    async put(key, value, fence, opts = {}) {
        const op = "put";
        checkName(op, "key", key);
        const headers = fenceHeaders(op, key, fence);
        headers["Fence-Attempt"] = attemptId(op, key, opts);
        let body;
        if (typeof value === "string")
            body = new TextEncoder().encode(value);
        else if (value instanceof Uint8Array)
            body = value;
        else if (value instanceof ArrayBuffer)
            body = new Uint8Array(value);
        else
            throw invalid(op, key, "value", undefined, "must be a string, a Uint8Array or an ArrayBuffer");
        headers["Content-Type"] = "application/octet-stream";
        const r = await this.#c.request("PUT", `/v1/kv/${escapeSegment(key)}`, { headers, body });
        if (r.status !== 200)
            throw this.#c.answerError(r);
    }
    /**
     * Advances key's fence to `fence` without writing a value. Rejects as
     * {@link KV.put} does, and with a {@link NotImplementedError} if the store cannot fence
     * without writing.
     */
    async fence(key, fence) {
        const op = "fence";
        checkName(op, "key", key);
        const headers = fenceHeaders(op, key, fence);
        const r = await this.#c.request("POST", `/v1/fences/${escapeSegment(key)}`, { headers });
        if (r.status !== 200)
            throw this.#c.answerError(r);
    }
    /**
     * Removes key's value if the server admits the fence (a {@link FenceSpec} or a
     * {@link Lease}), as {@link KV.put} admits a write: the key keeps its fence (now this
     * delete's), so a stale writer is still refused, and {@link KV.get} then resolves
     * with a null value. Rejects with a {@link NotFoundError} if the key holds no value
     * (never written, only fenced, or already deleted; nothing changed), and as
     * {@link KV.put} does otherwise. Its attempts carry one attempt id, as put's do.
     */
    async delete(key, fence, opts = {}) {
        const op = "delete";
        checkName(op, "key", key);
        const headers = fenceHeaders(op, key, fence);
        headers["Fence-Attempt"] = attemptId(op, key, opts);
        const r = await this.#c.request("DELETE", `/v1/kv/${escapeSegment(key)}`, { headers });
        if (r.status !== 200)
            throw this.#c.answerError(r);
    }
    /**
     * Purges key: removes its value and its fence, so that the next write under any lock
     * is admitted. An admin's operation (the admin right, with scoped tokens), and the
     * one way a key's fence goes back: for a key fenced under the wrong lock. Rejects
     * with a {@link NotFoundError} if the key has neither a value nor a fence, a
     * {@link NotImplementedError} if the server's store cannot purge, an
     * {@link InvalidError} for a bad key, an {@link UnavailableError} if the server cannot
     * be reached.
     */
    async purge(key) {
        const op = "purge";
        checkName(op, "key", key);
        const r = await this.#c.request("DELETE", `/v1/kv/${escapeSegment(key)}?purge=true`, {});
        if (r.status !== 200)
            throw this.#c.answerError(r);
    }
    /**
     * Resolves with the value under key and the key's fence (never a lease id); a key
     * that is fenced but holds no value (only fenced, or its value deleted) resolves with
     * a null value. Rejects with a {@link NotFoundError} if key was never written nor
     * fenced (or was purged), an {@link InvalidError} for a bad key, an
     * {@link UnavailableError} if the server cannot be reached.
     */
    async get(key) {
        const op = "get";
        checkName(op, "key", key);
        const r = await this.#c.request("GET", `/v1/kv/${escapeSegment(key)}`, {});
        // A key without a value is 404; with a fence, the 404 carries it.
        const fencedOnly = r.status === 404 && r.headers.get("Fence-Token") !== null && r.headers.get("Fence-Lock") !== null;
        if (r.status !== 200 && !fencedOnly)
            throw this.#c.answerError(r);
        const tok = Number(r.headers.get("Fence-Token") ?? "");
        let lock;
        try {
            lock = decodeURIComponent(r.headers.get("Fence-Lock") ?? "");
        }
        catch {
            throw this.#c.malformed(op, key);
        }
        if (!Number.isSafeInteger(tok) || tok < 1 || lock === "")
            throw this.#c.malformed(op, key);
        const value = fencedOnly ? null : r.body;
        return { value, token: tok, lock, text: () => (value === null ? "" : textDecoder.decode(value)) };
    }
}
/** lockInfoOf returns the LockInfo of the server's JSON state of the lock name. */
function lockInfoOf(r, name) {
    const n = (v) => (typeof v === "number" ? v : 0);
    const s = (v) => (typeof v === "string" ? v : "");
    const holders = [];
    if (Array.isArray(r.holders)) {
        for (const h of r.holders) {
            if (h === null || typeof h !== "object")
                continue;
            const o = h;
            holders.push({ slot: n(o.slot), token: n(o.token), owner: s(o.owner), expiresInMs: n(o.expires_in_ms) });
        }
    }
    return {
        name: String(r.name ?? name), held: r.held === true, token: n(r.token), owner: s(r.owner), lastToken: n(r.last_token),
        expiresInMs: n(r.expires_in_ms), limit: n(r.limit), shared: r.shared === true, holders,
    };
}
/** leaderOf returns the leader that the state of an election's lock shows. */
function leaderOf(s) {
    if (!s.held)
        return { name: s.name, leading: false, owner: "", epoch: 0, expiresInMs: 0 };
    return { name: s.name, leading: true, owner: s.owner, epoch: s.token, expiresInMs: s.expiresInMs };
}
/** leaderChanges yields the leader of the first state, then of each state whose epoch differs from the last one yielded. */
async function* leaderChanges(states) {
    let last;
    for await (const s of states) {
        const ld = leaderOf(s);
        if (ld.epoch === last)
            continue; // the same term: a change of the lock that is no change of leader
        last = ld.epoch;
        yield ld;
    }
}
/** fenceHeaders checks a write's fence and returns its headers. */
function fenceHeaders(op, key, f) {
    if (f instanceof Lease)
        return { ...f.fence() };
    if (f === null || typeof f !== "object")
        throw invalid(op, key, "fence", undefined, "must be a Lease or {lock, token, lease?}");
    let lock;
    try {
        lock = checkName(op, "name", f.lock);
    }
    catch (e) {
        throw e instanceof InvalidError ? invalid(op, key, "lock", typeof f.lock === "string" ? f.lock : undefined, e.reason) : e;
    }
    const token = checkToken(op, key, "token", f.token);
    const h = { "Fence-Token": String(token), "Fence-Lock": encodeURIComponent(lock) };
    if (f.lease !== undefined)
        h["Fence-Lease"] = checkLeaseId(op, key, f.lease);
    return h;
}
/** attemptId returns a write's attempt id: opts.attempt, checked, or 128 random bits. */
function attemptId(op, key, opts) {
    if (opts === null || typeof opts !== "object")
        throw invalid(op, key, "options", undefined, "must be an object");
    const v = opts.attempt;
    if (v === undefined)
        return randomId();
    if (typeof v !== "string")
        throw invalid(op, key, "attempt", undefined, `must be a string, not ${typeof v}`);
    if (v === "")
        throw invalid(op, key, "attempt", v, "is empty");
    if (v.length > 64)
        throw invalid(op, key, "attempt", v, `is ${v.length} bytes, longer than 64`);
    if (!/^[!-~]+$/.test(v))
        throw invalid(op, key, "attempt", v, "must be printable ASCII without spaces");
    return v;
}
/** parseServer returns the base URL of s (http(s)://HOST:PORT[/path], or HOST:PORT), or throws an InvalidError. */
function parseServer(s) {
    const bad = () => new InvalidError(undefined, `invalid server URL ${quote(String(s))}: want http://HOST:PORT or https://HOST:PORT`, "server", "want http://HOST:PORT or https://HOST:PORT");
    if (typeof s !== "string" || s === "")
        throw bad();
    const withScheme = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(s) ? s : `http://${s}`;
    let u;
    try {
        u = new URL(withScheme);
    }
    catch {
        throw bad();
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "" || u.search !== "" || u.hash !== "" || u.username !== "" || u.password !== "") {
        throw bad();
    }
    return (u.origin + u.pathname).replace(/\/+$/, "");
}
/** The statuses that move a request to the next server: the server cannot serve it now, or a proxy cannot reach it. */
const FAILOVER_STATUS = new Set([502, 503, 504]);
/** notSent reports whether fetch failed to connect, so that nothing of the request can have been applied. */
function notSent(err) {
    const e = err;
    const code = e?.cause?.code ?? e?.cause?.errors?.find((x) => x?.code)?.code;
    return code === "ECONNREFUSED" || code === "UND_ERR_CONNECT_TIMEOUT" || code === "ENOTFOUND" || code === "EHOSTUNREACH" || code === "ENETUNREACH";
}
/** randomId returns a request id: 128 bits from crypto.getRandomValues, as 32 hex digits. */
function randomId() {
    const b = new Uint8Array(16);
    globalThis.crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
function positive(field, v) {
    if (typeof v !== "number" || !(v > 0) || !Number.isFinite(v)) {
        throw new InvalidError(undefined, `invalid client option ${field} ${quote(String(v))}: must be a positive number of ms`, field, "must be a positive number of ms");
    }
    return v;
}
/** reachReason says in a few words why a request got no answer. */
function reachReason(err) {
    const e = err;
    if (e?.name === "TimeoutError")
        return "timeout";
    let c = (e?.cause ?? e);
    if (c?.name === "TimeoutError")
        return "timeout";
    const code = c?.code ?? c?.errors?.find((x) => x?.code)?.code;
    switch (code) {
        case "ECONNREFUSED":
            return "connection refused";
        case "ECONNRESET":
        case "EPIPE":
            return "connection reset";
        case "UND_ERR_SOCKET":
            return "connection closed";
        case "ETIMEDOUT":
        case "UND_ERR_CONNECT_TIMEOUT":
        case "UND_ERR_HEADERS_TIMEOUT":
        case "UND_ERR_BODY_TIMEOUT":
            return "timeout";
        case "ENOTFOUND":
            return "no such host";
        case "EAI_AGAIN":
            return "DNS lookup failed";
        case "EHOSTUNREACH":
        case "ENETUNREACH":
            return "no route to host";
    }
    if (code && /CERT|TLS|SSL|UNABLE_TO_VERIFY|SELF_SIGNED/.test(code))
        return `TLS: ${c.message ?? code}`;
    return c?.message || e?.message || String(err);
}
function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const t = setTimeout(done, Math.max(0, ms));
        function done() {
            signal?.removeEventListener("abort", abort);
            resolve();
        }
        function abort() {
            clearTimeout(t);
            reject(signal.reason);
        }
        signal?.addEventListener("abort", abort, { once: true });
    });
}
const now = () => performance.now();
const STATUS_TEXT = {
    301: "Moved Permanently", 302: "Found", 307: "Temporary Redirect", 308: "Permanent Redirect",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 410: "Gone", 413: "Content Too Large", 500: "Internal Server Error", 501: "Not Implemented",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
};
