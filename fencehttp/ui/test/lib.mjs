// Helpers of the dashboard tests: a real `fence serve` on a free port and a
// headless Chromium (Debian's, driven by playwright-core; no browser download).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

export function fenceBin() {
  const bin = process.env.FENCE_BIN;
  if (!bin || !existsSync(bin)) {
    throw new Error('FENCE_BIN must name a built fence binary (test.sh builds one); got ' + JSON.stringify(bin));
  }
  return bin;
}

export function tempDir(t, what) {
  const dir = mkdtempSync(join(tmpdir(), 'fence-ui-' + what + '-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// startServe runs `fence serve --listen 127.0.0.1:0 --data DIR extra...`, waits for
// the line that says it listens (30s at most), and stops it when the test ends.
export async function startServe(t, extra = []) {
  const data = mkdtempSync(join(tmpdir(), 'fence-ui-data-'));
  const proc = spawn(fenceBin(), ['serve', '--listen', '127.0.0.1:0', '--data', data, ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('fence serve did not say it listens within 30s:\n' + log)), 30000);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening.*url=(http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error('fence serve exited (' + (code ?? sig) + ') before listening:\n' + log));
    });
  });
  // One hook, in order: stop the server (SIGKILL after 10s), then remove its data.
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const done = new Promise((resolve) => proc.on('exit', resolve));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10000);
      await done;
      clearTimeout(timer);
    }
    rmSync(data, { recursive: true, force: true });
  });
  return { url, log: () => log };
}

// launch starts a headless Chromium and returns a fresh context of it; the browser
// is closed when the test ends. Playwright gives each launch a fresh
// --user-data-dir of its own (a temp dir it removes on close), so no profile
// state passes from one run to the next.
export async function launch(t) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60000,
  });
  // Bounded: a wedged browser must not hold the run up.
  t.after(async () => {
    let timer;
    const closed = await Promise.race([
      browser.close().then(() => true, () => false),
      new Promise((resolve) => { timer = setTimeout(() => resolve(false), 15000); }),
    ]);
    clearTimeout(timer);
    if (!closed) {
      console.log('# the browser did not close within 15s: killed');
      browser.process()?.kill('SIGKILL');
    }
  });
  return browser.newContext({ viewport: { width: 1280, height: 860 } });
}

// watchPage records what a page does that a test must refuse: requests to another
// origin, script errors, console errors.
export function watchPage(page, origin) {
  const bad = [];
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(origin + '/') && !u.startsWith('data:')) bad.push('request to another origin: ' + u);
  });
  page.on('pageerror', (e) => bad.push('script error: ' + e.message));
  page.on('console', (m) => {
    // A 401 while the page has no token is expected; the page shows the token form.
    if (m.type() === 'error' && !/401/.test(m.text())) bad.push('console error: ' + m.text());
  });
  return bad;
}

// api calls the fence HTTP API from node and returns {status, body}.
export async function api(base, method, path, { json, body, headers = {}, token } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = 'Bearer ' + token;
  if (json !== undefined) { h['Content-Type'] = 'application/json'; body = JSON.stringify(json); }
  const resp = await fetch(base + path, { method, headers: h, body, signal: AbortSignal.timeout(10000) });
  const text = await resp.text();
  let parsed = text;
  try { parsed = JSON.parse(text); } catch { /* not JSON */ }
  return { status: resp.status, body: parsed, headers: resp.headers };
}

export const lockPath = (name) => '/v1/locks/' + encodeURIComponent(name).replaceAll('.', '%2E');

// row reads the dashboard's row of a lock (null if it has none).
export function row(page, name) {
  return page.evaluate((n) => {
    const tr = [...document.querySelectorAll('#lock-rows tr')].find((r) => r.dataset.name === n);
    if (!tr) return null;
    const c = (col) => tr.querySelector('[data-col="' + col + '"]').textContent.trim();
    return {
      held: tr.dataset.held, state: c('state'), token: c('token'), lastToken: c('last_token'),
      expires: tr.querySelector('.left').textContent.trim(), nameText: tr.querySelector('th').textContent,
      nameElements: [...tr.querySelector('th').children].map((c) => c.tagName).filter((n) => n !== 'WBR'),
    };
  }, name);
}

// holders reads the rows of the holders of a semaphore or shared lock, in the order
// shown: [{slot, token, owner, expires, label}] ([] if it has none).
export function holders(page, name) {
  return page.evaluate((n) => [...document.querySelectorAll('#lock-rows tr.holder')]
    .filter((tr) => tr.dataset.holderOf === n)
    .map((tr) => {
      const c = (col) => tr.querySelector('[data-col="' + col + '"]').textContent.trim();
      return {
        slot: tr.dataset.slot, token: c('token'), owner: c('owner'),
        expires: tr.querySelector('.left').textContent.trim(), label: tr.querySelector('th').textContent.trim(),
      };
    }), name);
}

// waitHolders waits (at most ms) until the holder rows of name satisfy ok, and
// returns them.
export async function waitHolders(page, name, ok, what, ms = 10000) {
  const end = Date.now() + ms;
  let last = [];
  while (Date.now() < end) {
    last = await holders(page, name);
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('holders of ' + JSON.stringify(name) + ': want ' + what + ' within ' + ms + 'ms, got ' + JSON.stringify(last));
}

// waitRow waits (at most ms) until the row of name satisfies ok, and returns it.
export async function waitRow(page, name, ok, what, ms = 10000) {
  const end = Date.now() + ms;
  let last = null;
  while (Date.now() < end) {
    last = await row(page, name);
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('row of ' + JSON.stringify(name) + ': want ' + what + ' within ' + ms + 'ms, got ' + JSON.stringify(last));
}

// events returns the activity lines as {kind, name, text}, newest first.
export function events(page) {
  return page.evaluate(() => [...document.querySelectorAll('#events li')].map((li) => ({
    kind: li.dataset.kind, name: li.dataset.name || '', text: li.querySelector('.what').textContent,
  })));
}

export async function waitEvent(page, pred, what, ms = 10000) {
  const end = Date.now() + ms;
  let last = [];
  while (Date.now() < end) {
    last = await events(page);
    const e = last.find(pred);
    if (e) return e;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('activity: want ' + what + ' within ' + ms + 'ms, got ' + JSON.stringify(last));
}

// seconds parses a countdown ("12.3s", "1m 05s") to seconds, NaN if it is not one.
export function seconds(text) {
  let m = /^(\d+(?:\.\d+)?)s$/.exec(text);
  if (m) return Number(m[1]);
  m = /^(\d+)m (\d\d)s$/.exec(text);
  if (m) return Number(m[1]) * 60 + Number(m[2]);
  return NaN;
}
