// The dashboard end to end: a real `fence serve`, a real headless Chromium, locks
// taken and released and a stale write made through the API from node, and what
// the page shows checked from its DOM. Run by test.sh (FENCE_BIN set).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  startServe, launch, watchPage, api, lockPath, row, waitRow, waitEvent, seconds, tempDir,
  holders, waitHolders,
} from './lib.mjs';

// Screenshots go to $FENCE_UI_SCREENSHOTS, else to one temp dir per run (printed,
// and left for a person to look at).
let shotDir = process.env.FENCE_UI_SCREENSHOTS;
function shotPath(name) {
  if (!shotDir) shotDir = mkdtempSync(join(tmpdir(), 'fence-ui-shots-'));
  return join(shotDir, name);
}

test('dashboard shows grants, countdowns, releases and stale writes', { timeout: 120000 }, async (t) => {
  const srv = await startServe(t);
  const ctx = await launch(t);
  const page = await ctx.newPage();
  const bad = watchPage(page, srv.url);

  const resp = await page.goto(srv.url + '/ui', { waitUntil: 'load' });
  assert.equal(resp.status(), 200, 'GET /ui status');
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 10000 });
  assert.equal(await page.title(), 'fence: locks');

  // A lock appears with its token and a countdown that runs down.
  const name = 'jobs/nightly';
  const a = await api(srv.url, 'POST', lockPath(name) + '/acquire', { json: { ttl_ms: 20000 } });
  assert.equal(a.status, 200, 'acquire: ' + JSON.stringify(a.body));
  const tok = String(a.body.token);
  let r = await waitRow(page, name, (x) => x && x.held === 'true' && x.token === tok, 'held with token ' + tok);
  assert.equal(r.state, 'held');
  const first = seconds(r.expires);
  assert.ok(first > 0 && first <= 20, 'countdown after the grant: want in (0, 20]s, got ' + JSON.stringify(r.expires));
  await new Promise((res) => setTimeout(res, 1500));
  r = await row(page, name);
  const later = seconds(r.expires);
  assert.ok(later < first - 0.5 && later > first - 5,
    'countdown 1.5s later: want about ' + (first - 1.5).toFixed(1) + 's, got ' + JSON.stringify(r.expires) + ' (was ' + first + 's)');
  await waitEvent(page, (e) => e.kind === 'grant' && e.name === name && e.text.includes('granted token ' + tok), 'the grant of token ' + tok);

  // A name is text, never markup.
  const evil = 'x/<img src=x onerror=window.__pwned=1>';
  const e1 = await api(srv.url, 'POST', lockPath(evil) + '/acquire', { json: { ttl_ms: 60000 } });
  assert.equal(e1.status, 200, 'acquire ' + evil + ': ' + JSON.stringify(e1.body));
  r = await waitRow(page, evil, (x) => x && x.held === 'true', 'held');
  assert.equal(r.nameText, evil, 'name cell text');
  assert.deepEqual(r.nameElements, [], 'name cell must hold no elements but line breaks');
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'markup in a lock name ran');

  // Released: the row leaves the held locks, and the activity says so.
  const rel = await api(srv.url, 'POST', lockPath(name) + '/release', { json: { lease: a.body.lease } });
  assert.equal(rel.status, 200, 'release: ' + JSON.stringify(rel.body));
  await waitRow(page, name, (x) => x === null, 'gone from the held locks');
  await waitEvent(page, (e) => e.kind === 'release' && e.name === name && e.text.endsWith('token ' + tok + ' released'), 'the release of token ' + tok);

  // A stale write: token 2 writes, then the paused holder of token 1 tries.
  const b = await api(srv.url, 'POST', lockPath(name) + '/acquire', { json: { ttl_ms: 45000 } });
  assert.equal(b.status, 200, 'second acquire: ' + JSON.stringify(b.body));
  // Each write carries its lease: a live lease's token without it is lease_required.
  const fenced = (grant) => ({ 'Fence-Token': String(grant.token), 'Fence-Lock': encodeURIComponent(name), 'Fence-Lease': grant.lease });
  const ok = await api(srv.url, 'PUT', '/v1/kv/ledger', { body: 'balance=120', headers: fenced(b.body) });
  assert.equal(ok.status, 200, 'fenced write: ' + JSON.stringify(ok.body));
  const staleBefore = Number(await page.textContent('#m-stale'));
  assert.equal(staleBefore, 0, 'stale rejections before the stale write');
  const stale = await api(srv.url, 'PUT', '/v1/kv/ledger', { body: 'balance=90', headers: fenced(a.body) });
  assert.equal(stale.status, 409, 'stale write: ' + JSON.stringify(stale.body));
  assert.equal(stale.body.code, 'stale_token');
  await page.waitForFunction(() => document.getElementById('m-stale').textContent === '1', null, { timeout: 10000 });
  await waitEvent(page, (e) => e.kind === 'stale' && e.text.startsWith('1 stale write refused'), 'the stale write');
  assert.equal(await page.textContent('#m-writes'), '1', 'fenced writes accepted');
  await waitRow(page, name, (x) => x && x.held === 'true' && x.token === String(b.body.token), 'held with token ' + b.body.token);

  // A renewal that lengthens the lease shows, and the countdown follows it.
  const rn = await api(srv.url, 'POST', lockPath(name) + '/renew', { json: { lease: b.body.lease, ttl_ms: 120000 } });
  assert.equal(rn.status, 200, 'renew: ' + JSON.stringify(rn.body));
  await waitEvent(page, (e) => e.kind === 'renew' && e.name === name && e.text.includes('token ' + b.body.token + ' renewed'), 'the renewal');
  r = await waitRow(page, name, (x) => x && seconds(x.expires) > 100, 'over 100s left after the renewal');

  // A lease left to expire: the countdown runs out and the activity says expired.
  const short = 'short/lived';
  const c = await api(srv.url, 'POST', lockPath(short) + '/acquire', { json: { ttl_ms: 2500 } });
  assert.equal(c.status, 200, 'acquire ' + short);
  await waitRow(page, short, (x) => x && x.held === 'true' && seconds(x.expires) <= 2.5, 'held, at most 2.5s left');
  await waitEvent(page, (e) => e.kind === 'expire' && e.name === short && e.text.endsWith(' token ' + c.body.token + ' expired'),
    'the expiry of token ' + c.body.token);
  await waitRow(page, short, (x) => x === null, 'gone from the held locks');

  // A semaphore with two holders: a row for the semaphore, then one per holder with
  // its slot, token, countdown and owner (not "held x2" with one owner).
  const pool = 'pool/workers';
  const permits = [];
  for (const owner of ['worker-a@host1:4242', 'worker-b@host2:977']) {
    const p = await api(srv.url, 'POST', lockPath(pool) + '/acquire', { json: { ttl_ms: 60000, limit: 3, owner } });
    assert.equal(p.status, 200, 'acquire a permit of ' + pool + ': ' + JSON.stringify(p.body));
    permits.push({ ...p.body, owner });
  }
  r = await waitRow(page, pool, (x) => x && x.held === 'true' && x.state === 'held 2/3', 'held 2/3');
  assert.equal(r.token, '–', 'the semaphore row leaves the tokens to its holders');
  let hs = await waitHolders(page, pool, (x) => x.length === 2, 'two holders');
  assert.deepEqual(hs.map((h) => [h.label, h.slot, h.token, h.owner]),
    permits.map((p) => ['slot ' + p.slot, String(p.slot), String(p.token), p.owner]), 'the holders of ' + pool);
  for (const h of hs) assert.ok(seconds(h.expires) > 50 && seconds(h.expires) <= 60, 'countdown of a holder: ' + JSON.stringify(h));
  for (const p of permits) {
    await waitEvent(page, (e) => e.kind === 'grant' && e.name === pool && e.text.endsWith(' granted token ' + p.token + ' (slot ' + p.slot + ') to ' + p.owner),
      'the grant of ' + pool + "'s slot " + p.slot);
  }

  // A shared lock with two readers: "shared ×2", both readers listed.
  const readers = 'reports/readers';
  for (const owner of ['report-builder', 'auditor']) {
    const x = await api(srv.url, 'POST', lockPath(readers) + '/acquire', { json: { ttl_ms: 40000, shared: true, owner } });
    assert.equal(x.status, 200, 'acquire ' + readers + ' shared: ' + JSON.stringify(x.body));
  }
  await waitRow(page, readers, (x) => x && x.state === 'shared ×2', 'shared ×2');
  hs = await waitHolders(page, readers, (x) => x.length === 2, 'two shared holders');
  assert.deepEqual(hs.map((h) => [h.label, h.owner]), [['shared', 'report-builder'], ['shared', 'auditor']], 'the readers of ' + readers);

  // A few more locks, so the picture shows a dashboard in use.
  for (const [n, ttl] of [['reports/daily', 90000], ['payments/reconcile', 8000]]) {
    const x = await api(srv.url, 'POST', lockPath(n) + '/acquire', { json: { ttl_ms: ttl } });
    assert.equal(x.status, 200, 'acquire ' + n);
  }
  await waitRow(page, 'payments/reconcile', (x) => x && x.held === 'true', 'held');
  await new Promise((res) => setTimeout(res, 1200)); // a poll with everything on it
  const shot = shotPath('dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  assert.ok(existsSync(shot));
  console.log('# screenshot: ' + shot);

  // Dark and narrow screens get the same page, readable.
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: shotPath('dashboard-dark.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 420, height: 900 });
  await page.screenshot({ path: shotPath('dashboard-narrow.png'), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 860 });

  // One permit released: its row goes, the other stays, and the activity names the slot.
  const gone = permits[0];
  const pr = await api(srv.url, 'POST', lockPath(pool) + '/release', { json: { lease: gone.lease } });
  assert.equal(pr.status, 200, 'release a permit: ' + JSON.stringify(pr.body));
  await waitRow(page, pool, (x) => x && x.state === 'held 1/3', 'held 1/3');
  hs = await waitHolders(page, pool, (x) => x.length === 1, 'one holder');
  assert.equal(hs[0].owner, permits[1].owner, 'the permit left');
  await waitEvent(page, (e) => e.kind === 'release' && e.name === pool && e.text.endsWith('token ' + gone.token + ' (slot ' + gone.slot + ') released'),
    'the release of slot ' + gone.slot);

  // Accessible: every control is labelled, the page has a language, and Pause works
  // from the keyboard.
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select')]
    .filter((c) => !document.querySelector('label[for="' + c.id + '"]')).map((c) => c.id || c.name));
  assert.deepEqual(unlabelled, [], 'controls without a label');
  assert.equal(await page.getAttribute('html', 'lang'), 'en');
  await page.focus('#pause');
  await page.keyboard.press('Space');
  await page.waitForSelector('#conn[data-state="paused"]', { timeout: 5000 });
  assert.equal(await page.getAttribute('#pause', 'aria-pressed'), 'true');
  await page.waitForFunction(() => document.body.dataset.polling === 'false', null, { timeout: 5000 });
  const updated = await page.textContent('#updated');
  await new Promise((res) => setTimeout(res, 2200));
  assert.equal(await page.textContent('#updated'), updated, 'polled while paused');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 5000 });
  assert.equal(await page.getAttribute('#pause', 'aria-pressed'), 'false');

  // The filter comes from the URL: a prefix, and a limit that cuts the listing.
  await page.goto(srv.url + '/ui?prefix=' + encodeURIComponent('reports/'));
  await waitRow(page, 'reports/daily', (x) => x && x.held === 'true', 'held');
  assert.equal(await row(page, name), null, name + ' shown under the prefix reports/');
  assert.equal(await page.inputValue('#prefix'), 'reports/');
  await page.goto(srv.url + '/ui?limit=2');
  await page.waitForSelector('#truncated:not([hidden])', { timeout: 10000 });
  assert.match(await page.textContent('#truncated'), /first 2 locks/);
  assert.equal(await page.locator('#lock-rows tr[data-name]').count(), 2, 'locks with limit=2');

  // Free names too (all=true, from the URL or the checkbox): the free locks with
  // their last tokens; unticked, the held ones again.
  await page.goto(srv.url + '/ui?all=true');
  r = await waitRow(page, short, (x) => x && x.held === 'false', 'listed free');
  assert.equal(r.state, 'free');
  assert.equal(r.token, '–', 'token of a free lock');
  assert.equal(r.lastToken, String(c.body.token), 'last token of the expired lock');
  assert.equal(r.expires, '–', 'countdown of a free lock');
  assert.equal(await page.isChecked('#all'), true, 'the checkbox follows all=true');
  await page.uncheck('#all');
  await waitRow(page, short, (x) => x === null, 'gone once free names are not asked for');
  assert.ok(!new URL(page.url()).searchParams.has('all'), 'all still in the URL: ' + page.url());
  await page.check('#all');
  await waitRow(page, short, (x) => x && x.held === 'false', 'listed free again');

  assert.deepEqual(bad, [], 'the page went elsewhere or failed');
});

