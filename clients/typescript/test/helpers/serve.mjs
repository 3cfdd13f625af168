// Test helper: a real `fence serve` on a free 127.0.0.1 port, with its data in a temp
// dir, stopped by the caller (test cleanup). The binary is $FENCE_BIN, or built from
// this repository with `go build` into a temp dir once per test process.

import { spawn, execFileSync } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "..", "..", "..", "..");

let built;

/** fenceBin returns the path of the fence binary: $FENCE_BIN, or one built now from the repo. */
export function fenceBin() {
  if (process.env.FENCE_BIN) return process.env.FENCE_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "fence-ts-bin-"));
    built = join(dir, "fence");
    const go = process.env.GO ?? "go";
    execFileSync(go, ["build", "-o", built, "./cmd/fence"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"], timeout: 300_000 });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

const LISTENING = /url=(http:\/\/127\.0\.0\.1:\d+)/;

/**
 * startServer starts `fence serve --listen 127.0.0.1:0 --data <tmp> [extraArgs...]` and resolves once
 * it logs that it listens, with {url, stop, logs}. stop() sends SIGTERM, waits for the
 * exit (SIGKILL after 10s) and removes the data dir; it is safe to call twice.
 */
export async function startServer(...extraArgs) {
  const data = mkdtempSync(join(tmpdir(), "fence-ts-data-"));
  const proc = spawn(fenceBin(), ["serve", "--listen", "127.0.0.1:0", "--data", data, ...extraArgs], { stdio: ["ignore", "ignore", "pipe"] });
  let logs = "";
  const exited = new Promise((res) => proc.once("exit", (code, sig) => res({ code, sig })));
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      rej(new Error(`fence serve did not log that it listens within 30s:\n${logs}`));
    }, 30_000);
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (chunk) => {
      logs += chunk;
      for (const line of logs.split("\n")) {
        const m = LISTENING.exec(line);
        if (m && line.includes("listening")) {
          clearTimeout(timer);
          res(m[1]);
          return;
        }
      }
    });
    exited.then(({ code, sig }) => {
      clearTimeout(timer);
      rej(new Error(`fence serve exited (${code ?? sig}) before listening:\n${logs}`));
    });
  });
  let stopping;
  const stop = () => {
    stopping ??= (async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(t);
      }
      rmSync(data, { recursive: true, force: true });
    })();
    return stopping;
  };
  return { url, data, stop, logs: () => logs };
}

/** uniqueName returns a lock name or key no other test uses. */
let seq = 0;
export function uniqueName(prefix) {
  return `${prefix}-${process.pid}-${++seq}`;
}

/**
 * abortedWithin resolves with signal's reason once it aborts, and rejects if it has not
 * within ms. Its timer keeps the process alive (a Lease's timers do not).
 */
export function abortedWithin(signal, ms) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const t = setTimeout(() => reject(new Error(`the signal did not abort within ${ms}ms`)), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(signal.reason);
    }, { once: true });
  });
}

/** closedPort returns a 127.0.0.1 port that nothing listens on (it was free a moment ago). */
export async function closedPort() {
  const srv = createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  srv.close();
  await once(srv, "close");
  return port;
}
