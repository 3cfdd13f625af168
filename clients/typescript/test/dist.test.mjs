// dist/ is committed (so the package works from a git checkout without a build), and
// must be exactly what `tsc` makes of src/ today.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");

function files(dir) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => join(d.parentPath ?? d.path, d.name).slice(dir.length + 1))
    .sort();
}

test("dist/ is what tsc compiles from src/ (run `npm run build` and commit it)", (t) => {
  const out = mkdtempSync(join(tmpdir(), "fence-ts-dist-"));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const tsc = join(pkg, "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "-p", join(pkg, "tsconfig.json"), "--outDir", out], { cwd: pkg, stdio: "inherit", timeout: 120_000 });
  const dist = join(pkg, "dist");
  assert.deepEqual(files(dist), files(out), "dist/ has other files than tsc makes");
  for (const f of files(out)) {
    assert.equal(readFileSync(join(dist, f), "utf8"), readFileSync(join(out, f), "utf8"), `dist/${f} is out of date`);
  }
});

test("the package's exports resolve to dist with its types", async () => {
  const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
  assert.equal(manifest.type, "module");
  assert.deepEqual(manifest.dependencies ?? {}, {}, "the client has no runtime dependencies");
  const entry = manifest.exports["."];
  for (const f of [entry.types, entry.default]) {
    assert.ok(readFileSync(join(pkg, f), "utf8").length > 0, `${f} is missing`);
  }
  const mod = await import(join(pkg, entry.default));
  for (const name of ["FenceClient", "Lease", "KV", "FenceError", "HeldError", "StaleTokenError", "WrongLockError", "NotHeldError", "InvalidError", "UnavailableError"]) {
    assert.equal(typeof mod[name], "function", `export ${name}`);
  }
});