test('dashboard asks for the token when the server needs one', { timeout: 120000 }, async (t) => {
  const token = 'ui-test-' + Math.random().toString(36).slice(2);
  const dir = tempDir(t, 'auth');
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  const srv = await startServe(t, ['--auth-token-file', tokenFile]);

  // The page's files need no token; the API does.
  for (const p of ['/ui', '/ui/', '/ui/app.js', '/ui/style.css']) {
    assert.equal((await api(srv.url, 'GET', p)).status, 200, 'GET ' + p + ' without a token');
  }
  assert.equal((await api(srv.url, 'GET', '/v1/locks')).status, 401, 'GET /v1/locks without a token');
  assert.equal((await api(srv.url, 'GET', '/metrics')).status, 401, 'GET /metrics without a token');

  const name = 'secured/job';
  const a = await api(srv.url, 'POST', lockPath(name) + '/acquire', { json: { ttl_ms: 30000 }, token });
  assert.equal(a.status, 200, 'acquire with the token: ' + JSON.stringify(a.body));

  const ctx = await launch(t);
  const page = await ctx.newPage();
  const bad = watchPage(page, srv.url);
  const apiCalls = [];
  page.on('request', (req) => {
    const u = new URL(req.url());
    if (u.pathname.startsWith('/v1/') || u.pathname === '/metrics') apiCalls.push({ url: req.url(), auth: req.headers().authorization });
  });
  await page.goto(srv.url + '/ui');
  await page.waitForSelector('#auth:not([hidden])', { timeout: 10000 });
  assert.equal(await page.getAttribute('#conn', 'data-state'), 'auth');
  assert.equal(await row(page, name), null, 'a lock shown without a token');

  // A wrong token is refused and said so.
  await page.fill('#token', 'wrong');
  await page.click('#auth-form button[type="submit"]');
  await page.waitForFunction(() => document.getElementById('auth-why').textContent.includes('refused'), null, { timeout: 10000 });
  assert.equal(await row(page, name), null, 'a lock shown with a wrong token');

  await page.fill('#token', token);
  await page.click('#auth-form button[type="submit"]');
  const r = await waitRow(page, name, (x) => x && x.held === 'true' && x.token === String(a.body.token), 'held with token ' + a.body.token);
  assert.ok(seconds(r.expires) > 0, 'countdown: ' + r.expires);
  assert.equal(await page.isHidden('#auth'), true, 'token form still shown');
  await page.waitForSelector('#conn[data-state="live"]');
  assert.ok(await page.isVisible('#forget'), 'no way to forget the token');

  const late = apiCalls.filter((c) => c.auth === 'Bearer ' + token);
  assert.ok(late.some((c) => c.url.includes('/v1/locks')) && late.some((c) => c.url.endsWith('/metrics')),
    'API calls with the token: ' + JSON.stringify(apiCalls.map((c) => [c.url, !!c.auth])));
  for (const c of apiCalls) assert.ok(!c.url.includes(token), 'the token went into a URL: ' + c.url);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('fence.ui.token')), token);
  assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing kept beyond the tab');

  // Forgetting the token asks for it again.
  await page.click('#forget');
  await page.waitForSelector('#auth:not([hidden])', { timeout: 10000 });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('fence.ui.token')), null);
  assert.equal(await row(page, name), null, 'a lock still shown after forgetting the token');
  assert.equal(await page.textContent('#m-grants'), '–', 'counters still shown after forgetting the token');
  assert.ok(!(await page.textContent('#auth-why')).includes('refused'), 'the old refusal still shown');
  assert.equal(await page.locator('#events li').count(), 0, 'activity still shown after forgetting the token');

  const shot = shotPath('dashboard-auth.png');
  await page.screenshot({ path: shot });
  console.log('# screenshot: ' + shot);
  assert.deepEqual(bad, [], 'the page went elsewhere or failed');
});
