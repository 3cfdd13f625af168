// fence dashboard: polls GET /v1/locks and GET /metrics, shows the held locks (every
// name the store knows with "Free names too") with every holder of a semaphore or
// shared lock and a countdown to each lease's expiry, and logs what changed
// between polls. No framework, no build
// step; every text from the server goes into the page as text, never as HTML.
'use strict';

(function () {
  const POLL_MS = 1000;         // between the end of a poll and the next
  const MAX_BACKOFF_MS = 15000; // longest pause after failures
  const TICK_MS = 100;          // countdown refresh
  const MAX_EVENTS = 200;       // activity lines kept
  const TOKEN_KEY = 'fence.ui.token';

  const $ = (id) => document.getElementById(id);
  const el = {
    conn: $('conn'), pause: $('pause'), forget: $('forget'),
    auth: $('auth'), authWhy: $('auth-why'), authForm: $('auth-form'), token: $('token'),
    error: $('error'), filter: $('filter'), prefix: $('prefix'), limit: $('limit'), all: $('all'),
    truncated: $('truncated'), rows: $('lock-rows'), empty: $('empty'), updated: $('updated'),
    every: $('every'), events: $('events'), table: $('locks'),
  };

  const state = {
    token: readToken(),
    paused: false,
    timer: 0,
    failures: 0,
    polling: false,
    // The listing last shown, by name: {info, holders, multi, row, holderRows};
    // each holder {slot, token, owner, expires_in_ms, deadline, span}.
    locks: new Map(),
    listed: false,     // a listing with the current filter has been shown
    truncated: false,
    metrics: null,     // last counters read, by name
    filterKey: '',
  };

  function readToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }
  function saveToken(t) {
    state.token = t;
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: the token lasts until the page reloads */ }
    el.forget.hidden = !t;
  }

  // ---- API ---------------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  // api fetches path and returns the Response, or throws an APIError that says
  // what the server answered (its JSON "error" line when it sent one).
  async function api(path) {
    const headers = {};
    if (state.token) headers.Authorization = 'Bearer ' + state.token;
    let resp;
    try {
      resp = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      throw new APIError(0, 'unreachable', 'cannot reach the fence server at ' + location.origin);
    }
    if (resp.ok) return resp;
    let msg = resp.status + ' ' + resp.statusText, code = '';
    try {
      const body = await resp.json();
      if (body && typeof body.error === 'string') msg = body.error;
      if (body && typeof body.code === 'string') code = body.code;
    } catch (e) { /* not JSON: keep the status line */ }
    throw new APIError(resp.status, code, msg);
  }

  function listPath() {
    const q = new URLSearchParams();
    const prefix = el.prefix.value.trim();
    if (prefix) q.set('prefix', prefix);
    q.set('limit', el.limit.value);
    if (el.all.checked) q.set('all', 'true');
    return '/v1/locks?' + q.toString();
  }

  // parseMetrics reads the unlabelled counters of the Prometheus text format.
  function parseMetrics(text) {
    const out = {};
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\s+(\S+)/.exec(line);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  }

  // isMulti says whether a lock is a semaphore or a shared lock with live leases:
  // the server then lists each of them in "holders" (slot, token, owner,
  // expires_in_ms), and the lock's own token, owner and expiry are the newest one's.
  function isMulti(info) { return Array.isArray(info.holders) && info.holders.length > 0; }

  // holdersOf is the holders of a lock in one shape: every lease of a semaphore or
  // shared lock, the one holder of a lock held exclusively, none if it is free.
  function holdersOf(info) {
    if (isMulti(info)) return info.holders;
    if (!info.held) return [];
    return [{ slot: 0, token: info.token, owner: info.owner, expires_in_ms: info.expires_in_ms }];
  }
  function waitersOf(info) {
    if (Array.isArray(info.waiters)) return info.waiters.length;
    return typeof info.waiters === 'number' ? info.waiters : undefined;
  }

  // ---- polling -------------------------------------------------------------

  function schedule(ms) {
    clearTimeout(state.timer);
    if (!state.paused) state.timer = setTimeout(poll, ms);
  }

  async function poll() {
    if (state.polling) return;
    state.polling = true;
    document.body.dataset.polling = 'true'; // for tests: a poll is in flight
    const key = listPath();
    const sent = performance.now();
    try {
      const [list, metrics] = await Promise.allSettled([
        api(key).then((r) => r.json()),
        api('/metrics').then((r) => r.text()),
      ]);
      if (list.status === 'rejected') throw list.reason;
      hideAuth();
      if (key !== state.filterKey) { // the filter changed under this poll: start over
        state.filterKey = key;
        resetListing();
      }
      showLocks(Array.isArray(list.value.locks) ? list.value.locks : [], sent);
      if (metrics.status === 'fulfilled') showMetrics(parseMetrics(metrics.value));
      setError('');
      // A poll sent before Pause may answer after it: show it, stay paused.
      if (state.paused) setConn('paused', 'Paused'); else setConn('live', 'Live');
      el.updated.textContent = new Date().toLocaleTimeString();
      state.failures = 0;
      schedule(POLL_MS);
    } catch (e) {
      state.failures++;
      if (e instanceof APIError && e.status === 401) {
        clearData();
        showAuth(state.token
          ? 'The server refused this token (401). Check it and try again.'
          : 'The API answered 401: send the bearer token the server was started with (--auth-token-file).');
        setConn('auth', 'Token needed');
        setError('');
        clearTimeout(state.timer); // wait for a token
      } else {
        const wait = Math.min(POLL_MS * 2 ** state.failures, MAX_BACKOFF_MS);
        setConn('error', 'Not updating');
        setError(e.message + ' (trying again in ' + Math.round(wait / 1000) + 's)');
        schedule(wait);
      }
    } finally {
      state.polling = false;
      document.body.dataset.polling = 'false';
    }
  }

  function resetListing() {
    state.locks.clear();
    state.listed = false;
    el.rows.textContent = '';
  }

  // clearData removes everything read from the server (on a 401, or when the
  // token is forgotten): nothing read with a token stays on screen without one.
  function clearData() {
    resetListing();
    state.metrics = null;
    for (const dd of document.querySelectorAll('dd[data-metric]')) setText(dd, '–');
    $('m-stale').parentElement.classList.remove('bumped');
    el.updated.textContent = 'never';
    el.truncated.hidden = true;
    el.events.textContent = '';
    el.table.hidden = true;
    el.empty.hidden = true;
  }

  // ---- locks ---------------------------------------------------------------

  function showLocks(infos, sent) {
    const now = performance.now();
    const first = !state.listed;
    const prev = state.locks;
    const next = new Map();
    const limit = Number(el.limit.value);
    const truncated = infos.length >= limit;
    let anyOwner = false, anyWaiters = false;

    infos.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const info of infos) {
      const old = prev.get(info.name);
      const before = new Map(old ? old.holders.map((x) => [x.token, x]) : []);
      const holders = holdersOf(info).map((x) => {
        // The countdown starts from when the request was sent: the server measured
        // expires_in_ms after that, so the deadline shown is never later than its own.
        const ms = Number(x.expires_in_ms) || 0;
        const o = before.get(x.token);
        return {
          slot: Number(x.slot) || 0, token: x.token, owner: x.owner || '', expires_in_ms: ms,
          deadline: ms > 0 ? sent + ms : 0,
          span: Math.max(o ? o.span : 0, ms), // the longest seen for this lease: the bar's 100%
          row: o ? o.row : null,
        };
      });
      const entry = { info, holders, multi: isMulti(info), row: old ? old.row : null };
      if (!first) diff(info.name, old, entry, now);
      if (holders.some((x) => x.owner)) anyOwner = true;
      if (waitersOf(info) !== undefined) anyWaiters = true;
      next.set(info.name, entry);
    }
    if (!first && !truncated && !state.truncated) {
      for (const [name, old] of prev) {
        if (next.has(name)) continue;
        // Not listed any more: a held lock that is now free (the listing shows
        // held locks only unless "Free names too" is on).
        if (old.holders.length) diff(name, old, { info: {}, holders: [], multi: false }, now);
        else event('release', name, 'is no longer listed');
      }
    }
    if (first) {
      const what = el.all.checked ? (infos.length === 1 ? ' lock' : ' locks') : (infos.length === 1 ? ' held lock' : ' held locks');
      event('info', '', 'watching ' + infos.length + what +
        (el.prefix.value.trim() ? ' under "' + el.prefix.value.trim() + '"' : ''));
    }
    state.locks = next;
    state.listed = true;
    state.truncated = truncated;

    setOptional('owner', anyOwner);
    setOptional('waiters', anyWaiters);
    render(anyOwner, anyWaiters, prev);
    el.truncated.hidden = !truncated;
    el.truncated.textContent = truncated
      ? 'Showing the first ' + infos.length + ' locks by name: narrow the prefix or raise the limit to see the rest.'
      : '';
    el.empty.hidden = infos.length > 0;
    el.table.hidden = infos.length === 0;
    $('m-held').textContent = String(infos.filter((i) => holdersOf(i).length > 0).length) + (truncated ? '+' : '');
    el.empty.textContent = el.all.checked
      ? 'No locks yet. A lock appears here once it has been acquired.'
      : 'No lock is held' + (el.prefix.value.trim() ? ' under this prefix' : '') +
        '. Tick "Free names too" to list every name the store knows.';
    tick();
  }

  // diff logs what happened to one lock between two polls, lease by lease: a
  // semaphore's or shared lock's holders come and go one at a time.
  function diff(name, old, cur, now) {
    const last = cur.info.last_token || 0;
    if (!old) {
      for (const h of cur.holders) event('grant', name, 'granted token ' + h.token + slotText(cur, h) + ownerText(h));
      if (!cur.holders.length && last) event('release', name, 'granted and freed between polls (last token ' + last + ')');
      return;
    }
    const was = new Map(old.holders.map((h) => [h.token, h]));
    const is = new Map(cur.holders.map((h) => [h.token, h]));
    const gone = old.holders.filter((h) => !is.has(h.token));
    const come = cur.holders.filter((h) => !was.has(h.token));
    if (!old.multi && !cur.multi && gone.length === 1 && come.length === 1) {
      event('grant', name, 'token ' + gone[0].token + ' ended; granted token ' + come[0].token + ownerText(come[0]));
      return;
    }
    for (const o of gone) {
      // The API does not say how a lease ended; one whose countdown had run out expired.
      if (o.deadline && o.deadline <= now + 50) event('expire', name, 'token ' + o.token + slotText(old, o) + ' expired');
      else event('release', name, 'token ' + o.token + slotText(old, o) + ' released');
    }
    for (const h of come) event('grant', name, 'granted token ' + h.token + slotText(cur, h) + ownerText(h));
    for (const h of cur.holders) {
      const o = was.get(h.token);
      if (o && h.deadline > o.deadline + 500) {
        event('renew', name, 'token ' + h.token + slotText(cur, h) + ' renewed (' + fmtLeft(h.deadline - now) + ' left)');
      }
    }
  }

  // slotText names a semaphore holder's slot in the activity.
  function slotText(e, h) { return e.multi && e.info.limit > 0 ? ' (slot ' + h.slot + ')' : ''; }

  // No "grants missed" from a token's jump: tokens only increase, with gaps (a
  // store may count all locks on one counter).
  function ownerText(h) { return h.owner ? ' to ' + h.owner : ''; }

  function setOptional(col, on) {
    for (const th of el.table.querySelectorAll('th[data-optional="' + col + '"]')) th.hidden = !on;
  }

  function render(anyOwner, anyWaiters, prev) {
    let at = el.rows.firstChild;
    const place = (tr) => {
      if (tr !== at) el.rows.insertBefore(tr, at); else at = at.nextSibling;
    };
    for (const [name, e] of state.locks) {
      if (!e.row) e.row = makeRow(name);
      const changed = fill(e, anyOwner, anyWaiters);
      if (changed && prev.size > 0 && prev.has(name)) flash(e.row);
      place(e.row);
      // A semaphore's or shared lock's holders, a row each, under the lock's.
      for (const h of e.multi ? e.holders : []) {
        const fresh = !h.row;
        if (fresh) h.row = makeHolderRow(name);
        fillHolder(e, h, anyOwner, anyWaiters);
        if (fresh && prev.size > 0 && prev.has(name)) flash(h.row);
        place(h.row);
      }
    }
    while (at) { const n = at.nextSibling; at.remove(); at = n; }
  }

  function makeRow(name) {
    const tr = document.createElement('tr');
    tr.dataset.name = name;
    const th = document.createElement('th');
    th.scope = 'row';
    // A line may break after a '/', where names have their structure.
    name.split('/').forEach((part, i, parts) => {
      th.append(part + (i < parts.length - 1 ? '/' : ''));
      if (i < parts.length - 1) th.appendChild(document.createElement('wbr'));
    });
    tr.appendChild(th);
    for (const col of ['state', 'token', 'expires', 'last_token', 'owner', 'waiters']) {
      const td = document.createElement('td');
      td.dataset.col = col;
      if (col === 'token' || col === 'last_token' || col === 'waiters') td.className = 'num';
      tr.appendChild(td);
    }
    addCountdown(tr);
    return tr;
  }

  // makeHolderRow makes the row of one holder of the semaphore or shared lock name.
  function makeHolderRow(name) {
    const tr = document.createElement('tr');
    tr.className = 'holder';
    tr.dataset.holderOf = name;
    const th = document.createElement('th');
    th.scope = 'row';
    tr.appendChild(th);
    for (const col of ['state', 'token', 'expires', 'last_token', 'owner', 'waiters']) {
      const td = document.createElement('td');
      td.dataset.col = col;
      if (col === 'token' || col === 'last_token' || col === 'waiters') td.className = 'num';
      tr.appendChild(td);
    }
    addCountdown(tr);
    return tr;
  }

  function addCountdown(tr) {
    const exp = tr.querySelector('[data-col="expires"]');
    const wrap = document.createElement('div');
    wrap.className = 'expires';
    const text = document.createElement('span');
    text.className = 'left';
    const bar = document.createElement('div');
    bar.className = 'bar';
    bar.setAttribute('aria-hidden', 'true');
    bar.appendChild(document.createElement('span'));
    wrap.append(text, bar);
    exp.appendChild(wrap);
  }

  // stateText is a lock's state as its badge says it: "held", "free", a
  // semaphore's "held 2/3" (2 of its 3 permits) or a shared lock's "shared ×2".
  function stateText(e) {
    if (!e.holders.length) return 'free';
    if (!e.multi) return 'held';
    if (e.info.shared) return 'shared ×' + e.holders.length;
    return 'held ' + e.holders.length + '/' + e.info.limit;
  }

  // fill writes an entry into its row and reports whether its holders changed. A
  // semaphore's or shared lock's row says how many hold it; its holders' rows
  // (fillHolder) give each one's token, time left and owner.
  function fill(e, anyOwner, anyWaiters) {
    const tr = e.row, h = e.multi ? null : e.holders[0];
    const cell = (c) => tr.querySelector('[data-col="' + c + '"]');
    const held = e.holders.length > 0;
    const text = stateText(e);
    const before = tr.dataset.holder || '';
    const holder = e.holders.map((x) => x.token).join(' ');
    tr.dataset.held = String(held);
    tr.dataset.holder = holder;
    tr.classList.toggle('multi', e.multi);

    const st = cell('state');
    if (st.textContent !== text) {
      st.textContent = '';
      const b = document.createElement('span');
      b.className = 'badge ' + (held ? 'held' : 'free');
      b.textContent = text;
      st.appendChild(b);
    }
    setText(cell('token'), h ? String(h.token) : '–');
    setText(cell('last_token'), e.info.last_token ? String(e.info.last_token) : '–');
    const owner = cell('owner');
    owner.hidden = !anyOwner;
    setOwner(owner, h && h.owner ? String(h.owner) : '–');
    const waiters = cell('waiters');
    waiters.hidden = !anyWaiters;
    const w = waitersOf(e.info);
    setText(waiters, w === undefined ? '–' : String(w));
    return before !== holder;
  }

  // fillHolder writes one holder h of the semaphore or shared lock e into its row.
  function fillHolder(e, h, anyOwner, anyWaiters) {
    const tr = h.row;
    const cell = (c) => tr.querySelector('[data-col="' + c + '"]');
    tr.dataset.token = String(h.token);
    tr.dataset.slot = String(h.slot);
    setText(tr.querySelector('th'), e.info.shared ? 'shared' : 'slot ' + h.slot);
    setText(cell('state'), '');
    setText(cell('token'), String(h.token));
    setText(cell('last_token'), '');
    const owner = cell('owner');
    owner.hidden = !anyOwner;
    setOwner(owner, h.owner ? String(h.owner) : '–');
    const waiters = cell('waiters');
    waiters.hidden = !anyWaiters;
    setText(waiters, '');
  }

  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

  // setOwner writes an owner ("host:pid command") into node, each word kept on one
  // line: it breaks at its spaces, never inside "worker-a@host".
  function setOwner(node, text) {
    if (node.textContent === text) return;
    node.textContent = '';
    text.split(' ').forEach((word, i) => {
      if (i > 0) node.append(' ');
      const w = document.createElement('span');
      w.className = 'word';
      w.textContent = word;
      node.appendChild(w);
    });
  }

  function flash(tr) {
    tr.classList.remove('changed');
    void tr.offsetWidth; // restart the animation
    tr.classList.add('changed');
  }

  // tick redraws the countdowns from the deadlines of the last poll: a lock's own
  // for a lock held exclusively, each holder's for a semaphore or shared lock.
  function tick() {
    const now = performance.now();
    for (const e of state.locks.values()) {
      if (!e.row) continue;
      countdown(e.row, e.multi ? null : e.holders[0], now);
      if (e.multi) for (const h of e.holders) if (h.row) countdown(h.row, h, now);
    }
  }

  // countdown shows in row tr the time h has left ("–" without a holder).
  function countdown(tr, h, now) {
    const text = tr.querySelector('.left');
    const bar = tr.querySelector('.bar');
    if (!h) {
      setText(text, '–');
      bar.hidden = true;
      return;
    }
    if (!h.deadline) {
      setText(text, 'unknown');
      bar.hidden = true;
      return;
    }
    const left = h.deadline - now;
    setText(text, left > 0 ? fmtLeft(left) : 'expiring…');
    bar.hidden = false;
    const frac = h.span > 0 ? Math.max(0, Math.min(1, left / h.span)) : 0;
    bar.firstChild.style.width = (frac * 100).toFixed(1) + '%';
    bar.classList.toggle('low', frac < 0.25);
  }

  function fmtLeft(ms) {
    if (ms < 60000) return (Math.max(ms, 0) / 1000).toFixed(1) + 's';
    const s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + 'm ' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h ' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
  }

  // ---- metrics -------------------------------------------------------------

  function showMetrics(m) {
    const prev = state.metrics;
    for (const dd of document.querySelectorAll('dd[data-metric^="fence_"]')) {
      const v = m[dd.dataset.metric];
      setText(dd, v === undefined ? '–' : String(v));
    }
    const stale = m.fence_stale_rejections_total;
    if (prev && stale !== undefined && prev.fence_stale_rejections_total !== undefined) {
      const d = stale - prev.fence_stale_rejections_total;
      if (d > 0) {
        event('stale', '', d + (d === 1 ? ' stale write' : ' stale writes') +
          ' refused (a holder wrote with an old token; the store kept the newer value)');
        const card = $('m-stale').parentElement;
        card.classList.add('bumped');
      } else if (d < 0) {
        event('info', '', 'the server restarted: its counters started again from 0');
      }
    }
    state.metrics = m;
  }

  // ---- activity, status ----------------------------------------------------

  function event(kind, name, what) {
    const li = document.createElement('li');
    li.dataset.kind = kind;
    if (name) li.dataset.name = name;
    const t = document.createElement('time');
    const d = new Date();
    t.dateTime = d.toISOString();
    t.textContent = d.toLocaleTimeString();
    const w = document.createElement('span');
    w.className = 'what';
    if (name) {
      const n = document.createElement('strong');
      n.textContent = name;
      w.append(n, ' ');
    }
    w.append(what);
    li.append(t, w);
    el.events.prepend(li);
    while (el.events.childElementCount > MAX_EVENTS) el.events.lastElementChild.remove();
  }

  function setConn(s, text) {
    if (el.conn.dataset.state === s && el.conn.textContent === text) return;
    el.conn.dataset.state = s;
    el.conn.textContent = text;
  }
  function setError(msg) {
    el.error.hidden = !msg;
    setText(el.error, msg);
  }
  function showAuth(why) {
    el.auth.hidden = false;
    if (why) el.authWhy.textContent = why;
    if (document.activeElement !== el.token) el.token.focus();
  }
  function hideAuth() { el.auth.hidden = true; }

  // ---- controls ------------------------------------------------------------

  el.authForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = el.token.value.trim();
    if (!t) return;
    saveToken(t);
    el.token.value = '';
    setConn('connecting', 'Connecting…');
    poll();
  });
  el.forget.addEventListener('click', () => {
    saveToken('');
    clearData();
    poll();
  });
  el.pause.addEventListener('click', () => {
    state.paused = !state.paused;
    el.pause.setAttribute('aria-pressed', String(state.paused));
    el.pause.textContent = state.paused ? 'Resume' : 'Pause';
    if (state.paused) {
      clearTimeout(state.timer);
      setConn('paused', 'Paused');
    } else {
      poll();
    }
  });
  el.filter.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams(location.search);
    const prefix = el.prefix.value.trim();
    if (prefix) q.set('prefix', prefix); else q.delete('prefix');
    q.set('limit', el.limit.value);
    if (el.all.checked) q.set('all', 'true'); else q.delete('all');
    history.replaceState(null, '', location.pathname + '?' + q.toString());
    if (!state.paused) poll();
  });

  // Free names too applies at once, as a changed filter.
  el.all.addEventListener('change', () => el.filter.requestSubmit());

  // The filter can come in the page's URL (shareable; the token never does).
  const params = new URLSearchParams(location.search);
  if (params.has('prefix')) el.prefix.value = params.get('prefix');
  el.all.checked = params.get('all') === 'true';
  if (params.has('limit')) {
    const v = params.get('limit');
    if (![...el.limit.options].some((o) => o.value === v) && /^[1-9][0-9]{0,4}$/.test(v) && Number(v) <= 10000) {
      el.limit.add(new Option(v, v));
    }
    if ([...el.limit.options].some((o) => o.value === v)) el.limit.value = v;
  }
  el.every.textContent = POLL_MS === 1000 ? 'second' : POLL_MS / 1000 + ' seconds';
  el.forget.hidden = !state.token;
  setInterval(tick, TICK_MS);
  poll();
})();
