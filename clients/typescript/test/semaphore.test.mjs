// Semaphores (limit) and shared locks (shared) against a real `fence serve` (see
// serve.mjs): slots, holders, the limit every acquirer shares, writer preference's
// outcome, and fencing per slot.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { FenceClient, HeldError, InvalidError, LimitMismatchError, StaleTokenError } from "../dist/index.js";
import { startServer, uniqueName } from "./helpers/serve.mjs";

let server;
let fence;

// The server is this tree's own fence serve, which has semaphores and shared
// locks on its embedded store: a test that cannot use them fails.
before(async () => {
  server = await startServer();
  fence = new FenceClient({ server: server.url });
});
after(async () => {
  await server?.stop();
});

/** rejection resolves with the error p rejects with, and fails if it resolves. */
const rejection = (p, what) => p.then((l) => assert.fail(`${what}: granted token ${l.token}`), (e) => e);

describe("semaphores", () => {
  test("a semaphore of 2 grants two slots, refuses a third, and inspect lists the holders", async (t) => {
    const name = uniqueName("sem");
    const a = await fence.acquire(name, { limit: 2, ttlMs: 10_000, owner: "a" });
    const b = await fence.acquire(name, { limit: 2, ttlMs: 10_000, owner: "b" });
    assert.deepEqual([a.slot, b.slot].sort(), [0, 1], `slots ${a.slot}, ${b.slot}`);
    assert.ok(b.token > a.token, `tokens ${a.token} then ${b.token}`);

    const err = await rejection(fence.acquire(name, { limit: 2, ttlMs: 1000 }), "a third permit of 2");
    assert.ok(err instanceof HeldError, `got ${err}`);
    assert.ok(err.expiresInMs > 0 && err.expiresInMs <= 10_000, `expiresInMs ${err.expiresInMs}`);

    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.limit, info.shared, info.token, info.lastToken], [true, 2, false, b.token, b.token]);
    const bySlot = [a, b].sort((x, y) => x.slot - y.slot);
    assert.deepEqual(info.holders.map((h) => [h.slot, h.token, h.owner]), bySlot.map((l) => [l.slot, l.token, l === a ? "a" : "b"]));
    for (const h of info.holders) assert.ok(h.expiresInMs > 0 && h.expiresInMs <= 10_000, `holder expiresInMs ${h.expiresInMs}`);

    await a.release();
    const c = await fence.acquire(name, { limit: 2, ttlMs: 10_000 });
    assert.equal(c.slot, a.slot, "the released slot is granted again");
    assert.ok(c.token > b.token, `token ${c.token}, want > ${b.token}`);
    await Promise.all([b.release(), c.release()]);
    const free = await fence.inspect(name);
    assert.deepEqual([free.held, free.limit, free.holders], [false, 0, []]);
  });

  test("a waiter for a permit is woken by a release and gets the freed slot", async (t) => {
    const name = uniqueName("sem-wait");
    const held = [await fence.acquire(name, { limit: 2, ttlMs: 30_000 }), await fence.acquire(name, { limit: 2, ttlMs: 30_000 })];
    const waiter = fence.acquire(name, { limit: 2, ttlMs: 10_000, waitMs: 20_000 });
    const freed = held[1];
    await freed.release();
    const got = await waiter;
    assert.equal(got.slot, freed.slot);
    assert.ok(got.token > freed.token, `token ${got.token}, want > ${freed.token}`);
    await Promise.all([held[0].release(), got.release()]);
  });

  test("withLock takes a permit and gives fn its slot", async (t) => {
    const name = uniqueName("sem-with");
    const slot = await fence.withLock(name, (lease) => lease.slot, { limit: 3, ttlMs: 5000 });
    assert.equal(slot, 0);
    assert.equal((await fence.inspect(name)).held, false);
  });

  test("another limit while permits are live rejects with LimitMismatchError naming both", async (t) => {
    const name = uniqueName("sem-limit");
    const a = await fence.acquire(name, { limit: 3, ttlMs: 10_000 });
    try {
      const err = await rejection(fence.acquire(name, { limit: 2, ttlMs: 1000 }), "limit 2 on a semaphore of 3");
      assert.ok(err instanceof LimitMismatchError, `got ${err}`);
      assert.deepEqual([err.code, err.status, err.lockName, err.limit, err.heldLimit], ["limit_mismatch", 409, name, 2, 3]);
      assert.match(err.message, /3/);
      const lock = await rejection(fence.acquire(name, { ttlMs: 1000 }), "a lock on a semaphore of 3");
      assert.ok(lock instanceof LimitMismatchError, `got ${lock}`);
      assert.deepEqual([lock.limit, lock.heldLimit], [1, 3]);
    } finally {
      await a.release();
    }
    const other = await fence.acquire(name, { limit: 2, ttlMs: 1000 }); // no live lease: any limit
    assert.ok(other.token > a.token);
    await other.release();
  });

  test("a stale permit's write to its slot's key is refused once the slot's next holder wrote", async (t) => {
    const name = uniqueName("sem-fence");
    // a holds slot 0 for a short TTL and stops renewing (a paused holder); c keeps slot 1.
    const a = await fence.acquire(name, { limit: 2, ttlMs: 300, autoRenew: false });
    const c = await fence.acquire(name, { limit: 2, ttlMs: 30_000 });
    const key = (l) => `${name}-partition-${l.slot}`;
    await fence.kv.put(key(a), "a's batch", a);
    const b = await fence.acquire(name, { limit: 2, ttlMs: 30_000, waitMs: 20_000 }); // a's slot, once a expired
    assert.equal(b.slot, a.slot);
    await fence.kv.put(key(b), "b's batch", b);
    const err = await fence.kv.put(key(a), "a's late batch", a).then(() => assert.fail("the stale permit's write was accepted"), (e) => e);
    assert.ok(err instanceof StaleTokenError, `got ${err}`);
    assert.deepEqual([err.token, err.highest], [a.token, b.token]);
    assert.equal((await fence.kv.get(key(b))).text(), "b's batch");
    // c's lower token is still good for its own slot's key: each key keeps its own highest.
    assert.ok(c.token < b.token);
    await fence.kv.put(key(c), "c's batch", c);
    await Promise.all([b.release(), c.release()]);
  });
});

