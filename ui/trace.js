// Trace view: a virtualized waterfall (only the rows on screen exist in the DOM, so 100,000
// spans scroll like 100), a minimap to zoom and pan, the critical path, span details with
// annotations and links, and link arrows that can be followed across components and traces.
import { breakdownPanel } from './breakdown.js';
import { captureBox } from './capture.js';
import { h, api, fmtDur, fmtTime, fmtInt, colour, href, route, replaceParams, errorBox, spinner, shortId, toast, ANNOTATIONS } from './util.js';

const RH = 24; // row height, px
const OVERSCAN = 8;
const MAX_INDENT = 32;

let S = null; // the view's state

export function mount(el, path, params) {
  S = { el, id: (path[1] || '').toLowerCase(), params, t: {} };
  load(params);
}

export function update(path, params) {
  const id = (path[1] || '').toLowerCase();
  if (!S || id !== S.id || (params.get('adjust') || '') !== (S.params.get('adjust') || '')) return false;
  // Same trace: only the selected span may have changed (back/forward, a followed link).
  S.params = params;
  const sid = params.get('span');
  if (S.data && sid && S.rowOf.has(sid) && S.sel !== S.rowOf.get(sid)) select(S.rowOf.get(sid), { scroll: true, url: false });
  return true;
}

export function unmount() {
  if (S && S.cleanup) S.cleanup();
  S = null;
}

async function load(params) {
  const el = S.el;
  el.replaceChildren(spinner(`Loading trace ${shortId(S.id)}…`));
  const t0 = performance.now();
  let data;
  try {
    const q = params.get('adjust') === '1' ? '?adjust=true' : '';
    const r = await fetch(`/api/ui/trace/${encodeURIComponent(S.id)}${q}`);
    const text = await r.text();
    S.t.fetchMs = performance.now() - t0;
    const t1 = performance.now();
    data = JSON.parse(text);
    S.t.parseMs = performance.now() - t1;
    S.t.bytes = text.length;
    if (!r.ok) throw new Error((data.error && data.error.message) || r.statusText);
  } catch (e) {
    if (S) el.replaceChildren(h('div.page-pad', h('h2', 'Trace ', h('code', S.id)), errorBox(e), h('p', h('a', { href: '#/search' }, '← back to search'))));
    return;
  }
  if (!S) return;
  const t2 = performance.now();
  prepare(data);
  S.t.prepareMs = performance.now() - t2;
  build();
  const t3 = performance.now();
  relayout();
  S.t.renderMs = performance.now() - t3;
  S.t.totalMs = performance.now() - t0;
  S.el.querySelector('.waterfall').dataset.ready = '1';
  window.__weftTrace = { spans: S.n, timings: S.t };
  const sid = params.get('span');
  if (sid && S.rowOf.has(sid)) select(S.rowOf.get(sid), { scroll: true, url: false });
  else if (sid) toast(`Span ${sid} is not in this trace`, 'error');
}

// Derived arrays for fast rendering.
function prepare(d) {
  S.data = d;
  const R = d.rows;
  const n = (S.n = d.spanCount);
  S.start = Float64Array.from(R.start);
  S.dur = Float64Array.from(R.dur);
  S.depth = Int32Array.from(R.depth);
  S.end = Int32Array.from(R.end);
  S.parent = Int32Array.from(R.parent);
  S.total = Math.max(1, d.durationNs);
  S.rowOf = new Map();
  for (let i = 0; i < n; i++) S.rowOf.set(R.id[i], i);
  S.collapsed = new Uint8Array(n);
  S.crit = new Map(); // row → [[s, e], ...]
  S.critRow = new Uint8Array(n);
  for (const [row, s, e] of d.critical) {
    if (!S.crit.has(row)) S.crit.set(row, []);
    S.crit.get(row).push([s, e]);
    S.critRow[row] = 1;
  }
  // On-path chain: ancestors of critical rows count as on the path for "only critical".
  S.critChain = new Uint8Array(n);
  for (const row of S.crit.keys()) for (let r = row; r >= 0 && !S.critChain[r]; r = S.parent[r]) S.critChain[r] = 1;
  S.out = new Map(); // row → [{trace, span, rel, to}]
  S.inn = new Map(); // row → [{trace, span, rel, from}]
  const push = (m, k, v) => (m.has(k) ? m.get(k).push(v) : m.set(k, [v]));
  S.hasInnerLinks = d.links.some((l) => l[4] >= 0);
  for (const [row, trace, span, rel, to] of d.links) {
    push(S.out, row, { trace, span, rel, to });
    if (to >= 0) push(S.inn, to, { trace: d.traceId, span: R.id[row], rel, from: row });
  }
  for (const [row, trace, span, rel] of d.incoming) push(S.inn, row, { trace, span, rel, from: -1 });
  S.events = new Map();
  for (const [row, off, name] of d.events) push(S.events, row, [off, name]);
  S.maxDepth = 0;
  for (let i = 0; i < n; i++) if (S.depth[i] > S.maxDepth) S.maxDepth = S.depth[i];
  const z = (S.params.get('z') || '').split(',').map(Number);
  S.z0 = z.length === 2 && z[0] >= 0 && z[1] <= 1 && z[1] > z[0] ? z[0] : 0;
  S.z1 = z.length === 2 && z[0] >= 0 && z[1] <= 1 && z[1] > z[0] ? z[1] : 1;
  S.cp = S.params.get('cp') !== '0';
  S.onlyCrit = S.params.get('only') === 'cp';
  S.sel = -1;
  S.match = null;
  const fold = parseInt(S.params.get('fold') || '', 10);
  if (fold >= 0) foldTo(fold, false);
  rebuildVisible();
}

