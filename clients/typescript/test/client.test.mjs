// Tests of the client against a real `fence serve` (see serve.mjs).

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import {
  FenceClient,
  HeldError,
  InvalidError,
  Lease,
  LeaseReleasedError,
  NotFoundError,
  NotHeldError,
  StaleTokenError,
  UnissuedTokenError,
  LeaseRequiredError,
  WrongLockError,
} from "../dist/index.js";
import { abortedWithin as aborted, startServer, uniqueName } from "./helpers/serve.mjs";

let server;
let fence;

before(async () => {
  server = await startServer();
  fence = new FenceClient({ server: server.url });
});
after(async () => {
  await server?.stop();
});

describe("acquire and release", () => {
  test("acquire grants a lease that release ends", async () => {
    const name = uniqueName("job");
    const before = Date.now();
    const lease = await fence.acquire(name, { ttlMs: 5000 });
    assert.ok(lease instanceof Lease);
    assert.equal(lease.name, name);
    assert.ok(Number.isSafeInteger(lease.token) && lease.token >= 1, `token ${lease.token}`);
    assert.match(lease.id, /^[!-~]+$/);
    assert.equal(lease.ttlMs, 5000);
    const dl = lease.deadline.getTime();
    assert.ok(dl > Date.now() && dl <= before + 5000 + 50, `deadline ${dl - before}ms after the request, want <= 5000`);
    assert.equal(lease.held, true);
    assert.equal(lease.signal.aborted, false);

    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.token], [true, lease.token]);

    await lease.release();
    assert.equal(lease.signal.aborted, true);
    assert.ok(lease.signal.reason instanceof LeaseReleasedError, `reason ${lease.signal.reason}`);
    assert.ok(lease.signal.reason instanceof NotHeldError);
    assert.equal(lease.held, false);
    assert.equal((await fence.inspect(name)).held, false);
    await lease.release(); // a second release resolves

    const next = await fence.acquire(name, { ttlMs: 5000 });
    assert.ok(next.token > lease.token, `next token ${next.token}, want > ${lease.token}`);
    await next.release();
  });

  test("a name with slashes and dots round-trips as one segment", async () => {
    const name = `${uniqueName("jobs")}/nightly/../x.y`;
    const lease = await fence.acquire(name, { ttlMs: 5000 });
    assert.equal(lease.name, name);
    assert.equal((await fence.inspect(name)).name, name);
    await lease.release();
  });

  test("a held lock rejects with HeldError, expiresInMs and the server's line", async () => {
    const name = uniqueName("held");
    const a = await fence.acquire(name, { ttlMs: 10_000 });
    try {
      const err = await fence.acquire(name, { ttlMs: 1000 }).then(() => assert.fail("acquired a held lock"), (e) => e);
      assert.ok(err instanceof HeldError, `got ${err}`);
      assert.equal(err.code, "held");
      assert.equal(err.status, 409);
      assert.equal(err.lockName, name);
      assert.ok(err.expiresInMs > 0 && err.expiresInMs <= 10_000, `expiresInMs ${err.expiresInMs}`);
      assert.match(err.message, new RegExp(`^lock ${JSON.stringify(name)} is held \\(expires in [0-9.]+m?s\\)$`));

      const t0 = performance.now();
      const waited = await fence.acquire(name, { ttlMs: 1000, waitMs: 300 }).then(() => assert.fail("acquired a held lock"), (e) => e);
      const took = performance.now() - t0;
      assert.ok(waited instanceof HeldError, `got ${waited}`);
      assert.ok(took >= 290, `a 300ms wait ended after ${took}ms`);
      assert.ok(waited.expiresInMs < err.expiresInMs, `expiresInMs after the wait ${waited.expiresInMs}, before ${err.expiresInMs}`);
    } finally {
      await a.release();
    }
  });

  test("a waiter is woken by the release, well before the holder's TTL", async () => {
    const name = uniqueName("wait");
    const a = await fence.acquire(name, { ttlMs: 30_000 });
    const t0 = performance.now();
    const waiting = fence.acquire(name, { ttlMs: 5000, waitMs: 20_000 });
    await sleep(1000);
    const released = performance.now();
    await a.release();
    const b = await waiting;
    const took = performance.now() - t0;
    assert.ok(b.token > a.token, `waiter's token ${b.token}, want > ${a.token}`);
    assert.ok(took < 10_000, `woken after ${took}ms`);
    // Dated from the request's sending plus waited_ms: never later than the server's
    // expiry, and not from the poll's start either (that would lose the 1s waited).
    const left = b.remainingMs();
    const sinceRelease = performance.now() - released;
    assert.ok(left <= 5000, `remaining ${left}ms of a 5000ms lease`);
    assert.ok(left >= 5000 - sinceRelease - 250, `remaining ${left}ms of a 5000ms lease granted at most ${sinceRelease}ms ago`);
    await b.release();
  });

  test("a wait longer than one poll polls again until granted", async () => {
    const name = uniqueName("poll");
    const short = new FenceClient({ server: server.url, maxPollMs: 150 });
    const a = await fence.acquire(name, { ttlMs: 30_000 });
    const waiting = short.acquire(name, { ttlMs: 5000, waitMs: 10_000 });
    await sleep(800); // several polls of 150ms
    await a.release();
    const b = await waiting;
    assert.ok(b.token > a.token);
    await b.release();
  });

  test("an aborted signal ends the wait with its reason", async () => {
    const name = uniqueName("abort");
    const a = await fence.acquire(name, { ttlMs: 30_000 });
    try {
      const ac = new AbortController();
      const t0 = performance.now();
      const waiting = fence.acquire(name, { waitMs: Infinity, signal: ac.signal });
      setTimeout(() => ac.abort(new Error("caller gave up")), 200);
      await assert.rejects(waiting, { message: "caller gave up" });
      assert.ok(performance.now() - t0 < 5000);
      // The server did not grant the lock to the gone waiter.
      assert.equal((await fence.inspect(name)).token, a.token);
    } finally {
      await a.release();
    }
  });
});