describe("shared locks", () => {
  test("shared leases hold together; an exclusive acquire is held until they end", async (t) => {
    const name = uniqueName("rw");
    const r1 = await fence.acquire(name, { shared: true, ttlMs: 10_000, owner: "r1" });
    const r2 = await fence.acquire(name, { shared: true, ttlMs: 10_000, owner: "r2" });
    assert.deepEqual([r1.slot, r2.slot], [0, 0]);
    assert.ok(r2.token > r1.token);
    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.shared, info.limit], [true, true, 0]);
    assert.deepEqual(info.holders.map((h) => [h.token, h.owner]), [[r1.token, "r1"], [r2.token, "r2"]]);

    const err = await rejection(fence.acquire(name, { ttlMs: 1000 }), "an exclusive lock while shared leases hold it");
    assert.ok(err instanceof HeldError, `got ${err}`);
    const writer = fence.acquire(name, { ttlMs: 10_000, waitMs: 20_000 });
    await Promise.all([r1.release(), r2.release()]);
    const w = await writer;
    assert.ok(w.token > r2.token, `token ${w.token}, want > ${r2.token}`);
    const excl = await fence.inspect(name);
    assert.deepEqual([excl.shared, excl.holders], [false, []]);
    await w.release();
  });
});

describe("bad limit and shared", () => {
  test("a limit that is not an integer 1 to 1024 is an InvalidError before any request", async () => {
    const offline = new FenceClient({ server: "http://127.0.0.1:9" }); // nothing listens: a request would be UnavailableError
    for (const limit of [0, -1, 1025, 2.5, NaN, "3", null]) {
      const err = await rejection(offline.acquire("job", { limit }), `limit ${limit}`);
      assert.ok(err instanceof InvalidError, `limit ${String(limit)}: got ${err}`);
      assert.equal(err.field, "limit");
      assert.match(err.message, /^acquire "job": invalid limit/);
    }
  });

  test("shared with a limit above 1, or not a boolean, is an InvalidError before any request", async () => {
    const offline = new FenceClient({ server: "http://127.0.0.1:9" });
    for (const opts of [{ shared: true, limit: 3 }, { shared: "yes" }]) {
      const err = await rejection(offline.acquire("job", opts), JSON.stringify(opts));
      assert.ok(err instanceof InvalidError, `${JSON.stringify(opts)}: got ${err}`);
      assert.equal(err.field, "shared");
    }
  });

  test("limit 1 is a lock: it is granted by any server, with slot 0", async () => {
    const name = uniqueName("limit1");
    const lease = await fence.acquire(name, { limit: 1, ttlMs: 5000, shared: false });
    assert.equal(lease.slot, 0);
    const info = await fence.inspect(name);
    assert.deepEqual([info.held, info.limit, info.holders], [true, 0, []]);
    await lease.release();
  });
});