function rebuildVisible() {
  const n = S.n;
  const vis = new Int32Array(n);
  const pos = S.pos && S.pos.length === n ? S.pos : new Int32Array(n);
  pos.fill(-1);
  let k = 0;
  for (let i = 0; i < n; ) {
    if (S.onlyCrit && !S.critChain[i]) {
      i = S.end[i];
      continue;
    }
    pos[i] = k;
    vis[k++] = i;
    i = S.collapsed[i] ? S.end[i] : i + 1;
  }
  S.vis = vis.subarray(0, k);
  S.pos = pos;
}

function foldTo(depth, render = true) {
  for (let i = 0; i < S.n; i++) S.collapsed[i] = S.depth[i] >= depth && S.end[i] > i + 1 ? 1 : 0;
  if (render) {
    rebuildVisible();
    renderAll();
  }
}

function setParam(k, v) {
  const p = Object.fromEntries(S.params.entries());
  if (v === null || v === undefined || v === '') delete p[k];
  else p[k] = v;
  S.params = new URLSearchParams(p);
  replaceParams(p);
}

// ---------------------------------------------------------------------------------------------
// Layout

function build() {
  const d = S.data;
  const R = d.rows;
  const rootRow = 0;
  const services = new Set(R.svc);
  const title = `${d.services[R.svc[rootRow]] || '?'}: ${d.names[R.name[rootRow]] || '?'}`;
  const errs = R.err.reduce((a, b) => a + b, 0);
  const crossLinks = d.links.filter((l) => l[4] < 0).length + d.incoming.length;
  const toolbar = h(
    'div.toolbar',
    h('button#cp-toggle', { class: S.cp ? 'on' : '', title: 'Highlight the critical path (what determined the end-to-end latency)', onclick: toggleCp }, 'Critical path'),
    h('button#only-cp', { class: S.onlyCrit ? 'on' : '', title: 'Show only spans on the critical path', onclick: toggleOnlyCp }, 'Only critical'),
    h('span.sep'),
    h('button#expand-all', { onclick: () => foldTo(1e9) || setParam('fold', null), title: 'Expand every span' }, 'Expand all'),
    h('button#collapse-all', { onclick: () => foldTo(1) || setParam('fold', '1'), title: 'Collapse below the root' }, 'Collapse'),
    h(
      'select#fold',
      { title: 'Show the tree down to a depth', onchange: (e) => (e.target.value !== '' ? (foldTo(+e.target.value), setParam('fold', e.target.value), (e.target.value = '')) : null) },
      h('option', { value: '' }, 'Depth…'),
      [1, 2, 3, 4, 5, 6, 8].filter((x) => x <= S.maxDepth).map((x) => h('option', { value: x }, `to depth ${x}`)),
    ),
    h('span.sep'),
    h('button#zoom-out', { onclick: () => zoomBy(2, 0.5), title: 'Zoom out (Ctrl+wheel over the bars)' }, '−'),
    h('button#zoom-in', { onclick: () => zoomBy(0.5, 0.5), title: 'Zoom in (Ctrl+wheel over the bars; drag on the minimap or ruler)' }, '+'),
    h('button#zoom-reset', { onclick: () => setZoom(0, 1), title: 'Whole trace' }, 'Reset zoom'),
    h('button#bd-toggle', { class: S.params.get('bd') ? 'on' : '', title: 'Where the time went: per component (or service, operation) and the wire between them (stacked bar and table)', onclick: toggleBreakdown }, 'Breakdown'),
    h('span.sep'),
    h('input#find', { placeholder: 'Find span…', title: 'Find spans by name, service or component; Enter jumps to the next match', spellcheck: 'false', oninput: (e) => find(e.target.value), onkeydown: (e) => e.key === 'Enter' && (e.preventDefault(), nextMatch(e.shiftKey ? -1 : 1)) }),
    h('span#find-count.muted'),
    h('span.grow'),
    h('label.check', { title: 'Shift spans of hosts whose clocks disagree (read-time clock-skew adjustment)' }, h('input#adjust', { type: 'checkbox', checked: S.params.get('adjust') === '1', onchange: (e) => (location.hash = href(['trace', S.id], { adjust: e.target.checked ? '1' : '' })) }), ' adjust skew'),
  );
  const head = h(
    'div.trace-head',
    h('h2', h('span.svc-dot', { style: { background: colour(d.services[R.svc[rootRow]] || '?') } }), title),
    h(
      'div.meta',
      h('span', h('b', fmtDur(d.durationNs)), ' duration'),
      h('span', h('b', fmtInt(S.n)), ' spans'),
      h('span', h('b', services.size), ' services'),
      h('span', h('b', S.maxDepth + 1), ' levels'),
      errs ? h('span.err', h('b', errs), ' errors') : null,
      h('span.crit-note', { title: 'Length of the critical path (on-path time summed)' }, h('i.cp-swatch'), h('b', fmtDur(d.criticalNs)), ' critical path'),
      crossLinks ? h('span', h('b', crossLinks), ' cross-trace links') : null,
      h('span.muted', fmtTime(d.startMs)),
      h('code.muted', { title: 'trace id' }, d.traceId),
      d.adjusted ? h('span.badge', 'clock skew adjusted') : null,
      h(
        'form.cmp',
        { onsubmit: (e) => (e.preventDefault(), compareWith(e.target.other.value)) },
        h('input', { name: 'other', placeholder: 'compare with trace id…', spellcheck: 'false', title: 'Compare this trace with another (Enter)' }),
      ),
    ),
    toolbar,
    h('div.bd-slot'),
  );
  const mini = h('div.minimap', { title: 'Drag to zoom into a time range; click to centre' }, h('canvas'), h('div.mini-win'), h('div.mini-sel'));
  const ruler = h('div.ruler');
  const rows = h('div.wf-rows');
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.classList.add('wf-links');
  const spacer = h('div.wf-spacer', rows, svg);
  const scroll = h('div.wf-scroll', { tabindex: 0 }, spacer);
  const wf = h(
    'div.waterfall',
    h('div.wf-head', h('div.lab-head', h('span', 'Service · span'), h('span.muted', `${fmtInt(S.n)} rows`)), ruler),
    scroll,
  );
  const detail = h('aside.detail', { hidden: true });
  const page = h('div.trace-page', head, mini, h('div.trace-body', wf, detail));
  S.el.replaceChildren(page);
  if (S.params.get('bd')) showBreakdown(head.querySelector('.bd-slot'));
  Object.assign(S, { page, mini, ruler, rows, svg, spacer, scroll, wf, detail, pool: [] });

  let raf = 0;
  const onScroll = () => {
    if (!raf) raf = requestAnimationFrame(() => ((raf = 0), renderRows()));
  };
  scroll.addEventListener('scroll', onScroll, { passive: true });
  scroll.addEventListener('wheel', onWheel, { passive: false });
  scroll.addEventListener('keydown', onKey);
  rows.addEventListener('click', onRowClick);
  dragZoom(mini, true);
  dragZoom(ruler, false);
  const onResize = () => relayout();
  window.addEventListener('weft-theme', onResize);
  // The waterfall changes width when the detail panel opens or the window resizes: bars are in
  // percent, but the minimap and the link arrows are drawn in pixels.
  let lastW = 0;
  const ro = new ResizeObserver(() => {
    const w = scroll.clientWidth;
    if (w !== lastW) {
      lastW = w;
      relayout();
    }
  });
  ro.observe(scroll);
  S.cleanup = () => {
    ro.disconnect();
    window.removeEventListener('weft-theme', onResize);
  };
}

