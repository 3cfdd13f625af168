// Several servers: a request moves to the next when one cannot be reached, fails
// or answers 503 (a server shutting down ends its long polls so), and the client
// sticks to the server that answered. An acquire whose answer is lost is retried
// with its request id and gets the same grant.

import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHTTPServer } from "node:http";

import { FenceClient, InvalidError, UnavailableError } from "../dist/index.js";
import { closedPort, startServer, uniqueName } from "./helpers/serve.mjs";

test("a list of servers: the unreachable one is passed over, the one that answered is kept", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const dead = `http://127.0.0.1:${await closedPort()}`;
  const fence = new FenceClient({ server: `${dead}, ${server.url}` });
  assert.deepEqual(fence.servers, [dead, server.url]);
  assert.equal(fence.server, dead, "before any answer, the first server");
  const lease = await fence.acquire(uniqueName("fo"), { autoRenew: false });
  assert.equal(fence.server, server.url, "the server that answered");
  await lease.renew();
  await lease.release();

  const more = new FenceClient({ server: dead, servers: [server.url] });
  assert.deepEqual(more.servers, [dead, server.url]);
  const info = await more.inspect(uniqueName("fo"));
  assert.equal(info.held, false);
});

test("no server reachable: the error names each one", async () => {
  const a = `http://127.0.0.1:${await closedPort()}`;
  const b = `http://127.0.0.1:${await closedPort()}`;
  const fence = new FenceClient({ server: `${a},${b}` });
  const err = await fence.acquire("job").then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof UnavailableError, `got ${err}`);
  assert.equal(err.message, `cannot reach the fence server at ${a}: connection refused; at ${b}: connection refused`);
  assert.throws(() => new FenceClient({ server: `${a},` }), InvalidError);
});

test("a waiting acquire whose server shuts down moves to the next server", async (t) => {
  const a = await startServer();
  const b = await startServer();
  t.after(() => Promise.all([a.stop(), b.stop()]));
  const name = uniqueName("fo-wait");
  const holder = await new FenceClient(a.url).acquire(name, { ttlMs: 60_000, autoRenew: false });
  const fence = new FenceClient({ server: `${a.url},${b.url}` });
  const t0 = performance.now();
  const waiting = fence.acquire(name, { waitMs: 30_000, autoRenew: false });
  await new Promise((r) => setTimeout(r, 300)); // its long poll is on a
  await a.stop(); // draining, a ends its long polls with 503, then closes
  const lease = await waiting;
  const took = performance.now() - t0;
  assert.equal(fence.server, b.url);
  assert.ok(took < 15_000, `the waiter got the lock of the next server after ${took}ms`);
  assert.ok(lease.token >= 1);
  await lease.release();
  void holder;
});

test("an acquire carries a request id; a bad one is refused before any request", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const fence = new FenceClient(server.url);
  const lease = await fence.acquire(uniqueName("fo-rid"), { requestId: "job-42-attempt", autoRenew: false });
  await lease.release();
  for (const bad of ["", "a b", "x".repeat(129), "caf\u00e9", 7]) {
    await assert.rejects(fence.acquire("job", { requestId: bad }), InvalidError, `requestId ${JSON.stringify(bad)}`);
  }
});

/**
 * dropping starts a stand-in for a server whose acquire answers are lost: it passes
 * each request on to the real server at target, keeps the answer, and destroys the
 * connection instead of answering. Resolves with {url, answers, close}.
 */
async function dropping(target) {
  const answers = [];
  const srv = createHTTPServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const r = await fetch(target + req.url, { method: req.method, headers: { "Content-Type": "application/json" }, body: Buffer.concat(chunks) });
    answers.push(await r.json());
    req.socket.destroy(); // the answer is lost
    void res;
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return { url: `http://127.0.0.1:${srv.address().port}`, answers, close };
}

test("an acquire whose answer is lost gets the same grant from its retry", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const drop = await dropping(server.url);
  t.after(() => drop.close());
  const fence = new FenceClient({ server: `${drop.url},${server.url}` });
  const name = uniqueName("fo-lost");
  const lease = await fence.acquire(name, { ttlMs: 10_000, autoRenew: false });
  assert.equal(drop.answers.length, 1);
  assert.equal(lease.token, drop.answers[0].token, "the retry's grant is the lost one");
  assert.equal(lease.id, drop.answers[0].lease);
  const info = await new FenceClient(server.url).inspect(name);
  assert.equal(info.held, true);
  assert.equal(info.lastToken, lease.token, "no second grant");
  await lease.release();
});
