// The README's example runs as written, against a fresh server, and prints what its
// comments say.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startServer } from "./helpers/serve.mjs";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");

test("the README's example prints what it says", async (t) => {
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Example"));
  const m = /```js\n([\s\S]*?)```/.exec(section);
  assert.ok(m, "no js block under ## Example");
  const code = m[1];
  const want = [...code.matchAll(/console\.log\(.*\); \/\/ (.*)$/gm)].map((x) => x[1]);
  assert.equal(want.length, 2, "the example's console.log lines with their output");

  const server = await startServer();
  // Inside the package, so that "@fencelock/fence" resolves to it (self-reference).
  const file = join(pkg, "test", `.readme-example-${process.pid}.mjs`);
  t.after(async () => {
    rmSync(file, { force: true });
    await server.stop();
  });
  writeFileSync(file, code);
  const { stdout } = await promisify(execFile)(process.execPath, [file], {
    env: { ...process.env, FENCE_SERVER: server.url },
    timeout: 30_000,
  });
  assert.deepEqual(stdout.trimEnd().split("\n"), want);
});
