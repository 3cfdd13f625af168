// A fenced write whose first attempt is slow is retried on the next server, and
// the holder writes again; the first attempt then lands. Every attempt of a write
// carries one Fence-Attempt, which the store claims: the late attempt writes
// nothing, and the later value stays (P3).

import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHTTPServer } from "node:http";

import { FenceClient, InvalidError } from "../dist/index.js";
import { startServer, uniqueName } from "./helpers/serve.mjs";

/**
 * holding starts a stand-in for a paused server: it keeps the first request it
 * gets (method, path, headers, body) and never answers. Resolves with {url, held,
 * close}; held resolves with the request.
 */
async function holding() {
  let resolve;
  const held = new Promise((r) => (resolve = r));
  const srv = createHTTPServer(async (req) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    resolve({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks) });
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return { url: `http://127.0.0.1:${srv.address().port}`, held, close };
}

/** land sends a held request to the server at base, as the paused server would once it resumes. */
async function land(base, req) {
  const headers = {};
  for (const h of ["fence-token", "fence-lock", "fence-lease", "fence-attempt", "content-type"]) {
    if (req.headers[h] !== undefined) headers[h] = req.headers[h];
  }
  const r = await fetch(base + req.url, { method: req.method, headers, body: req.method === "PUT" ? req.body : undefined });
  return { status: r.status, body: await r.text() };
}

for (const op of ["put", "delete"]) {
  test(`a ${op} whose first attempt lands late never replaces the holder's later write`, async (t) => {
    const server = await startServer();
    t.after(() => server.stop());
    const slow = await holding();
    t.after(() => slow.close());
    const fence = new FenceClient({ server: `${slow.url},${server.url}`, attemptTimeoutMs: 300 });
    const lease = await new FenceClient(server.url).acquire(uniqueName("late"), { ttlMs: 60_000, autoRenew: false });
    const key = uniqueName("late-key");
    const direct = new FenceClient(server.url);
    if (op === "delete") await direct.kv.put(key, "v0", lease);

    if (op === "put") await fence.kv.put(key, "v1", lease);
    else await fence.kv.delete(key, lease);
    const first = await slow.held;
    assert.equal(fence.server, server.url, "the retry went to the next server");
    await fence.kv.put(key, "v2", lease);

    const late = await land(server.url, first);
    assert.equal(late.status, 200, `the late first attempt: ${late.status} ${late.body}`);
    assert.equal((await direct.kv.get(key)).text(), "v2", "the holder's later write stays");
    assert.match(String(first.headers["fence-attempt"]), /^[!-~]{1,64}$/, "the first attempt named its write");
    await lease.release();
  });
}

test("a write's attempt id is the caller's when given; a bad one is refused before any request", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const fence = new FenceClient(server.url);
  const lease = await fence.acquire(uniqueName("attempt"), { ttlMs: 60_000, autoRenew: false });
  const key = uniqueName("attempt-key");
  await fence.kv.put(key, "v1", lease, { attempt: "job-7-write-1" });
  await fence.kv.put(key, "v2", lease, { attempt: "job-7-write-2" });
  await fence.kv.put(key, "v1", lease, { attempt: "job-7-write-1" }); // a retry of write 1, after write 2
  assert.equal((await fence.kv.get(key)).text(), "v2");
  for (const bad of ["", "a b", "x".repeat(65), "caf\u00e9", 7]) {
    await assert.rejects(fence.kv.put(key, "bad", lease, { attempt: bad }), InvalidError, `attempt ${JSON.stringify(bad)}`);
    await assert.rejects(fence.kv.delete(key, lease, { attempt: bad }), InvalidError, `attempt ${JSON.stringify(bad)}`);
  }
  assert.equal((await fence.kv.get(key)).text(), "v2");
  await lease.release();
});
