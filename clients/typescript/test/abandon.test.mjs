// An acquire given up while its outcome is unknown sends an abandon: a grant made
// for it after all is released at once, not left for its TTL.

import { test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHTTPServer } from "node:http";

import { FenceClient } from "../dist/index.js";
import { startServer, uniqueName } from "./helpers/serve.mjs";

/**
 * withholding starts a stand-in for a server whose acquire answers come too late:
 * it passes each request on to the real server at target and answers every other
 * request, but keeps an acquire's answer and never sends it. Resolves with
 * {url, granted, close}: granted resolves once the real server has granted one.
 */
async function withholding(target) {
  let grantedNow;
  const granted = new Promise((r) => { grantedNow = r; });
  const srv = createHTTPServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const r = await fetch(target + req.url, { method: req.method, headers: { "Content-Type": "application/json" }, body: Buffer.concat(chunks) });
    const body = Buffer.from(await r.arrayBuffer());
    if (req.url.endsWith("/acquire") && r.status === 200) {
      grantedNow();
      return; // the answer is withheld
    }
    res.writeHead(r.status, { "Content-Type": "application/json" }).end(body);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const close = () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
  return { url: `http://127.0.0.1:${srv.address().port}`, granted, close };
}

test("an acquire aborted while its grant's answer is on its way abandons that grant", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const late = await withholding(server.url);
  t.after(() => late.close());
  const name = uniqueName("abandon");
  const ac = new AbortController();
  const acquiring = new FenceClient(late.url).acquire(name, { ttlMs: 30_000, waitMs: 10_000, autoRenew: false, signal: ac.signal });
  await late.granted;
  ac.abort(new Error("gave up"));
  await assert.rejects(acquiring, /gave up/);
  const info = await new FenceClient(server.url).inspect(name);
  assert.equal(info.held, false, "the abandoned grant was released, not left for its TTL");
});