// Everything but the minimap (which depends only on the data and the width).
function renderAll() {
  if (!S || !S.spacer) return;
  S.spacer.style.height = `${S.vis.length * RH}px`;
  drawRuler();
  renderRows();
}

// After a size change: geometry the link arrows need, measured once here (reading layout in
// every scroll frame would force a synchronous layout per frame), and the minimap.
function relayout() {
  if (!S || !S.spacer) return;
  if (!S.pool.length) renderAll();
  const track = S.rows.querySelector('.row:not([style*="display: none"]) .track');
  S.geo = track ? { labW: track.offsetLeft, trackW: track.offsetWidth, width: S.spacer.clientWidth } : null;
  drawMinimap();
  renderAll();
}

// ---------------------------------------------------------------------------------------------
// Rows

function x(ns) {
  return ((ns / S.total - S.z0) / (S.z1 - S.z0)) * 100;
}

function makeRow() {
  const r = h(
    'div.row',
    h('div.lab', h('span.ind'), h('button.tog', { tabindex: -1 }), h('i.sdot'), h('span.svc'), h('span.nm'), h('span.badges')),
    h('div.track', h('div.bar', h('span.blabel'))),
  );
  S.rows.append(r);
  return r;
}

function renderRows() {
  if (!S || !S.vis) return;
  const t0 = performance.now();
  renderRowsInner();
  // Tests read the JS time per render (frame intervals include layout and paint).
  if (window.__weftProfile) window.__weftProfile.push(performance.now() - t0);
}