describe("renew", () => {
  test("renew moves the deadline, keeping the lock past its first TTL", async () => {
    const name = uniqueName("renew");
    const lease = await fence.acquire(name, { ttlMs: 1000, autoRenew: false });
    await sleep(600);
    const left = lease.remainingMs();
    await lease.renew();
    assert.ok(lease.remainingMs() > left + 300, `remaining ${lease.remainingMs()}ms after renewing, ${left}ms before`);
    await sleep(600); // 1.2s after the grant: held only thanks to the renewal
    assert.equal(lease.signal.aborted, false);
    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.token], [true, lease.token]);
    await lease.renew({ ttlMs: 3000 });
    assert.equal(lease.ttlMs, 3000);
    await lease.release();
  });

  test("auto-renew keeps a lease held over several TTLs", async () => {
    const name = uniqueName("auto");
    const lease = await fence.acquire(name, { ttlMs: 900 });
    await sleep(2500);
    assert.equal(lease.signal.aborted, false, `lost: ${lease.signal.reason}`);
    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.token], [true, lease.token]);
    await lease.release();
  });

  test("renew of a lease not held rejects with NotHeldError", async () => {
    const name = uniqueName("gone");
    const lease = await fence.acquire(name, { ttlMs: 5000, autoRenew: false });
    await fence.release(name, lease.id);
    const err = await fence.renew(name, lease.id, { ttlMs: 1000 }).then(() => assert.fail("renewed"), (e) => e);
    assert.ok(err instanceof NotHeldError, `got ${err}`);
    assert.equal(err.status, 410);
    assert.equal(err.message, `renew ${JSON.stringify(name)}: lease not held (expired, released, or never granted)`);
    // Lease.renew learns it too, and aborts the signal with the server's error.
    await assert.rejects(lease.renew(), NotHeldError);
    assert.ok(lease.signal.aborted);
    assert.ok(lease.signal.reason instanceof NotHeldError);
  });

  test("a lease released by another path aborts its signal at the next renewal", async () => {
    const name = uniqueName("lost");
    const lease = await fence.acquire(name, { ttlMs: 900 });
    const other = new FenceClient({ server: server.url });
    await other.release(name, lease.id);
    const reason = await aborted(lease.signal, 3000);
    assert.ok(reason instanceof NotHeldError, `reason ${reason}`);
    assert.ok(!(reason instanceof LeaseReleasedError));
    assert.equal(reason.status, 410);
    assert.match(reason.message, /^renew ".*": lease not held/);
    assert.equal(lease.held, false);
  });
});

