// A server that goes away or cannot be reached, the server's URL, and auth: each
// test that stops a server starts its own.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { DEFAULT_SERVER, FenceClient, InvalidError, LeaseExpiredError, UnauthorizedError, UnavailableError } from "../dist/index.js";
import { abortedWithin, closedPort, startServer, uniqueName } from "./helpers/serve.mjs";

test("a lease whose server stopped is lost at its local deadline, saying why", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const fence = new FenceClient({ server: server.url });
  const lease = await fence.acquire(uniqueName("outage"), { ttlMs: 1200 });
  const deadline = performance.now() + lease.remainingMs();
  await server.stop();

  const reason = await abortedWithin(lease.signal, 5000);
  const at = performance.now();
  assert.ok(at >= deadline - 5, `aborted ${deadline - at}ms before the local deadline`);
  assert.ok(reason instanceof LeaseExpiredError, `reason ${reason}`);
  assert.match(reason.message, /expired before it was renewed \(last renewal: cannot reach the fence server at http:\/\/127\.0\.0\.1:\d+: connection (refused|reset|closed)\)$/);
  assert.ok(reason.cause instanceof UnavailableError);
});

test("an unreachable server is an UnavailableError naming it", async () => {
  const port = await closedPort();
  const fence = new FenceClient({ server: `127.0.0.1:${port}` }); // a bare host:port
  const err = await fence.acquire("job").then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof UnavailableError, `got ${err}`);
  assert.equal(err.code, "unavailable");
  assert.equal(err.status, undefined);
  assert.equal(err.message, `cannot reach the fence server at http://127.0.0.1:${port}: connection refused`);

  // A waiting acquire retries until its wait is over, then says why it failed.
  const t0 = performance.now();
  const waited = await fence.acquire("job", { waitMs: 500 }).then(() => assert.fail("acquired"), (e) => e);
  const took = performance.now() - t0;
  assert.ok(waited instanceof UnavailableError, `got ${waited}`);
  assert.ok(took >= 450 && took < 5000, `gave up after ${took}ms of a 500ms wait`);

  const kvErr = await fence.kv.get("k").then(() => assert.fail("got"), (e) => e);
  assert.ok(kvErr instanceof UnavailableError, `got ${kvErr}`);
});

test("the server comes from the options, FENCE_SERVER, or the default", (t) => {
  const saved = process.env.FENCE_SERVER;
  t.after(() => {
    if (saved === undefined) delete process.env.FENCE_SERVER;
    else process.env.FENCE_SERVER = saved;
  });
  delete process.env.FENCE_SERVER;
  assert.equal(new FenceClient().server, DEFAULT_SERVER);
  assert.equal(DEFAULT_SERVER, "http://127.0.0.1:7420");
  process.env.FENCE_SERVER = "fence.internal:9000";
  assert.equal(new FenceClient().server, "http://fence.internal:9000");
  assert.equal(new FenceClient({ server: "https://h:1/prefix/" }).server, "https://h:1/prefix");
  assert.equal(new FenceClient("10.0.0.1:7420").server, "http://10.0.0.1:7420");
  for (const bad of ["ftp://h:1", "http://", "http://h:1/?q=1", "http://u:p@h:1", ""]) {
    assert.throws(() => new FenceClient({ server: bad }), InvalidError, `server ${JSON.stringify(bad)}`);
  }
  assert.throws(() => new FenceClient({ server: "h:1", requestTimeoutMs: 0 }), InvalidError);
});

test("the bearer token comes from the options or FENCE_AUTH_TOKEN; a wrong one is an UnauthorizedError", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "fence-ts-auth-"));
  const file = join(dir, "tokens");
  writeFileSync(file, "# tokens\ns3cret\n");
  const server = await startServer("--auth-token-file", file);
  const saved = process.env.FENCE_AUTH_TOKEN;
  t.after(async () => {
    if (saved === undefined) delete process.env.FENCE_AUTH_TOKEN;
    else process.env.FENCE_AUTH_TOKEN = saved;
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  delete process.env.FENCE_AUTH_TOKEN;

  const none = await new FenceClient(server.url).acquire("job").then(() => assert.fail("acquired"), (e) => e);
  assert.ok(none instanceof UnauthorizedError, `got ${none}`);
  assert.equal(none.status, 401);
  const wrong = await new FenceClient({ server: server.url, authToken: "nope" }).acquire("job").then(() => assert.fail("acquired"), (e) => e);
  assert.ok(wrong instanceof UnauthorizedError, `got ${wrong}`);

  const lease = await new FenceClient({ server: server.url, authToken: "s3cret" }).acquire("job", { ttlMs: 5000 });
  await lease.release();
  process.env.FENCE_AUTH_TOKEN = "s3cret";
  const fromEnv = await new FenceClient(server.url).acquire("job", { ttlMs: 5000 });
  await fromEnv.release();
});