function renderRowsInner() {
  const d = S.data;
  const R = d.rows;
  const top = S.scroll.scrollTop;
  const hgt = S.scroll.clientHeight || 600;
  const first = Math.max(0, Math.floor(top / RH) - OVERSCAN);
  const last = Math.min(S.vis.length, Math.ceil((top + hgt) / RH) + OVERSCAN);
  const count = Math.max(0, last - first);
  while (S.pool.length < count) S.pool.push(makeRow());
  for (let k = 0; k < S.pool.length; k++) {
    const el = S.pool[k];
    if (k >= count) {
      el.style.display = 'none';
      continue;
    }
    const vi = first + k;
    const i = S.vis[vi];
    el.style.display = '';
    el.style.transform = `translateY(${vi * RH}px)`;
    el.dataset.row = i;
    const svc = d.services[R.svc[i]];
    const comp = d.components[R.comp[i]];
    const nm = d.names[R.name[i]];
    const lab = el.firstChild;
    const [ind, tog, dot, svcEl, nmEl, badges] = lab.children;
    const dep = S.depth[i];
    ind.style.width = `${Math.min(dep, MAX_INDENT) * 12}px`;
    ind.textContent = dep > MAX_INDENT ? `${dep}` : '';
    const hasKids = S.end[i] > i + 1;
    tog.textContent = hasKids ? (S.collapsed[i] ? '▸' : '▾') : '';
    tog.classList.toggle('leaf', !hasKids);
    tog.title = hasKids ? `${S.collapsed[i] ? 'Expand' : 'Collapse'} (${fmtInt(S.end[i] - i - 1)} below)` : '';
    dot.style.background = colour(comp);
    svcEl.textContent = comp === svc ? svc : comp;
    nmEl.textContent = nm;
    lab.title = `${comp === svc ? svc : `${svc} · ${comp}`}: ${nm}`;
    const b = [];
    if (R.err[i]) b.push(h('span.b-err', { title: 'error status' }, '!'));
    const out = S.out.get(i);
    const inn = S.inn.get(i);
    if (out) for (const l of out) if (l.to < 0) b.push(h('span.b-link', { dataset: { follow: 'out' }, title: `${l.rel} → span ${l.span} in trace ${l.trace} (click to follow)` }, l.rel === 'caused_by' ? '⇠' : '↗'));
    if (inn) for (const l of inn) if (l.from < 0) b.push(h('span.b-link', { dataset: { follow: 'in' }, title: `${l.rel} ← span ${l.span} in trace ${l.trace} (click to follow)` }, l.rel === 'caused_by' ? '⇢' : '↘'));
    if (S.collapsed[i] && hasKids) b.push(h('span.b-kids', `+${fmtInt(S.end[i] - i - 1)}`));
    badges.replaceChildren(...b);
    el.classList.toggle('sel', i === S.sel);
    el.classList.toggle('crit', S.cp && S.critRow[i] === 1);
    el.classList.toggle('match', !!(S.match && S.match.set.has(i)));
    el.classList.toggle('err', R.err[i] === 1);
    // Bar.
    const bar = el.lastChild.firstChild;
    const l = x(S.start[i]);
    const w = (S.dur[i] / S.total / (S.z1 - S.z0)) * 100;
    const lab2 = bar.firstChild;
    if (l > 100 || l + w < 0) {
      bar.style.display = 'none';
    } else {
      bar.style.display = '';
      bar.style.left = `${l}%`;
      bar.style.width = `max(2px, ${w}%)`;
      bar.style.background = colour(comp);
      bar.classList.toggle('dim', S.cp && !S.critRow[i] && S.crit.size > 0);
      lab2.textContent = fmtDur(S.dur[i]);
      lab2.classList.toggle('left', l + w > 75);
      // Critical sections and annotations inside the bar, positioned relative to it.
      while (bar.childNodes.length > 1) bar.lastChild.remove();
      const sections = S.cp ? S.crit.get(i) : null;
      if (sections && S.dur[i] > 0)
        for (const [s, e] of sections) {
          const seg = document.createElement('i');
          seg.className = 'cseg';
          seg.style.left = `${((s - S.start[i]) / S.dur[i]) * 100}%`;
          seg.style.width = `${((e - s) / S.dur[i]) * 100}%`;
          bar.append(seg);
        }
      const evs = S.events.get(i);
      if (evs && S.dur[i] > 0)
        for (const [off, name] of evs.slice(0, 20)) {
          const t = document.createElement('i');
          t.className = 'tick';
          t.style.left = `${Math.min(100, Math.max(0, ((off - S.start[i]) / S.dur[i]) * 100))}%`;
          t.title = `${name}${ANNOTATIONS[name] ? ` (${ANNOTATIONS[name]})` : ''} at +${fmtDur(off)}`;
          bar.append(t);
        }
    }
  }
  drawLinks(first, last);
  drawMiniWindow();
}