describe("withLock", () => {
  test("runs fn holding the lock and releases it after", async () => {
    const name = uniqueName("with");
    let seen;
    const result = await fence.withLock(name, async (lease, signal) => {
      seen = lease;
      assert.equal(signal.aborted, false);
      const info = await fence.inspect(name);
      assert.deepEqual([info.held, info.token], [true, lease.token]);
      return "done";
    }, { ttlMs: 5000 });
    assert.equal(result, "done");
    assert.ok(seen.signal.reason instanceof LeaseReleasedError);
    assert.equal((await fence.inspect(name)).held, false);
  });

  test("rejects with fn's error and still releases", async () => {
    const name = uniqueName("throw");
    await assert.rejects(fence.withLock(name, () => { throw new Error("job failed"); }, { ttlMs: 5000 }), { message: "job failed" });
    assert.equal((await fence.inspect(name)).held, false);
  });

  test("rejects if the lease was lost while fn ran, and fn's signal aborts", async () => {
    const name = uniqueName("withlost");
    const other = new FenceClient({ server: server.url });
    const err = await fence.withLock(name, async (lease, signal) => {
      await other.release(name, lease.id); // someone else ends it
      await aborted(signal, 3000);
      return "finished anyway";
    }, { ttlMs: 900 }).then((v) => assert.fail(`resolved with ${v}`), (e) => e);
    assert.ok(err instanceof NotHeldError, `got ${err}`);
  });

  test("rejects if the lease was lost before fn returned, even unnoticed", async () => {
    const name = uniqueName("unnoticed");
    const other = new FenceClient({ server: server.url });
    const err = await fence.withLock(name, async (lease) => {
      await other.release(name, lease.id); // fn returns before any renewal could notice
      return "finished";
    }, { ttlMs: 30_000 }).then((v) => assert.fail(`resolved with ${v}`), (e) => e);
    assert.ok(err instanceof NotHeldError, `got ${err}`);
    assert.equal(err.status, 410);
  });

  test("waits for the lock by default", async () => {
    const name = uniqueName("withwait");
    const a = await fence.acquire(name, { ttlMs: 30_000 });
    const running = fence.withLock(name, (lease) => lease.token, { ttlMs: 5000 });
    await sleep(300);
    await a.release();
    assert.ok((await running) > a.token);
  });
});

