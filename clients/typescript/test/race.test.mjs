// The seed's race: a holder pauses past its TTL, another takes the lock and writes,
// and the paused one wakes up and writes with its old token. Fencing refuses it.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import { FenceClient, LeaseExpiredError, StaleTokenError } from "../dist/index.js";
import { startServer } from "./helpers/serve.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

test("the seed's race: the paused holder's late write is refused and B's value stays", async () => {
  const a = new FenceClient({ server: server.url }); // two clients, as two processes would be
  const b = new FenceClient({ server: server.url });

  // A takes the lock with a short TTL and pauses: it stops renewing (a GC pause, a
  // stopped VM) past its TTL.
  const leaseA = await a.acquire("seed", { ttlMs: 400, autoRenew: false });
  await sleep(leaseA.remainingMs() + 100);
  // A's own signal knows, but a paused process does not look at it before writing.
  assert.ok(leaseA.signal.aborted, "A's signal did not abort at its deadline");
  assert.ok(leaseA.signal.reason instanceof LeaseExpiredError, `reason ${leaseA.signal.reason}`);

  // B gets the lock (waiting for the server's expiry if it is a little later) and writes.
  const leaseB = await b.acquire("seed", { ttlMs: 10_000, waitMs: 5000 });
  assert.ok(leaseB.token > leaseA.token, `B's token ${leaseB.token}, want > A's ${leaseA.token}`);
  await b.kv.put("ledger", "balance=120", leaseB);

  // A wakes and writes with its old token: refused, with B's token as the highest.
  const err = await a.kv.put("ledger", "balance=90", leaseA).then(() => assert.fail("A's stale write was stored"), (e) => e);
  assert.ok(err instanceof StaleTokenError, `got ${err}`);
  assert.equal(err.code, "stale_token");
  assert.equal(err.status, 409);
  assert.equal(err.highest, leaseB.token);
  assert.equal(err.token, leaseA.token);
  assert.equal(err.key, "ledger");
  assert.equal(err.message, `put "ledger": stale token ${leaseA.token}, highest seen ${leaseB.token}`);

  // B's value stays.
  const item = await b.kv.get("ledger");
  assert.equal(item.text(), "balance=120");
  assert.equal(item.token, leaseB.token);
  assert.equal(item.lock, "seed");
  await leaseB.release();
});