// Arrows for links inside this trace whose rows are both shown: cause end → effect start.
function drawLinks(first, last) {
  const svg = S.svg;
  if (!S.hasInnerLinks) return;
  svg.replaceChildren();
  if (!S.geo) return;
  const { labW, trackW } = S.geo;
  svg.setAttribute('width', S.geo.width);
  svg.setAttribute('height', S.vis.length * RH);
  const NS = 'http://www.w3.org/2000/svg';
  const px = (ns) => labW + (x(ns) / 100) * trackW;
  let drawn = 0;
  for (let vi = first; vi < last && drawn < 400; vi++) {
    const i = S.vis[vi];
    const out = S.out.get(i);
    if (!out) continue;
    for (const l of out) {
      if (l.to < 0 || S.pos[l.to] < 0) continue;
      const cause = l.to;
      const y1 = S.pos[cause] * RH + RH / 2;
      const y2 = vi * RH + RH / 2;
      const x1 = Math.max(labW, Math.min(labW + trackW, px(S.start[cause] + S.dur[cause])));
      const x2 = Math.max(labW, Math.min(labW + trackW, px(S.start[i])));
      const dx = Math.max(14, Math.abs(x2 - x1) / 2);
      const p = document.createElementNS(NS, 'path');
      p.setAttribute('d', `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`);
      p.setAttribute('class', `lk ${l.rel}`);
      p.setAttribute('marker-end', 'url(#arrow)');
      svg.append(p);
      drawn++;
    }
  }
  if (drawn) {
    const defs = document.createElementNS(NS, 'defs');
    defs.innerHTML = '<marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" class="lk-head"/></marker>';
    svg.prepend(defs);
  }
}

function onRowClick(e) {
  const row = e.target.closest('.row');
  if (!row) return;
  const i = +row.dataset.row;
  if (e.target.closest('.tog')) {
    toggle(i);
    return;
  }
  const f = e.target.closest('[data-follow]');
  if (f) {
    const list = f.dataset.follow === 'out' ? (S.out.get(i) || []).filter((l) => l.to < 0) : (S.inn.get(i) || []).filter((l) => l.from < 0);
    const idx = [...f.parentNode.querySelectorAll(`[data-follow="${f.dataset.follow}"]`)].indexOf(f);
    const l = list[idx] || list[0];
    if (l) follow(l.trace, l.span);
    return;
  }
  select(i, { scroll: false });
}

function toggle(i) {
  if (S.end[i] <= i + 1) return;
  S.collapsed[i] ^= 1;
  rebuildVisible();
  renderAll();
}

function onKey(e) {
  if (S.sel < 0 || S.pos[S.sel] < 0) return;
  const vi = S.pos[S.sel];
  if (e.key === 'ArrowDown' && vi + 1 < S.vis.length) select(S.vis[vi + 1], { scroll: true });
  else if (e.key === 'ArrowUp' && vi > 0) select(S.vis[vi - 1], { scroll: true });
  else if (e.key === 'ArrowLeft') {
    if (S.end[S.sel] > S.sel + 1 && !S.collapsed[S.sel]) toggle(S.sel);
    else if (S.parent[S.sel] >= 0) select(S.parent[S.sel], { scroll: true });
  } else if (e.key === 'ArrowRight' && S.collapsed[S.sel]) toggle(S.sel);
  else return;
  e.preventDefault();
}

/** Selects row i: expands its ancestors, scrolls it into view, shows its details. */
function select(i, { scroll = true, url = true } = {}) {
  let changed = false;
  for (let p = S.parent[i]; p >= 0; p = S.parent[p])
    if (S.collapsed[p]) {
      S.collapsed[p] = 0;
      changed = true;
    }
  if (S.onlyCrit && !S.critChain[i]) {
    S.onlyCrit = false;
    S.page.querySelector('#only-cp').classList.remove('on');
    changed = true;
  }
  if (changed) rebuildVisible();
  S.sel = i;
  if (changed) S.spacer.style.height = `${S.vis.length * RH}px`;
  if (scroll) {
    const y = S.pos[i] * RH;
    const top = S.scroll.scrollTop;
    const hgt = S.scroll.clientHeight;
    if (y < top || y + RH > top + hgt) S.scroll.scrollTop = Math.max(0, y - hgt / 2);
    // Bring the bar into the zoom window when it is outside.
    const s = S.start[i] / S.total;
    const e = (S.start[i] + S.dur[i]) / S.total;
    if (e < S.z0 || s > S.z1) {
      const w = Math.max(S.z1 - S.z0, (e - s) * 1.2);
      setZoom(s - (w - (e - s)) / 2, s - (w - (e - s)) / 2 + w);
    }
  }
  if (changed) renderAll();
  else renderRows();
  if (url) setParam('span', S.data.rows.id[i]);
  showDetail(i);
}