describe("kv", () => {
  test("put with a lease, get the value with its fence", async () => {
    const key = uniqueName("ledger");
    const lease = await fence.acquire(uniqueName("report"), { ttlMs: 5000 });
    await fence.kv.put(key, "balance=100", lease);
    const item = await fence.kv.get(key);
    assert.equal(item.text(), "balance=100");
    assert.equal(item.token, lease.token);
    assert.equal(item.lock, lease.name);

    const bytes = new Uint8Array([0, 1, 2, 255]);
    await fence.kv.put(key, bytes, { lock: lease.name, token: lease.token, lease: lease.id });
    assert.deepEqual((await fence.kv.get(key)).value, bytes);
    await lease.release();
  });

  test("get of a key never written rejects with NotFoundError", async () => {
    const err = await fence.kv.get(uniqueName("nothing")).then(() => assert.fail("found"), (e) => e);
    assert.ok(err instanceof NotFoundError, `got ${err}`);
    assert.equal(err.status, 404);
  });

  test("a token of another lock is refused with WrongLockError", async () => {
    const key = uniqueName("fenced");
    const lockA = uniqueName("a");
    const a = await fence.acquire(lockA, { ttlMs: 5000 });
    await fence.kv.put(key, "v1", a);
    // A real grant of another lock (a made-up token is refused as unissued).
    const other = uniqueName("b");
    const b = await fence.acquire(other, { ttlMs: 5000 });
    const err = await fence.kv.put(key, "v2", b).then(() => assert.fail("stored"), (e) => e);
    assert.ok(err instanceof WrongLockError, `got ${err}`);
    assert.deepEqual([err.key, err.lock, err.got, err.status], [key, lockA, other, 409]);
    assert.equal(err.message, `put ${JSON.stringify(key)}: token of lock ${JSON.stringify(other)}, but the key is fenced by lock ${JSON.stringify(lockA)}`);
    assert.equal((await fence.kv.get(key)).text(), "v1");
    await a.release();
    await b.release();
  });

  test("fence advances the key without writing; an older token is then stale", async () => {
    const key = uniqueName("adv");
    const lock = uniqueName("adv-lock");
    const a = await fence.acquire(lock, { ttlMs: 5000 });
    await fence.kv.put(key, "old", a);
    await a.release();
    const b = await fence.acquire(lock, { ttlMs: 5000 });
    await fence.kv.fence(key, b);
    const err = await fence.kv.put(key, "late", { lock, token: a.token }).then(() => assert.fail("stored"), (e) => e);
    assert.ok(err instanceof StaleTokenError, `got ${err}`);
    assert.deepEqual([err.highest, err.token], [b.token, a.token]);
    assert.equal((await fence.kv.get(key)).text(), "old");
    await b.release();
  });

  test("a write with a Lease sends its lease id: the same token is admitted again", async () => {
    const key = uniqueName("again");
    const lease = await fence.acquire(uniqueName("again-lock"), { ttlMs: 5000 });
    await fence.kv.put(key, "first", lease);
    await fence.kv.put(key, "second", lease); // the same token: admitted only with Fence-Lease
    await fence.kv.fence(key, lease);
    // Without the lease, the live lease's token is refused (P9): anyone can read it.
    const err = await fence.kv.put(key, "third", { lock: lease.name, token: lease.token }).then(() => assert.fail("stored"), (e) => e);
    assert.ok(err instanceof LeaseRequiredError, `without the lease: got ${err}`);
    assert.deepEqual([err.code, err.status, err.lock, err.token, err.key], ["lease_required", 409, lease.name, lease.token, key]);
    assert.equal(err.message, `put ${JSON.stringify(key)}: token ${lease.token} of lock ${JSON.stringify(lease.name)} belongs to a live lease: the write must carry its lease id (Fence-Lease)`);
    const fresh = uniqueName("again-fresh");
    const none = await fence.kv.fence(fresh, { lock: lease.name, token: lease.token }).then(() => assert.fail("fenced"), (e) => e);
    assert.ok(none instanceof LeaseRequiredError, `fence of a new key without the lease: got ${none}`);
    assert.equal((await fence.kv.get(key)).text(), "second");
    await lease.release();
    // Once the lease has ended, the token alone is admitted as any token is:
    // stale where its lease wrote, written on a new key.
    const stale = await fence.kv.put(key, "third", { lock: lease.name, token: lease.token }).then(() => assert.fail("stored"), (e) => e);
    assert.ok(stale instanceof StaleTokenError && stale.sameToken, `after the release, without the lease: got ${stale}`);
    await fence.kv.put(fresh, "token only", { lock: lease.name, token: lease.token });
    assert.equal((await fence.kv.get(fresh)).text(), "token only");
  });

  test("delete removes the value and keeps the fence; purge removes both", async () => {
    const key = uniqueName("del");
    const lock = uniqueName("del-lock");
    const a = await fence.acquire(lock, { ttlMs: 5000 });
    await fence.kv.put(key, "v1", a);
    await a.release();
    const b = await fence.acquire(lock, { ttlMs: 5000 });
    await fence.kv.delete(key, b);
    const item = await fence.kv.get(key);
    assert.deepEqual([item.value, item.token, item.lock, item.text()], [null, b.token, lock, ""]);
    // The fence stayed: A's older token is still refused.
    const stale = await fence.kv.put(key, "late", a).then(() => assert.fail("stored"), (e) => e);
    assert.ok(stale instanceof StaleTokenError, `got ${stale}`);
    assert.deepEqual([stale.highest, stale.token], [b.token, a.token]);
    const again = await fence.kv.delete(key, b).then(() => assert.fail("deleted twice"), (e) => e);
    assert.ok(again instanceof NotFoundError, `delete of a deleted key: got ${again}`);
    const never = await fence.kv.delete(uniqueName("never"), b).then(() => assert.fail("deleted"), (e) => e);
    assert.ok(never instanceof NotFoundError, `delete of a key never written: got ${never}`);
    await b.release();

    // Purge: the key's value and fence go, so another lock may write it.
    await fence.kv.purge(key);
    const gone = await fence.kv.get(key).then(() => assert.fail("found"), (e) => e);
    assert.ok(gone instanceof NotFoundError, `get of a purged key: got ${gone}`);
    const twice = await fence.kv.purge(key).then(() => assert.fail("purged twice"), (e) => e);
    assert.ok(twice instanceof NotFoundError, `purge of a purged key: got ${twice}`);
    const c = await fence.acquire(uniqueName("del-other"), { ttlMs: 5000 });
    await fence.kv.put(key, "v2", c);
    assert.equal((await fence.kv.get(key)).text(), "v2");
    await c.release();
  });

  test("a token the server never issued is refused with UnissuedTokenError", async () => {
    const key = uniqueName("unissued");
    const lease = await fence.acquire(uniqueName("unissued-lock"), { ttlMs: 5000 });
    await fence.kv.put(key, "real", lease);
    const ahead = await fence.kv.put(key, "typo", { lock: lease.name, token: lease.token + 1000 }).then(() => assert.fail("stored"), (e) => e);
    assert.ok(ahead instanceof UnissuedTokenError, `got ${ahead}`);
    assert.deepEqual([ahead.code, ahead.status, ahead.lock, ahead.token, ahead.last, ahead.otherLease], ["unissued_token", 409, lease.name, lease.token + 1000, lease.token, false]);
    const never = uniqueName("never-granted");
    const none = await fence.kv.fence(uniqueName("unissued2"), { lock: never, token: 1 }).then(() => assert.fail("fenced"), (e) => e);
    assert.ok(none instanceof UnissuedTokenError, `got ${none}`);
    assert.deepEqual([none.lock, none.last], [never, 0]);
    const other = await fence.kv.put(key, "forged", { lock: lease.name, token: lease.token, lease: "0123456789abcdef0123456789abcdef" }).then(() => assert.fail("stored"), (e) => e);
    assert.ok(other instanceof UnissuedTokenError && other.otherLease, `another lease: got ${other}`);
    assert.equal((await fence.kv.get(key)).text(), "real", "nothing was written");
    await lease.release();
  });

  test("lease.fence() gives headers any HTTP resource can check", async () => {
    const key = uniqueName("raw");
    const lease = await fence.acquire(uniqueName("raw-lock"), { ttlMs: 5000 });
    const h = lease.fence();
    assert.deepEqual(h, { "Fence-Token": String(lease.token), "Fence-Lock": lease.name, "Fence-Lease": lease.id });
    const res = await fetch(`${server.url}/v1/kv/${key}`, { method: "PUT", headers: h, body: "raw" });
    assert.equal(res.status, 200, await res.text());
    assert.equal((await fence.kv.get(key)).text(), "raw");
    await lease.release();
  });
});

