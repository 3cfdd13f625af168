// Watching a lock and observing a leader, by blocking queries, against a real
// `fence serve` (see serve.mjs). Only the older-server case talks to a stand-in: no
// fence serve built from this tree answers without Fence-Index.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { FenceClient, InvalidError, NotImplementedError, UnavailableError } from "../dist/index.js";
import { startServer, uniqueName } from "./helpers/serve.mjs";

// The server caps one blocking query at 300ms, so a watch of an unchanged lock asks
// again several times a second: the tests exercise the client's re-asking too.
const MAX_WAIT = "300ms";
// How soon a change must be seen: the server answers within milliseconds; this is
// for a machine busy with other tests.
const PROMPT_MS = 2000;

let server;
let fence; // the watcher
let other; // the one that changes the lock, as another process would

before(async () => {
  server = await startServer("--max-wait", MAX_WAIT);
  fence = new FenceClient({ server: server.url });
  other = new FenceClient({ server: server.url });
});
after(async () => {
  await server?.stop();
});

/**
 * watching starts it (a watch or observeLeader iterator) under an AbortController
 * aborted at the test's end, and returns {it, ac, next}: next(ms) resolves with the
 * next value and how long it took, and rejects if none came within ms.
 */
function watching(t, start) {
  const ac = new AbortController();
  const it = start(ac.signal);
  t.after(() => ac.abort(new Error("test over")));
  const next = async (ms = PROMPT_MS) => {
    const t0 = performance.now();
    const p = it.next();
    p.catch(() => {}); // settled after a timeout below by the abort at the test's end
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no state within ${ms}ms`)), ms);
    });
    try {
      const r = await Promise.race([p, timeout]);
      assert.equal(r.done, false, "the iteration ended");
      return { value: r.value, ms: performance.now() - t0 };
    } finally {
      clearTimeout(timer);
    }
  };
  return { it, ac, next };
}

/** inFlight returns the server's count of blocking queries waiting. */
async function inFlight(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = /^fence_blocking_queries_in_flight (\d+)$/m.exec(text);
  assert.ok(m, "no fence_blocking_queries_in_flight in /metrics");
  return Number(m[1]);
}

/** until polls cond every 20ms until it is true, for at most ms; returns whether it became true. */
async function until(cond, ms) {
  const end = performance.now() + ms;
  for (;;) {
    if (await cond()) return true;
    if (performance.now() >= end) return false;
    await sleep(20);
  }
}

describe("watch", () => {
  test("yields the state at once, then each acquire, release and revoke promptly", async (t) => {
    const name = uniqueName("watch");
    const w = watching(t, (signal) => fence.watch(name, { signal }));

    const first = await w.next();
    assert.ok(first.ms < 1000, `first state after ${first.ms}ms, want at once`);
    assert.deepEqual({ ...first.value, index: undefined }, { name, held: false, token: 0, owner: "", lastToken: 0, expiresInMs: 0, limit: 0, shared: false, holders: [], index: undefined });
    assert.ok(Number.isSafeInteger(first.value.index) && first.value.index >= 1, `index ${first.value.index}`);

    // Each change is asked for before it happens: the query is waiting when it comes.
    let p = w.next();
    await sleep(100);
    const lease = await other.acquire(name, { ttlMs: 10_000, owner: "ci:7 ./deploy.sh" });
    let s = await p;
    assert.ok(s.ms < 100 + PROMPT_MS, `the acquire was seen after ${s.ms - 100}ms`);
    assert.equal(s.value.held, true);
    assert.equal(s.value.token, lease.token);
    assert.equal(s.value.owner, "ci:7 ./deploy.sh");
    assert.ok(s.value.expiresInMs > 0 && s.value.expiresInMs <= 10_000, `expiresInMs ${s.value.expiresInMs}`);
    assert.notEqual(s.value.index, first.value.index);
    const heldIndex = s.value.index;

    // A renewal is no change: the next state is the release's.
    p = w.next();
    await lease.renew();
    await sleep(400); // more than one of the server's 300ms waits
    await lease.release();
    s = await p;
    assert.deepEqual([s.value.held, s.value.token, s.value.lastToken], [false, 0, lease.token]);
    assert.notEqual(s.value.index, heldIndex);

    const second = await other.acquire(name, { ttlMs: 10_000, autoRenew: false });
    s = await w.next();
    assert.deepEqual([s.value.held, s.value.token], [true, second.token]);
    p = w.next();
    await sleep(100);
    await other.revoke(name);
    s = await p;
    assert.ok(s.ms < 100 + PROMPT_MS, `the revoke was seen after ${s.ms - 100}ms`);
    assert.deepEqual([s.value.held, s.value.lastToken], [false, second.token]);
  });

  test("an unchanged lock yields nothing while the server's waits pass", async (t) => {
    const name = uniqueName("quiet");
    const w = watching(t, (signal) => fence.watch(name, { signal, waitMs: 100 }));
    const first = await w.next();
    const p = w.next();
    const r = await Promise.race([p, sleep(1000, "quiet")]);
    assert.equal(r, "quiet", `yielded ${JSON.stringify(r)} for an unchanged lock`);
    const lease = await other.acquire(name, { ttlMs: 5000, autoRenew: false });
    const s = await p;
    assert.deepEqual([s.value.held, s.value.token], [true, lease.token]);
    assert.notEqual(s.value.index, first.value.index);
    await lease.release();
  });

  test("a slow consumer gets the latest state next, not the ones it missed", async (t) => {
    const name = uniqueName("slow");
    const w = watching(t, (signal) => fence.watch(name, { signal }));
    await w.next();
    // Changes while the consumer is busy: nothing is buffered for it.
    for (let i = 0; i < 3; i++) await (await other.acquire(name, { ttlMs: 5000, autoRenew: false })).release();
    const last = await other.acquire(name, { ttlMs: 5000, autoRenew: false });
    const s = await w.next();
    assert.ok(s.ms < 1000, `the latest state after ${s.ms}ms, want at once`);
    assert.deepEqual([s.value.held, s.value.token], [true, last.token]);
    assert.equal(s.value.token, (await fence.inspect(name)).token);
    await last.release();
  });

  test("break ends the watch", async () => {
    const name = uniqueName("break");
    let n = 0;
    for await (const s of fence.watch(name)) {
      assert.equal(s.name, name);
      n++;
      break;
    }
    assert.equal(n, 1);
  });

  test("an abort ends the iteration at once with its reason, and the query in flight with it", async (t) => {
    const own = await startServer(); // its own: the count of waiting queries is this test's alone
    t.after(() => own.stop());
    const c = new FenceClient({ server: own.url });
    const name = uniqueName("abort");
    const w = watching(t, (signal) => c.watch(name, { signal }));
    await w.next();
    const p = w.next();
    assert.ok(await until(async () => (await inFlight(own.url)) === 1, PROMPT_MS), "the blocking query never reached the server");
    const t0 = performance.now();
    w.ac.abort(new Error("caller gave up"));
    await assert.rejects(p, { message: "caller gave up" });
    const took = performance.now() - t0;
    assert.ok(took < 500, `the iteration ended ${took}ms after the abort`);
    assert.ok(await until(async () => (await inFlight(own.url)) === 0, PROMPT_MS), "the server still waits on the aborted query");
    assert.deepEqual(await w.it.next(), { done: true, value: undefined });

    // A signal aborted before the start ends it before any request.
    const ac = new AbortController();
    ac.abort(new Error("not now"));
    await assert.rejects(c.watch(name, { signal: ac.signal }).next(), { message: "not now" });
  });

  test("bad arguments throw an InvalidError at once", () => {
    for (const bad of ["", 7, "a\u0000b", "x".repeat(256)]) {
      assert.throws(() => fence.watch(bad), (e) => e instanceof InvalidError && e.field === "name" && /^watch: invalid name/.test(e.message), `name ${JSON.stringify(bad)}`);
      assert.throws(() => fence.observeLeader(bad), (e) => e instanceof InvalidError && /^observe: invalid name/.test(e.message));
    }
    for (const waitMs of [0, -1, NaN, Infinity, "100"]) {
      assert.throws(() => fence.watch("w", { waitMs }), (e) => e instanceof InvalidError && e.field === "waitMs", `waitMs ${waitMs}`);
    }
    assert.throws(() => fence.watch("w", { onUnavailable: "log" }), (e) => e instanceof InvalidError && e.field === "onUnavailable");
  });

  test("a server that restarts: onUnavailable is told, and the watch goes on", async (t) => {
    const first = await startServer();
    const port = new URL(first.url).port;
    const data = mkdtempSync(join(tmpdir(), "fence-ts-restart-"));
    await first.stop(); // it only found a free port
    const args = ["--listen", `127.0.0.1:${port}`, "--data", data]; // the helper's own are overridden
    let srv = await startServer(...args);
    t.after(async () => {
      await srv.stop();
      rmSync(data, { recursive: true, force: true });
    });
    const c = new FenceClient({ server: srv.url });
    const name = uniqueName("restart");
    const told = [];
    const w = watching(t, (signal) => c.watch(name, { signal, onUnavailable: (e) => told.push(e) }));
    const before = await w.next();
    const p = w.next();
    await srv.stop();
    assert.ok(await until(() => told.length >= 2, 5000), `onUnavailable told ${told.length} times while the server was down`);
    assert.ok(told.every((e) => e instanceof UnavailableError), `told ${told}`);
    assert.match(told.at(-1).message, new RegExp(`^cannot reach the fence server at ${srv.url}: `));
    srv = await startServer(...args);
    const lease = await c.acquire(name, { ttlMs: 5000, autoRenew: false });
    const s = await p;
    assert.deepEqual([s.value.held, s.value.token], [true, lease.token]);
    assert.notEqual(s.value.index, before.value.index);
    await lease.release();

    // Throwing from onUnavailable ends the watch with that error.
    await srv.stop();
    const err = await c.watch(name, { onUnavailable: () => { throw new Error("give up"); } }).next().then(() => assert.fail("yielded"), (e) => e);
    assert.equal(err.message, "give up");
  });
});

describe("leader", () => {
  test("leader reports nobody, then the holder of the election's lock", async () => {
    const name = uniqueName("elect");
    assert.deepEqual(await fence.leader(name), { name, leading: false, owner: "", epoch: 0, expiresInMs: 0 });
    const term = await other.acquire(name, { ttlMs: 10_000, owner: "node-1" });
    const ld = await fence.leader(name);
    assert.deepEqual({ ...ld, expiresInMs: 0 }, { name, leading: true, owner: "node-1", epoch: term.token, expiresInMs: 0 });
    assert.ok(ld.expiresInMs > 0 && ld.expiresInMs <= 10_000, `expiresInMs ${ld.expiresInMs}`);
    await term.release();
    await assert.rejects(fence.leader(""), (e) => e instanceof InvalidError && /^leader: invalid name/.test(e.message));
  });

  test("observeLeader yields the leader at once, then each new term and vacancy, not other changes", async (t) => {
    const name = uniqueName("observe");
    const w = watching(t, (signal) => fence.observeLeader(name, { signal }));
    const first = await w.next();
    assert.ok(first.ms < 1000, `first leader after ${first.ms}ms, want at once`);
    assert.deepEqual(first.value, { name, leading: false, owner: "", epoch: 0, expiresInMs: 0 });

    let p = w.next();
    await sleep(100);
    const a = await other.acquire(name, { ttlMs: 10_000, owner: "node-a" });
    let s = await p;
    assert.ok(s.ms < 100 + PROMPT_MS, `the new term was seen after ${s.ms - 100}ms`);
    assert.deepEqual([s.value.leading, s.value.owner, s.value.epoch], [true, "node-a", a.token]);

    // Renewing is no change of leader; the end of the term is.
    p = w.next();
    await a.renew();
    await a.release();
    s = await p;
    assert.deepEqual(s.value, { name, leading: false, owner: "", epoch: 0, expiresInMs: 0 });

    // A heal while nobody leads changes the lock (its index), not the leader: the next
    // leader is the next term.
    p = w.next();
    await other.heal(name, a.token + 100);
    await sleep(400);
    const b = await other.acquire(name, { ttlMs: 10_000, owner: "node-b" });
    s = await p;
    assert.deepEqual([s.value.leading, s.value.owner, s.value.epoch], [true, "node-b", b.token]);
    assert.ok(b.token > a.token + 100, `epoch ${b.token} after healing past ${a.token + 100}`);

    // A slow observer gets the latest term next.
    await b.release();
    const c = await other.acquire(name, { ttlMs: 10_000, owner: "node-c" });
    s = await w.next();
    assert.deepEqual([s.value.owner, s.value.epoch], ["node-c", c.token]);

    // The abort ends it at once.
    p = w.next();
    await sleep(100);
    w.ac.abort(new Error("done observing"));
    await assert.rejects(p, { message: "done observing" });
    await c.release();
  });
});

describe("an older server", () => {
  test("one that answers without Fence-Index ends the watch with a NotImplementedError", async (t) => {
    // A stand-in for a fence serve from before blocking queries: it ignores index
    // and wait_ms and answers the state at once, with no Fence-Index.
    let requests = 0;
    const old = createServer((req, res) => {
      requests++;
      const name = decodeURIComponent(new URL(req.url, "http://x").pathname.split("/")[3]);
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ name, held: false }));
    });
    old.listen(0, "127.0.0.1");
    await once(old, "listening");
    t.after(() => old.close());
    const url = `http://127.0.0.1:${old.address().port}`;
    const c = new FenceClient({ server: url });

    const err = await c.watch("deploy").next().then(() => assert.fail("yielded"), (e) => e);
    assert.ok(err instanceof NotImplementedError, `got ${err}`);
    assert.equal(err.code, "not_implemented");
    assert.equal(err.message, `watch "deploy": the fence server at ${url} does not answer blocking queries (no Fence-Index header): it is older than this client`);
    const obs = await c.observeLeader("deploy").next().then(() => assert.fail("yielded"), (e) => e);
    assert.ok(obs instanceof NotImplementedError, `got ${obs}`);
    assert.equal(requests, 2, "asked again after the first answer (a busy loop on an older server)");
    // Inspecting still works there.
    assert.equal((await c.leader("deploy")).leading, false);
  });
});