/** Follows a link: same trace → select; other trace → open it with the span selected. */
function follow(trace, span) {
  if (trace === S.data.traceId && S.rowOf.has(span)) {
    select(S.rowOf.get(span));
    return;
  }
  location.hash = href(['trace', trace], { span });
}

// ---------------------------------------------------------------------------------------------
// Span detail

async function showDetail(i) {
  const d = S.data;
  const sid = d.rows.id[i];
  const box = S.detail;
  box.hidden = false;
  S.page.classList.add('with-detail');
  box.replaceChildren(spinner());
  box.dataset.span = sid;
  let sp;
  try {
    const q = S.params.get('adjust') === '1' ? '?adjust=true' : '';
    sp = await api(`/api/ui/span/${d.traceId}/${sid}${q}`);
  } catch (e) {
    box.replaceChildren(errorBox(e));
    return;
  }
  if (!S || box.dataset.span !== sid) return;
  const kv = (rows) =>
    rows.length
      ? h('table.kv', h('tbody', rows.map(([k, v, t]) => h('tr', h('th', k), h('td', { title: t }, v)))))
      : h('p.muted', 'none');
  const linkRow = (l, dir) =>
    h(
      'li.link',
      h('span.rel', { class: l.relation }, dir === 'out' ? `${l.relation} →` : `← ${l.relation}`),
      h('span.target', l.service ? h('b', l.service) : h('span.muted', '(not stored)'), l.name ? `: ${l.name}` : ''),
      h('span.where.muted', l.traceId === d.traceId ? 'this trace' : `trace ${shortId(l.traceId)}`),
      h('button.follow', { onclick: () => follow(l.traceId, l.spanId), title: `Open span ${l.spanId} in trace ${l.traceId}` }, 'Follow'),
    );
  const pct = sp.durationNs ? Math.round((100 * sp.criticalNs) / sp.durationNs) : 0;
  box.replaceChildren(
    ...[
    h('div.d-head', h('h3', h('span.svc-dot', { style: { background: colour(sp.component) } }), sp.name), h('button.icon.close', { title: 'Close', onclick: closeDetail }, '×')),
    h(
      'dl.d-facts',
      h('dt', 'Service'), h('dd', sp.service, sp.component !== sp.service ? h('span.muted', ` · ${sp.component}`) : ''),
      h('dt', 'Kind'), h('dd', sp.kind),
      h('dt', 'Duration'), h('dd', h('b', fmtDur(sp.durationNs))),
      h('dt', 'Start'), h('dd', `+${fmtDur(sp.offsetNs)}`, h('span.muted', ` · ${fmtTime(sp.startMs)}`)),
      h('dt', 'Critical'), h('dd', sp.criticalNs ? [h('i.cp-swatch'), `${fmtDur(sp.criticalNs)} on the critical path (${pct}%)`] : h('span.muted', 'not on the critical path')),
      h('dt', 'Status'), h('dd', { class: sp.status.code === 'error' ? 'err' : '' }, sp.status.code, sp.status.message ? `: ${sp.status.message}` : ''),
      h('dt', 'Children'), h('dd', `${fmtInt(sp.children)} (${fmtInt(sp.descendants)} below)`),
      h('dt', 'Span id'), h('dd', h('code', sp.spanId)),
      sp.parentSpanId ? [h('dt', 'Parent'), h('dd', h('a', { href: '#', onclick: (e) => (e.preventDefault(), follow(d.traceId, sp.parentSpanId)) }, h('code', sp.parentSpanId)))] : null,
    ),
    sp.links.length || sp.incoming.length
      ? h('section.d-sec.links', h('h4', 'Links'), h('ul.links', sp.links.map((l) => linkRow(l, 'out')), sp.incoming.map((l) => linkRow(l, 'in'))))
      : null,
    h('section.d-sec', h('h4', `Attributes (${sp.attributes.length})`), kv(sp.attributes)),
    sp.events.length
      ? h(
          'section.d-sec',
          h('h4', `Annotations / events (${sp.events.length})`),
          h(
            'table.kv.events',
            h(
              'tbody',
              sp.events.map((e) =>
                h(
                  'tr',
                  h('th', `+${fmtDur(e.offsetNs)}`),
                  h('td', h('b', e.name), ANNOTATIONS[e.name] ? h('span.muted', ` ${ANNOTATIONS[e.name]}`) : '', e.attributes.length ? h('div.ev-attrs', e.attributes.map(([k, v]) => h('div', h('code', k), ' = ', v))) : ''),
                ),
              ),
            ),
          ),
        )
      : null,
    sp.kind === 'server' && sp.service ? captureBox(sp.service) : null,
    h('section.d-sec', h('h4', `Resource (${sp.resource.length})`), kv(sp.resource)),
    sp.scope.name ? h('section.d-sec', h('h4', 'Instrumentation scope'), h('p', h('code', sp.scope.name), sp.scope.version ? ` ${sp.scope.version}` : '')) : null,
    ].filter(Boolean),
  );
}