describe("list", () => {
  test("list shows the held locks; all also the free names", async () => {
    const prefix = uniqueName("listed");
    const held = await fence.acquire(`${prefix}/held`, { ttlMs: 5000, owner: "lister" });
    const freed = await fence.acquire(`${prefix}/free`, { ttlMs: 5000 });
    await freed.release();
    const all = await fence.list({ prefix, all: true });
    assert.deepEqual(all.map((l) => [l.name, l.held, l.lastToken]), [[`${prefix}/free`, false, freed.token], [`${prefix}/held`, true, held.token]]);
    assert.equal(all[1].owner, "lister");
    assert.equal((await fence.list({ prefix, all: true, limit: 1 })).length, 1);
    assert.deepEqual((await fence.list({ prefix })).map((l) => l.name), [`${prefix}/held`], "held only by default");
    await held.release();
  });

  test("a bad prefix, limit or all is refused before any request", async () => {
    for (const [opts, field] of [[{ prefix: "" }, "prefix"], [{ limit: -1 }, "limit"], [{ limit: 1.5 }, "limit"], [{ limit: 10_001 }, "limit"], [{ all: "yes" }, "all"]]) {
      await assert.rejects(fence.list(opts), (e) => e instanceof InvalidError && e.field === field && e.status === undefined, JSON.stringify(opts));
    }
  });
});

