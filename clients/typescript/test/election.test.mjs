// A node whose cluster elects a leader answers 503 for a while: a waiting acquire
// rides that out within its wait, with one server as with a list, under one
// request id; without a wait the 503 is the answer, and it says why (issue 36,
// item 6).

import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHTTPServer } from "node:http";

import { FenceClient, UnavailableError } from "../dist/index.js";
import { startServer, uniqueName } from "./helpers/serve.mjs";

const NO_LEADER = "store unavailable: the cluster has no leader";

// electing stands before the real server at target: it answers the first refuse
// acquires 503 unavailable (no leader) and passes every other request on,
// keeping the request id of every acquire.
async function electing(target, refuse) {
  const rids = [];
  const srv = createHTTPServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    if (req.url.endsWith("/acquire")) {
      rids.push(JSON.parse(body.toString() || "{}").request_id);
      if (rids.length <= refuse) {
        res.writeHead(503, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: `acquire "x": ${NO_LEADER}`, code: "unavailable" }));
        return;
      }
    }
    const r = await fetch(target + req.url, { method: req.method, headers: { "Content-Type": "application/json" }, body: req.method === "GET" ? undefined : body });
    res.writeHead(r.status, { "Content-Type": "application/json" });
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return { url: `http://127.0.0.1:${srv.address().port}`, rids, close };
}

test("one server answering 503: a waiting acquire rides it out under one request id", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const front = await electing(server.url, 3);
  t.after(() => front.close());
  const fence = new FenceClient(front.url);
  const name = uniqueName("x");

  const err = await fence.acquire(name, { autoRenew: false }).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof UnavailableError, `without a wait: got ${err}`);
  assert.equal(err.message, `acquire "x": ${NO_LEADER}`);

  const lease = await fence.acquire(name, { ttlMs: 10_000, waitMs: 10_000, autoRenew: false });
  const rids = front.rids.slice(1);
  assert.equal(rids.length, 3, `two 503s, then the grant: ${rids}`);
  assert.ok(typeof rids[0] === "string" && rids[0] !== "", `a request id: ${rids[0]}`);
  assert.deepEqual(new Set(rids), new Set([rids[0]]), `one request id on every retry: ${rids}`);
  assert.equal(lease.name, name);
  await lease.release();
});
