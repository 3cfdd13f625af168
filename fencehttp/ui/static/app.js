// fence dashboard: polls GET /v1/locks and GET /metrics, shows every lock with a
// countdown to expiry, and logs what changed between polls. No framework, no build
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
    error: $('error'), filter: $('filter'), prefix: $('prefix'), limit: $('limit'),
    truncated: $('truncated'), rows: $('lock-rows'), empty: $('empty'), updated: $('updated'),
    every: $('every'), events: $('events'), table: $('locks'),
  };

  const state = {
    token: readToken(),
    paused: false,
    timer: 0,
    failures: 0,
    polling: false,
    // The listing last shown, by name: {info, holders, deadline, span, row}.
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

  // holdersOf is the holders of a lock in one shape, whatever the server sends:
  // today {held, token, expires_in_ms}; later, a "holders" list with owners
  // (shared locks, semaphores).
  function holdersOf(info) {
    if (Array.isArray(info.holders)) return info.holders;
    if (!info.held) return [];
    return [{ token: info.token, owner: info.owner, expires_in_ms: info.expires_in_ms }];
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
      const holders = holdersOf(info);
      const old = prev.get(info.name);
      const h = holders[0];
      // The countdown starts from when the request was sent: the server measured
      // expires_in_ms after that, so the deadline shown is never later than its own.
      const deadline = h && h.expires_in_ms > 0 ? sent + h.expires_in_ms : 0;
      let span = h ? h.expires_in_ms : 0;
      if (old && old.holders[0] && h && old.holders[0].token === h.token) {
        span = Math.max(old.span, span); // the longest seen for this grant: the bar's 100%
      }
      const entry = { info, holders, deadline, span, row: old ? old.row : null };
      if (!first) diff(info.name, old, entry, now);
      if (holders.some((x) => x.owner)) anyOwner = true;
      if (waitersOf(info) !== undefined) anyWaiters = true;
      next.set(info.name, entry);
    }
    if (!first && !truncated && !state.truncated) {
      for (const [name, old] of prev) {
        if (!next.has(name)) event('release', name, 'is no longer listed' + (old.holders[0] ? ' (token ' + old.holders[0].token + ')' : ''));
      }
    }
    if (first) {
      event('info', '', 'watching ' + infos.length + (infos.length === 1 ? ' lock' : ' locks') +
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
    tick();
  }

  // diff logs what happened to one lock between two polls.
  function diff(name, old, cur, now) {
    const h = cur.holders[0];
    const last = cur.info.last_token || 0;
    if (!old) {
      if (h) event('grant', name, 'granted token ' + h.token + ownerText(h));
      else if (last) event('release', name, 'granted and freed between polls (last token ' + last + ')');
      return;
    }
    const o = old.holders[0];
    if (o && h && o.token !== h.token) {
      event('grant', name, 'token ' + o.token + ' ended; granted token ' + h.token + ownerText(h));
    } else if (!o && h) {
      event('grant', name, 'granted token ' + h.token + ownerText(h));
    } else if (o && !h) {
      // The API does not say how a lease ended; one whose countdown had run out expired.
      if (old.deadline && old.deadline <= now + 50) event('expire', name, 'token ' + o.token + ' expired');
      else event('release', name, 'token ' + o.token + ' released');
    } else if (o && h && cur.deadline > old.deadline + 500) {
      event('renew', name, 'token ' + h.token + ' renewed (' + fmtLeft(cur.deadline - now) + ' left)');
    }
  }

  // No "grants missed" from a token's jump: tokens only increase, with gaps (a
  // store may count all locks on one counter).
  function ownerText(h) { return h.owner ? ' to ' + h.owner : ''; }

  function setOptional(col, on) {
    for (const th of el.table.querySelectorAll('th[data-optional="' + col + '"]')) th.hidden = !on;
  }

  function render(anyOwner, anyWaiters, prev) {
    let at = el.rows.firstChild;
    for (const [name, e] of state.locks) {
      if (!e.row) e.row = makeRow(name);
      const changed = fill(e, anyOwner, anyWaiters);
      if (changed && prev.size > 0 && prev.has(name)) flash(e.row);
      if (e.row !== at) el.rows.insertBefore(e.row, at); else at = at.nextSibling;
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
    return tr;
  }

  // fill writes an entry into its row and reports whether its holder changed.
  function fill(e, anyOwner, anyWaiters) {
    const tr = e.row, h = e.holders[0];
    const cell = (c) => tr.querySelector('[data-col="' + c + '"]');
    const held = e.holders.length > 0;
    const stateText = held ? (e.holders.length > 1 ? 'held ×' + e.holders.length : 'held') : 'free';
    const before = tr.dataset.holder || '';
    const holder = held ? String(h.token) : '';
    tr.dataset.held = String(held);
    tr.dataset.holder = holder;

    const st = cell('state');
    if (st.textContent !== stateText) {
      st.textContent = '';
      const b = document.createElement('span');
      b.className = 'badge ' + (held ? 'held' : 'free');
      b.textContent = stateText;
      st.appendChild(b);
    }
    setText(cell('token'), held ? String(h.token) : '–');
    setText(cell('last_token'), e.info.last_token ? String(e.info.last_token) : '–');
    const owner = cell('owner');
    owner.hidden = !anyOwner;
    setText(owner, held && h.owner ? String(h.owner) : '–');
    const waiters = cell('waiters');
    waiters.hidden = !anyWaiters;
    const w = waitersOf(e.info);
    setText(waiters, w === undefined ? '–' : String(w));
    return before !== holder;
  }

  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

  function flash(tr) {
    tr.classList.remove('changed');
    void tr.offsetWidth; // restart the animation
    tr.classList.add('changed');
  }

  // tick redraws the countdowns from the deadlines of the last poll.
  function tick() {
    const now = performance.now();
    for (const e of state.locks.values()) {
      if (!e.row) continue;
      const text = e.row.querySelector('.left');
      const bar = e.row.querySelector('.bar');
      if (!e.holders.length) {
        setText(text, '–');
        bar.hidden = true;
        continue;
      }
      if (!e.deadline) {
        setText(text, 'unknown');
        bar.hidden = true;
        continue;
      }
      const left = e.deadline - now;
      setText(text, left > 0 ? fmtLeft(left) : 'expiring…');
      bar.hidden = false;
      const frac = e.span > 0 ? Math.max(0, Math.min(1, left / e.span)) : 0;
      bar.firstChild.style.width = (frac * 100).toFixed(1) + '%';
      bar.classList.toggle('low', frac < 0.25);
    }
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
    history.replaceState(null, '', location.pathname + '?' + q.toString());
    if (!state.paused) poll();
  });

  // The filter can come in the page's URL (shareable; the token never does).
  const params = new URLSearchParams(location.search);
  if (params.has('prefix')) el.prefix.value = params.get('prefix');
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