describe("owner and revoke", () => {
  test("inspect reports the owner while the lease is held, and none after", async () => {
    const name = uniqueName("owned");
    const owner = "batch-7:4242 ./reconcile.sh éè";
    const lease = await fence.acquire(name, { ttlMs: 5000, owner });
    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.token, info.owner], [true, lease.token, owner]);
    await lease.release();
    assert.deepEqual([(await fence.inspect(name)).held, (await fence.inspect(name)).owner], [false, ""]);

    const anon = await fence.acquire(name, { ttlMs: 5000 });
    assert.equal((await fence.inspect(name)).owner, "", "an acquire without owner names none");
    await anon.release();
  });

  test("an unprintable owner is refused by the server with field owner", async () => {
    const name = uniqueName("badowner");
    const err = await fence.acquire(name, { owner: "a\tb" }).then(() => assert.fail("acquired"), (e) => e);
    assert.ok(err instanceof InvalidError, `got ${err}`);
    assert.deepEqual([err.field, err.status], ["owner", 400]);
    assert.equal((await fence.inspect(name)).held, false);
  });

  test("an owner over 256 bytes or not a string is refused before any request", async () => {
    for (const owner of ["é".repeat(129), 7]) {
      const err = await fence.acquire("job", { owner }).then(() => assert.fail("acquired"), (e) => e);
      assert.ok(err instanceof InvalidError, `got ${err}`);
      assert.deepEqual([err.field, err.status], ["owner", undefined]);
    }
    const ok = await fence.acquire(uniqueName("maxowner"), { ttlMs: 5000, owner: "é".repeat(128) });
    await ok.release();
  });

  test("revoke ends the holder's lease: a waiter gets a higher token, the holder's signal aborts", async () => {
    const name = uniqueName("revoke");
    const holder = await fence.acquire(name, { ttlMs: 900, owner: "hung" });
    const waiter = fence.acquire(name, { ttlMs: 5000, waitMs: 10_000 });
    const started = Date.now();
    await sleep(50); // the waiter is polling
    await fence.revoke(name);
    const next = await waiter;
    assert.ok(next.token > holder.token, `next token ${next.token}, want > ${holder.token}`);
    assert.ok(Date.now() - started < 5000, "the waiter waited for a TTL, not for the revoke");
    const reason = await aborted(holder.signal, 3000);
    assert.ok(reason instanceof NotHeldError, `reason ${reason}`);
    assert.equal(reason.status, 410);
    await assert.rejects(fence.release(name, holder.id), NotHeldError);
    await next.release();
  });

  test("revoke of a lock not held rejects with NotHeldError (404 not_held)", async () => {
    const name = uniqueName("free");
    for (const setup of [async () => {}, async () => (await fence.acquire(name, { ttlMs: 5000 })).release()]) {
      await setup();
      const err = await fence.revoke(name).then(() => assert.fail("revoked"), (e) => e);
      assert.ok(err instanceof NotHeldError, `got ${err}`);
      assert.deepEqual([err.code, err.status, err.lockName], ["not_held", 404, name]);
      assert.equal(err.message, `revoke ${JSON.stringify(name)}: not held (free, or its lease expired): nothing to revoke`);
    }
    await assert.rejects(fence.revoke(""), InvalidError);
  });
});