function closeDetail() {
  S.detail.hidden = true;
  S.page.classList.remove('with-detail');
  S.sel = -1;
  setParam('span', null);
  renderAll();
}

// ---------------------------------------------------------------------------------------------
// Zoom, minimap, ruler

function setZoom(a, b) {
  const w = Math.min(1, Math.max(1e-7, b - a));
  a = Math.min(1 - w, Math.max(0, a));
  S.z0 = a;
  S.z1 = a + w;
  setParam('z', S.z0 === 0 && S.z1 === 1 ? null : `${S.z0.toFixed(6)},${S.z1.toFixed(6)}`);
  drawRuler();
  renderRows();
}

function zoomBy(f, at) {
  const w = S.z1 - S.z0;
  const c = S.z0 + w * at;
  setZoom(c - w * f * at, c - w * f * at + w * f);
}

function onWheel(e) {
  const track = S.rows.querySelector('.track');
  if (!track) return;
  const rect = track.getBoundingClientRect();
  if (e.ctrlKey || e.altKey || e.metaKey) {
    e.preventDefault();
    const at = Math.min(1, Math.max(0, (e.clientX - rect.left) / rect.width));
    zoomBy(e.deltaY > 0 ? 1.25 : 0.8, at);
  } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
    const d = (e.shiftKey ? e.deltaY : e.deltaX) / rect.width;
    if (S.z1 - S.z0 < 1) {
      e.preventDefault();
      const w = S.z1 - S.z0;
      setZoom(S.z0 + d * w, S.z0 + d * w + w);
    }
  }
}

// Drag across an element to choose a time range (minimap: whole trace; ruler: current window).
function dragZoom(el, whole) {
  el.addEventListener('mousedown', (e) => {
    if (e.button !== 0) return;
    const rect = (whole ? el : el).getBoundingClientRect();
    const frac = (cx) => Math.min(1, Math.max(0, (cx - rect.left) / rect.width));
    const toTrace = (f) => (whole ? f : S.z0 + f * (S.z1 - S.z0));
    const a = frac(e.clientX);
    const sel = whole ? S.mini.querySelector('.mini-sel') : null;
    let b = a;
    const move = (m) => {
      b = frac(m.clientX);
      if (sel) {
        sel.style.display = 'block';
        sel.style.left = `${Math.min(a, b) * 100}%`;
        sel.style.width = `${Math.abs(b - a) * 100}%`;
      }
    };
    const up = () => {
      window.removeEventListener('mousemove', move);
      window.removeEventListener('mouseup', up);
      if (sel) sel.style.display = 'none';
      if (Math.abs(b - a) * rect.width > 4) setZoom(toTrace(Math.min(a, b)), toTrace(Math.max(a, b)));
      else if (whole) {
        const w = S.z1 - S.z0;
        setZoom(a - w / 2, a + w / 2);
      }
    };
    window.addEventListener('mousemove', move);
    window.addEventListener('mouseup', up);
    e.preventDefault();
  });
}

function drawMinimap() {
  const c = S.mini.querySelector('canvas');
  const W = S.mini.clientWidth || 800;
  const H = 56;
  const dpr = window.devicePixelRatio || 1;
  c.width = W * dpr;
  c.height = H * dpr;
  c.style.height = `${H}px`;
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, W, H);
  const d = S.data;
  const n = S.n;
  const rowsH = H - 6;
  // One line per row, top to bottom in tree order (rows beyond the pixel height share lines;
  // every span is drawn, at least one pixel wide, so short spans in big traces still show).
  const hRow = Math.max(1, rowsH / n);
  const comp = d.rows.comp;
  const fills = d.components.map((c) => colour(c));
  g.globalAlpha = n > 2000 ? 0.7 : 0.9;
  for (let i = 0; i < n; i++) {
    g.fillStyle = fills[comp[i]];
    g.fillRect((S.start[i] / S.total) * W, 6 + (i / n) * rowsH, Math.max(1, (S.dur[i] / S.total) * W), hRow);
  }
  g.globalAlpha = 1;
  g.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--cp').trim() || '#d33';
  for (const [, s, e] of d.critical) g.fillRect((s / S.total) * W, 0, Math.max(1, ((e - s) / S.total) * W), 4);
}

