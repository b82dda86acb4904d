// lanectl ui: the page. Plain JavaScript, no build step. Every text that
// comes from Redis (keys, entries, tools, hosts...) goes into the page as
// text (textContent, attributes), never as HTML.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  let frame = null;      // the last Frame
  let frameAt = 0;       // performance.now() when it came
  let events = null;     // the EventSource
  let timelineSel = null; // {ns, key} shown in the timeline, or null
  let tlData = null;     // the last Timeline
  let tlAt = 0;          // performance.now() when it came
  let tlFetching = false;
  let tlLastFetch = 0;
  let releaseTarget = null; // {ns, entry} the dialog asks about

  // clean makes s safe to show as text: bidirectional controls (which
  // could reorder what a reader sees) become U+FFFD, "" becomes "-".
  function clean(s) {
    if (s === undefined || s === null || s === '') return '-';
    return String(s).replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '\ufffd');
  }

  // el makes an element: attrs are set as attributes ("text" sets the
  // text), kids are elements or strings (added as text).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids) e.append(k);
    return e;
  }

  const svgNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const e = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmtDur(ms) {
    ms = Math.max(0, Math.round(ms));
    if (ms < 1000) return ms + 'ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + 's';
    const m = Math.floor(s / 60), rs = Math.floor(s % 60);
    if (m < 60) return m + 'm' + String(rs).padStart(2, '0') + 's';
    return Math.floor(m / 60) + 'h' + String(m % 60).padStart(2, '0') + 'm';
  }

  function clock(iso) {
    if (!iso) return '?';
    const d = new Date(iso);
    return d.toLocaleTimeString([], { hour12: false });
  }

  function owner(host, pid) { return clean(host) + ':' + (pid || 0); }

  // api fetches path (relative to the page) and returns its JSON; it
  // shows the token form on a 401 and throws on any error.
  async function api(path, opts) {
    const r = await fetch(path, Object.assign({ credentials: 'same-origin' }, opts || {}));
    let body = null;
    try { body = await r.json(); } catch (_) { body = null; }
    if (r.status === 401) showLogin();
    if (!r.ok) {
      const err = new Error((body && body.error) || (r.status + ' ' + r.statusText));
      err.status = r.status;
      err.body = body;
      throw err;
    }
    return body;
  }

  function post(path, data) {
    return api(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Lanes-UI': '1' },
      body: JSON.stringify(data),
    });
  }

  // ---- connection ----

  function setConn(kind, text) {
    const c = $('conn');
    c.dataset.conn = kind;
    c.textContent = text;
  }

  function showLogin() {
    if (events) { events.close(); events = null; }
    $('login').hidden = false;
    $('filters').hidden = true;
    setConn('lost', 'token needed');
    $('token').focus();
  }

  async function start() {
    try {
      const f = await api('api/state');
      $('login').hidden = true;
      onFrame(f);
      connect();
    } catch (e) {
      if (e.status !== 401) {
        setConn('lost', 'cannot reach lanectl ui');
        setTimeout(start, 2000);
      }
    }
  }

  function connect() {
    if (events) events.close();
    events = new EventSource('api/events');
    events.addEventListener('state', (e) => onFrame(JSON.parse(e.data)));
    events.onerror = () => {
      setConn('lost', 'lost lanectl ui, reconnecting…');
      if (events && events.readyState === EventSource.CLOSED) {
        events = null;
        setTimeout(start, 2000); // a 401 or a restart: start over
      }
    };
  }

  $('login-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('login-error').textContent = '';
    try {
      await post('api/login', { token: $('token').value });
      $('token').value = '';
      $('login').hidden = true;
      start();
    } catch (err) {
      $('login-error').textContent = err.message;
    }
  });

  // ---- the keys ----

  function onFrame(f) {
    frame = f;
    frameAt = performance.now();
    render();
    if (timelineSel && performance.now() - tlLastFetch > 500) fetchTimeline();
  }

  function filters() {
    return { prefix: $('f-prefix').value, cls: $('f-class').value, ns: $('f-ns').value };
  }

  function keep(f, ns, k) {
    if (f.ns && ns !== f.ns) return false;
    if (!k.key.startsWith(f.prefix)) return false;
    if (!f.cls) return true;
    if (f.cls === 'lock') return k.class === 'lock' || k.class === 'file';
    return k.class === f.cls;
  }

  function render() {
    if (!frame) return;
    $('filters').hidden = false;
    const nss = frame.namespaces;
    const sel = $('f-ns');
    if (nss.length > 1 && sel.options.length !== nss.length + 1) {
      sel.replaceChildren(el('option', { value: '', text: 'all' }), ...nss.map((n) => el('option', { value: n.namespace, text: clean(n.namespace) })));
    }
    $('f-ns-label').hidden = nss.length < 2;

    const banners = [];
    let outage = false;
    for (const n of nss) {
      if (n.ok) continue;
      outage = outage || !!n.outage_since;
      let text = 'Namespace ' + clean(n.namespace) + ': ' + clean(n.error);
      if (n.outage_since) {
        text += ' — since ' + clock(n.outage_since) + '; retrying every ' + fmtDur(frame.interval_ms) + '.';
        text += n.seen_at ? ' Showing what the last look found, at ' + clock(n.seen_at) + ' (Redis clock).' : ' Nothing seen yet.';
      }
      banners.push(el('div', { class: 'banner', 'data-ns': n.namespace, text }));
    }
    $('banners').replaceChildren(...banners);
    if (outage) setConn('outage', 'Redis unreachable');
    else if (events) setConn('live', 'live');

    const looks = nss.filter((n) => n.ok).map((n) => n.look_ms);
    $('meta').textContent = (nss.length === 1 ? 'namespace ' : 'namespaces ') + nss.map((n) => clean(n.namespace)).join(', ') +
      ' · looks every ' + fmtDur(frame.interval_ms) +
      (looks.length ? ' · last look took ' + Math.max(...looks).toFixed(1) + 'ms' : '');

    const f = filters();
    const cards = [];
    let nk = 0, nh = 0, nw = 0;
    for (const n of nss) {
      for (const k of n.keys) {
        if (!keep(f, n.namespace, k)) continue;
        nk++; nh += k.holders.length; nw += k.waiters.length;
        cards.push(keyCard(n, k, nss.length > 1));
      }
    }
    if (cards.length === 0) {
      cards.push(el('p', { class: 'empty', text: nss.some((n) => n.keys.length) ? 'No key matches the filter.' : 'No holders or waiters.' }));
    }
    $('keys').replaceChildren(...cards);
    $('summary').textContent = plural(nk, 'key') + ', ' + plural(nh, 'holder') + ', ' + plural(nw, 'waiter');
    tick();
  }

  function plural(n, w) { return n + ' ' + w + (n === 1 ? '' : 's'); }

  function keyCard(n, k, showNS) {
    const tl = el('a', { href: timelineHash(n.namespace, k.key), class: 'tl-link', text: 'timeline' });
    const head = el('header', {},
      el('span', { class: 'badge ' + k.class, text: k.class }),
      el('span', { class: 'name mono', text: clean(k.key) }),
      showNS ? el('span', { class: 'meta', text: 'in ' + clean(n.namespace) }) : '',
      el('span', { class: 'counts', text: 'limit ' + k.limit + ' · ' + k.holders.length + ' holding · ' + k.waiters.length + ' waiting' }),
      tl);
    const rows = [];
    for (const h of k.holders) rows.push(holderRow(n, k, h));
    for (const w of k.waiters) rows.push(waiterRow(n, k, w));
    const cols = ['state', 'entry', 'owner', 'tool', 'call id', 'tenant', 'token / pos', 'for', 'lease left'];
    if (frame.allow_release) cols.push('');
    const table = el('table', {},
      el('thead', {}, el('tr', {}, ...cols.map((c) => el('th', { text: c })))),
      el('tbody', {}, ...rows));
    return el('article', { class: 'key' + (n.ok ? '' : ' stale'), 'data-ns': n.namespace, 'data-key': k.key }, head, table);
  }

  function releaseCell(n, entry) {
    if (!frame.allow_release) return '';
    const b = el('button', { class: 'release', type: 'button', text: 'release…' });
    b.addEventListener('click', () => askRelease(n.namespace, entry));
    return el('td', {}, b);
  }

  function holderRow(n, k, h) {
    // An ended holder (lanes.Holder.Ended) is gone to its owner but keeps
    // its slot: a lender whose hold ended while nested borrowers held a
    // key through it, kept until each is released or expires, or such a
    // revoked borrower. The key passes on only after that.
    const stateCell = el('td', { class: 'state' }, h.ended ? 'ended' : 'held');
    if (h.ended) {
      stateCell.append(' ', el('span', {
        class: 'badge ended', text: 'slot kept',
        title: 'Its hold ended (released, expired, or revoked with the lease it borrowed from) while nested borrowers held through it: ' +
          'it keeps its slot until they are released or expire, so that the key passes on only after they were told.',
      }));
    }
    const left = el('span', { class: 'left' });
    const bar = el('span', { class: 'bar' }, el('i'));
    const base = n.age_ms || 0;
    const tr = el('tr', { 'data-entry': h.entry, 'data-state': 'held', 'data-ended': h.ended ? 'true' : 'false' },
      stateCell,
      el('td', { class: 'mono', title: clean(h.entry), text: clean(h.entry) }),
      el('td', { class: 'mono', text: owner(h.host, h.pid) }),
      el('td', { title: clean(h.tool), text: clean(h.tool) }),
      el('td', { class: 'mono', title: clean(h.call_id), text: clean(h.call_id) }),
      el('td', { title: clean(h.tenant), text: clean(h.tenant) }),
      el('td', { class: 'num mono', text: '#' + h.token }),
      el('td', { class: 'num up', 'data-ms': h.held_ms + base }),
      el('td', { class: 'down', 'data-ms': h.lease_left_ms - base, 'data-full': h.lease_ms || h.lease_left_ms }, el('span', { class: 'lease' }, bar, left)),
      releaseCell(n, h.entry));
    return tr;
  }

  function waiterRow(n, k, w) {
    const base = n.age_ms || 0;
    const others = w.keys.filter((x) => x !== k.key);
    const stateCell = el('td', { class: 'state' }, 'waiting');
    if (others.length) stateCell.append(' ', el('span', { class: 'badge', title: 'also waits for ' + others.map(clean).join(', '), text: '+' + others.length + ' key' + (others.length > 1 ? 's' : '') }));
    return el('tr', { 'data-entry': w.entry, 'data-state': 'waiting' },
      stateCell,
      el('td', { class: 'mono', title: clean(w.entry), text: clean(w.entry) }),
      el('td', { class: 'mono', text: owner(w.host, w.pid) }),
      el('td', { title: clean(w.tool), text: clean(w.tool) }),
      el('td', { class: 'mono', title: clean(w.call_id), text: clean(w.call_id) }),
      el('td', { title: clean(w.tenant), text: clean(w.tenant) }),
      el('td', { class: 'num mono', text: 'pos ' + w.position }),
      el('td', { class: 'num up', 'data-ms': w.waiting_ms + base }),
      el('td', { class: 'meta', text: '-' }),
      releaseCell(n, w.entry));
  }

  // tick moves the durations on between two frames: held and waiting
  // times grow, leases run down.
  function tick() {
    if (!frame) return;
    const dt = performance.now() - frameAt;
    for (const c of document.querySelectorAll('td.up')) {
      c.textContent = fmtDur(Number(c.dataset.ms) + dt);
    }
    for (const c of document.querySelectorAll('td.down')) {
      const left = Math.max(0, Number(c.dataset.ms) - dt);
      const full = Math.max(Number(c.dataset.full), 1);
      const frac = Math.min(1, left / full);
      c.querySelector('.left').textContent = fmtDur(left);
      const bar = c.querySelector('.bar');
      bar.firstChild.style.width = (frac * 100).toFixed(1) + '%';
      bar.classList.toggle('low', frac < 0.2);
    }
  }
  setInterval(tick, 200);

  for (const id of ['f-prefix', 'f-class', 'f-ns']) $(id).addEventListener('input', render);

  // ---- force release ----

  async function askRelease(ns, entry) {
    let p;
    try {
      p = await api('api/release?ns=' + encodeURIComponent(ns) + '&entry=' + encodeURIComponent(entry));
    } catch (e) {
      toast('Cannot release ' + clean(entry) + ': ' + e.message);
      return;
    }
    releaseTarget = { ns, entry };
    const next = $('confirm-next');
    if (!p.found) {
      $('confirm-question').textContent = clean(entry) + ' is no longer there.';
      next.textContent = '';
      $('confirm-ok').disabled = true;
    } else {
      $('confirm-question').textContent = clean(p.question);
      $('confirm-ok').disabled = false;
      const nexts = p.next || [];
      if (nexts.length) {
        next.replaceChildren('Then granted next: ', ...nexts.map((x, i) => el('span', { class: 'mono', 'data-next': x.entry },
          (i ? ', ' : '') + clean(x.entry) + ' (' + owner(x.host, x.pid) + ', ' + clean(x.tool) + ', on ' + (x.keys || []).map(clean).join(', ') + ')')));
      } else {
        next.textContent = p.held ? 'Nobody waiting would be granted by it.' : 'A waiter: leaving the queue grants nobody.';
      }
    }
    $('confirm').showModal();
  }

  $('confirm').addEventListener('close', async () => {
    const d = $('confirm');
    const t = releaseTarget;
    releaseTarget = null;
    if (d.returnValue !== 'release' || !t) return;
    try {
      const r = await post('api/release', { namespace: t.ns, entry: t.entry });
      const granted = r.granted || [];
      toast('Released ' + clean(r.entry) + ' (was ' + r.was + ' on ' + (r.keys || []).map(clean).join(', ') + ')' +
        (granted.length ? '; granted next: ' + granted.map(clean).join(', ') : '; nobody granted'));
    } catch (e) {
      toast('Release of ' + clean(t.entry) + ' failed: ' + e.message);
    }
  });

  let toastTimer = 0;
  function toast(text) {
    const t = $('toast');
    t.textContent = text;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, 8000);
  }

  // ---- the timeline ----

  function timelineHash(ns, key) {
    return '#timeline=' + encodeURIComponent(ns) + '/' + encodeURIComponent(key);
  }

  function readHash() {
    const h = location.hash;
    if (!h.startsWith('#timeline=')) return null;
    const rest = h.slice('#timeline='.length);
    const i = rest.indexOf('/');
    if (i < 0) return null;
    try {
      return { ns: decodeURIComponent(rest.slice(0, i)), key: decodeURIComponent(rest.slice(i + 1)) };
    } catch (_) {
      return null;
    }
  }

  function onHash() {
    timelineSel = readHash();
    tlData = null;
    $('timeline').hidden = !timelineSel;
    if (!timelineSel) return;
    $('tl-key').textContent = clean(timelineSel.key);
    $('tl-ns').textContent = 'in ' + clean(timelineSel.ns);
    $('tl-chart').replaceChildren(el('p', { class: 'meta', text: 'loading…' }));
    fetchTimeline();
    $('timeline').scrollIntoView({ block: 'nearest' });
  }
  window.addEventListener('hashchange', onHash);
  $('tl-close').addEventListener('click', (e) => {
    e.preventDefault();
    history.replaceState(null, '', location.pathname + location.search);
    onHash();
  });
  $('tl-minutes').addEventListener('input', fetchTimeline);

  async function fetchTimeline() {
    if (!timelineSel || tlFetching) return;
    tlFetching = true;
    tlLastFetch = performance.now();
    const sel = timelineSel;
    try {
      const d = await api('api/timeline?ns=' + encodeURIComponent(sel.ns) + '&key=' + encodeURIComponent(sel.key) + '&minutes=' + $('tl-minutes').value);
      if (timelineSel && sel.ns === timelineSel.ns && sel.key === timelineSel.key) {
        tlData = d;
        tlAt = performance.now();
        drawTimeline();
      }
    } catch (e) {
      $('tl-chart').replaceChildren(el('p', { class: 'error', text: e.message }));
    } finally {
      tlFetching = false;
    }
  }
  setInterval(() => { if (timelineSel) fetchTimeline(); }, 1000);

  const ms = (iso) => (iso ? Date.parse(iso) : null);

  function niceStep(range) {
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].map((s) => s * 1000);
    for (const s of steps) if (range / s <= 8) return s;
    return 3600000;
  }

  function drawTimeline() {
    const d = tlData;
    if (!d) return;
    const to = ms(d.to) + Math.min(performance.now() - tlAt, 2000);
    // From the first thing seen (the history's start, or an earlier
    // enqueue), within the window asked for; at least five seconds.
    let earliest = ms(d.history_from) || ms(d.from);
    for (const sp of d.spans) if (sp.enqueued) earliest = Math.min(earliest, ms(sp.enqueued));
    let from = Math.max(ms(d.from), earliest - 0.03 * (to - earliest));
    if (to - from < 5000) from = to - 5000;
    const W = Math.max($('tl-chart').clientWidth, 600), labelW = 260, padR = 16, rowH = 26, top = 22;
    const H = top + Math.max(d.spans.length, 1) * rowH + 8;
    const x = (t) => labelW + (Math.min(Math.max(t, from), to) - from) / (to - from) * (W - labelW - padR);
    const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, height: H, role: 'img', 'aria-label': 'timeline' });

    const axis = svg('g', { class: 'axis' });
    const step = niceStep(to - from);
    for (let t = Math.ceil(from / step) * step; t <= to; t += step) {
      axis.append(svg('line', { x1: x(t), x2: x(t), y1: top - 4, y2: H }));
      axis.append(svg('text', { x: x(t) + 3, y: 12 }, new Date(t).toLocaleTimeString([], { hour12: false })));
    }
    s.append(axis);
    const hf = ms(d.history_from);
    if (hf && hf > from) {
      s.append(svg('line', { class: 'start', x1: x(hf), x2: x(hf), y1: top - 4, y2: H }));
    }

    d.spans.forEach((sp, i) => {
      const y = top + i * rowH;
      const g = svg('g', { 'data-entry': sp.entry, 'data-state': sp.state });
      g.append(svg('text', { x: 4, y: y + 16 }, trim(clean(sp.entry), 18) + ' ' + trim(owner(sp.host, sp.pid), 16)));
      const enq = ms(sp.enqueued), gr = ms(sp.granted), seen = ms(sp.seen_until), gone = ms(sp.gone_by);
      const tip = clean(sp.entry) + ' of ' + owner(sp.host, sp.pid) + ' · ' + clean(sp.tool) + ' · call ' + clean(sp.call_id) +
        '\nenqueued ' + clock(sp.enqueued) + (gr ? ', granted ' + clock(sp.granted) + ' (waited ' + fmtDur(gr - enq) + ', token #' + sp.token + ')' : '') +
        (gone ? (sp.end_exact ? ', released ' + clock(sp.gone_by) : ', gone between ' + clock(sp.seen_until) + ' and ' + clock(sp.gone_by)) : ', still ' + sp.state) +
        (sp.expired ? '\nits lease ran out (expired)' : '') + (sp.ended ? '\nits hold ended (revoked, or kept for its borrowers)' : '');
      if (enq) {
        const wEnd = gr || gone || to;
        const r = svg('rect', { class: 'wait', x: x(enq), y: y + 5, width: Math.max(x(wEnd) - x(enq), 1), height: 14, 'data-entry': sp.entry, 'data-start': enq, 'data-end': wEnd });
        r.append(svg('title', {}, tip));
        g.append(r);
      }
      if (gr) {
        const hEnd = gone ? (sp.end_exact ? gone : seen) : to;
        const cls = 'hold' + (sp.expired ? ' expired' : '') + (sp.ended ? ' ended' : '');
        const r = svg('rect', { class: cls, x: x(gr), y: y + 3, width: Math.max(x(hEnd) - x(gr), 2), height: 18, rx: 2, 'data-entry': sp.entry, 'data-start': gr, 'data-end': gone || hEnd, 'data-token': sp.token });
        r.append(svg('title', {}, tip));
        g.append(r);
        if (gone && !sp.end_exact && gone > seen) {
          g.append(svg('rect', { class: 'tail', x: x(seen), y: y + 3, width: Math.max(x(gone) - x(seen), 1), height: 18 }));
        }
        if (x(hEnd) - x(gr) > 44) g.append(svg('text', { class: 'bar-label', x: x(gr) + 4, y: y + 16 }, '#' + sp.token));
      }
      s.append(g);
    });
    s.append(svg('line', { class: 'now', x1: x(to), x2: x(to), y1: top - 4, y2: H }));
    if (!d.spans.length) s.append(svg('text', { x: labelW, y: top + 16 }, 'nothing seen on this key in this window'));
    $('tl-chart').replaceChildren(s);
    $('tl-note').textContent = '· history since ' + clock(d.history_from) + ' (when lanectl ui began to look); it looks every ' +
      fmtDur(d.interval_ms) + ', so a hold shorter than that may be missed';
  }

  function trim(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }

  setInterval(() => { if (timelineSel && tlData) drawTimeline(); }, 1000);
  window.addEventListener('resize', () => { if (tlData) drawTimeline(); });

  onHash();
  start();
})();