describe("heal", () => {
  test("heal raises the lock's counter above the token seen", async () => {
    // fence serve's default store (bolt) is a Healer.
    const name = uniqueName("heal");
    await fence.heal(name, 41);
    const lease = await fence.acquire(name, { ttlMs: 5000 });
    assert.ok(lease.token > 41, `token after heal(41): ${lease.token}`);
    await lease.release();
  });
});

describe("bad input", () => {
  test("an empty name is an InvalidError before any request", async () => {
    const err = await fence.acquire("").then(() => assert.fail("acquired"), (e) => e);
    assert.ok(err instanceof InvalidError, `got ${err}`);
    assert.deepEqual([err.code, err.field, err.status], ["invalid", "name", undefined]);
    assert.equal(err.message, "acquire: invalid name: is empty");
  });

  test("ttl 0 is an InvalidError", async () => {
    const err = await fence.acquire("job", { ttlMs: 0 }).then(() => assert.fail("acquired"), (e) => e);
    assert.ok(err instanceof InvalidError, `got ${err}`);
    assert.equal(err.field, "ttlMs");
    assert.equal(err.message, 'acquire "job": invalid ttlMs "0": must be an integer between 1 and 86400000');
  });

  test("arguments of the wrong type are InvalidErrors, not crashes", async () => {
    const cases = [
      () => fence.acquire(42),
      () => fence.acquire("job", { ttlMs: "5s" }),
      () => fence.acquire("job", { waitMs: -1 }),
      () => fence.acquire("a\u0000b"),
      () => fence.acquire("x".repeat(256)),
      () => fence.release("job", ""),
      () => fence.renew("job", "id", { ttlMs: 1.5 }),
      () => fence.heal("job", 0),
      () => fence.kv.put("k", "v", { lock: "", token: 1 }),
      () => fence.kv.put("k", "v", { lock: "l", token: 0 }),
      () => fence.kv.put("k", "v", { lock: "l", token: 2 ** 53 }),
      () => fence.kv.put("k", 12, { lock: "l", token: 1 }),
      () => fence.kv.put("k", "v", null),
      () => fence.kv.get(""),
      () => fence.withLock("job", "not a function"),
    ];
    for (const f of cases) {
      const err = await f().then(() => assert.fail(`${f} succeeded`), (e) => e);
      assert.ok(err instanceof InvalidError, `${f}: got ${err}`);
      assert.ok(!err.message.includes("\n"), `${f}: message of several lines`);
    }
  });

  test("a lease id is never echoed in an error", async () => {
    const err = await fence.release("job", "has space").then(() => assert.fail("released"), (e) => e);
    assert.ok(err instanceof InvalidError);
    assert.ok(!err.message.includes("has space"), err.message);
  });
});

describe("error answers of issue 29's API", () => {
  // The bodies as the HTTP API documents them (fencehttp/openapi.json); the tests
  // against a server above check that it sends them.
  test("409 unissued_token is an UnissuedTokenError with its detail", async () => {
    const { errorFromBody } = await import("../dist/errors.js");
    const e = errorFromBody(409, { error: 'put "k": token 999 of lock "nightly" was never issued (last 9)', code: "unissued_token", key: "k", lock: "nightly", token: 999, last: 9 });
    assert.ok(e instanceof UnissuedTokenError, `got ${e}`);
    assert.deepEqual([e.code, e.status, e.key, e.lock, e.token, e.last, e.otherLease, e.message],
      ["unissued_token", 409, "k", "nightly", 999, 9, false, 'put "k": token 999 of lock "nightly" was never issued (last 9)']);
    const o = errorFromBody(409, { error: "x", code: "unissued_token", lock: "l", token: 3, last: 5, other_lease: true });
    assert.deepEqual([o.otherLease, o.last, o.key], [true, 5, ""]);
  });

  test("400 of a heal beyond the bound is an InvalidError of field seen", async () => {
    const { errorFromBody } = await import("../dist/errors.js");
    const e = errorFromBody(400, { error: "heal \"x\": ...", code: "invalid", field: "seen", last: 4, bound: 4294967296 });
    assert.ok(e instanceof InvalidError, `got ${e}`);
    assert.equal(e.field, "seen");
  });
});