function drawMiniWindow() {
  const win = S.mini.querySelector('.mini-win');
  win.style.left = `${S.z0 * 100}%`;
  win.style.width = `${(S.z1 - S.z0) * 100}%`;
  // Vertical extent: the rows on screen.
  const n = Math.max(1, S.vis.length);
  const first = S.scroll.scrollTop / RH;
  const shown = (S.scroll.clientHeight || 600) / RH;
  const a = S.vis.length ? S.vis[Math.min(S.vis.length - 1, Math.floor(first))] / S.n : 0;
  const lastVis = S.vis.length ? S.vis[Math.min(S.vis.length - 1, Math.floor(first + shown))] : 0;
  const b = Math.max(a + 0.02, lastVis / S.n);
  win.style.top = `${6 + a * 50}px`;
  win.style.height = `${Math.max(4, (b - a) * 50)}px`;
  win.dataset.rows = n;
}

function niceStep(span) {
  const raw = span / 8;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function drawRuler() {
  const r = S.ruler;
  const a = S.z0 * S.total;
  const b = S.z1 * S.total;
  const step = niceStep(Math.max(1, b - a));
  const ticks = [];
  for (let t = Math.ceil(a / step) * step; t <= b; t += step) {
    const l = ((t - a) / (b - a)) * 100;
    ticks.push(h('span.tick', { style: { left: `${l}%` } }, h('span', fmtDur(t))));
  }
  r.replaceChildren(...ticks);
  r.title = S.z0 > 0 || S.z1 < 1 ? `Zoomed to +${fmtDur(a)} … +${fmtDur(b)} — drag to zoom further` : 'Drag to zoom into a time range';
}

// ---------------------------------------------------------------------------------------------
// Toolbar actions

// The breakdown's state in the URL: bd (rows by), bdw (wire per link), bdr (direction rules).
function showBreakdown(slot) {
  const st = { by: S.params.get('bd') || 'component', wire: S.params.get('bdw') || 'total', rules: S.params.get('bdr') || '' };
  const q = S.params.get('adjust') === '1';
  slot.replaceChildren(
    breakdownPanel(
      [S.data.traceId],
      st,
      (n) => {
        setParam('bd', n.by);
        setParam('bdw', n.wire === 'link' ? 'link' : null);
        setParam('bdr', n.rules || null);
      },
      true,
      q,
    ),
  );
}

function toggleBreakdown(e) {
  const slot = S.page.querySelector('.bd-slot');
  const on = !S.params.get('bd');
  e.target.classList.toggle('on', on);
  setParam('bd', on ? 'component' : null);
  if (on) showBreakdown(slot);
  else {
    setParam('bdw', null);
    setParam('bdr', null);
    slot.replaceChildren();
  }
}

function toggleCp(e) {
  S.cp = !S.cp;
  e.target.classList.toggle('on', S.cp);
  setParam('cp', S.cp ? null : '0');
  renderRows();
}

function toggleOnlyCp(e) {
  S.onlyCrit = !S.onlyCrit;
  e.target.classList.toggle('on', S.onlyCrit);
  setParam('only', S.onlyCrit ? 'cp' : null);
  rebuildVisible();
  S.scroll.scrollTop = 0;
  renderAll();
}

function find(q) {
  q = q.trim().toLowerCase();
  const cnt = S.page.querySelector('#find-count');
  if (!q) {
    S.match = null;
    cnt.textContent = '';
    renderRows();
    return;
  }
  const d = S.data;
  const R = d.rows;
  const nameHit = d.names.map((s) => s.toLowerCase().includes(q));
  const svcHit = d.services.map((s) => s.toLowerCase().includes(q));
  const compHit = d.components.map((s) => s.toLowerCase().includes(q));
  const list = [];
  for (let i = 0; i < S.n; i++) if (nameHit[R.name[i]] || svcHit[R.svc[i]] || compHit[R.comp[i]] || R.id[i] === q) list.push(i);
  S.match = { list, set: new Set(list), at: -1 };
  cnt.textContent = `${fmtInt(list.length)} match${list.length === 1 ? '' : 'es'}`;
  renderRows();
}

function nextMatch(dir) {
  if (!S.match || !S.match.list.length) return;
  const m = S.match;
  m.at = (m.at + dir + m.list.length) % m.list.length;
  select(m.list[m.at]);
  S.page.querySelector('#find-count').textContent = `${m.at + 1} / ${fmtInt(m.list.length)}`;
}

function compareWith(other) {
  other = other.trim().toLowerCase();
  if (!/^[0-9a-f]{16,32}$/.test(other)) {
    toast('Enter the other trace id (16 or 32 hex digits)', 'error');
    return;
  }
  location.hash = href(['compare'], { a: S.data.traceId, b: other });
}

// For tests and debugging: the current route's trace view state.
window.__weftTraceView = () => (S && S.data ? { id: S.id, rows: S.vis.length, sel: S.sel, z: [S.z0, S.z1], route: route().path } : null);
