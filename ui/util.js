// Small shared helpers: DOM building, formatting, colours, the JSON API, URL state.

/** Builds an element: h('div.cls#id', {attr: v, onclick: f}, child, 'text', ...). */
export function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(spec) || [];
  const el = document.createElement(m[1] || 'div');
  for (const part of (m[2] || '').match(/[.#][\w-]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.classList.add(...String(v).split(/\s+/).filter(Boolean));
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && k !== 'list' && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

/** Replaces `el`'s children as `h` appends them (arrays flattened; null, undefined and false
 * skipped), which the DOM's own replaceChildren does not: it would print them as text. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Duration in ns → short text ("1.24 ms"). */
export function fmtDur(ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return '–';
  const a = Math.abs(ns);
  const sign = ns < 0 ? '−' : '';
  if (a < 1e3) return `${sign}${Math.round(a)} ns`;
  if (a < 1e6) return `${sign}${trim(a / 1e3)} µs`;
  if (a < 1e9) return `${sign}${trim(a / 1e6)} ms`;
  if (a < 60e9) return `${sign}${trim(a / 1e9)} s`;
  const m = Math.floor(a / 60e9);
  return `${sign}${m} min ${Math.round((a - m * 60e9) / 1e9)} s`;
}

function trim(x) {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

/** Epoch ms → local date and time with ms. */
export function fmtTime(ms) {
  if (!ms && ms !== 0) return '–';
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** "3 min ago" for an epoch ms. */
export function fmtAgo(ms) {
  const s = (Date.now() - ms) / 1000;
  if (s < 0) return 'in the future';
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** 12345 → "12,345" (without toLocaleString, which is slow in hot render paths). */
export function fmtInt(n) {
  const s = String(Math.round(Number(n)));
  return s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

// Colour per name (service, component): a hash picks a palette slot; a slot already taken by
// another name this page moves to the next free one, so names on screen together differ (no
// two slots hold near-identical colours).
const PALETTE = [
  '#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#e15759', '#76b7b2', '#edc948', '#9c755f',
  '#ff9da7', '#2f9e9e', '#d37295', '#8cd17d', '#a0cbe8', '#e8a33d', '#6b5fb5', '#bab0ac',
  '#ffbe7d', '#b6992d', '#8172b2', '#1f4e79',
];
const colourCache = new Map();
const taken = new Set();
export function colour(name) {
  let c = colourCache.get(name);
  if (!c) {
    let x = 2166136261;
    for (let i = 0; i < name.length; i++) x = Math.imul(x ^ name.charCodeAt(i), 16777619);
    let slot = (x >>> 0) % PALETTE.length;
    for (let k = 0; k < PALETTE.length && taken.has(slot); k++) slot = (slot + 1) % PALETTE.length;
    if (taken.size < PALETTE.length) taken.add(slot);
    c = PALETTE[slot];
    colourCache.set(name, c);
  }
  return c;
}

/** GET (or POST with body) → JSON; throws Error(message from the server). */
export async function api(path, opts = {}) {
  const r = await fetch(path, opts);
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (e) {
    if (r.ok) throw new Error(`bad JSON from ${path}: ${e.message}`);
  }
  if (!r.ok) {
    const msg = (body && body.error && body.error.message) || text || r.statusText;
    const err = new Error(msg);
    err.status = r.status;
    throw err;
  }
  return body;
}

/** The route: {path: ['trace', 'abc'], params: URLSearchParams}. */
export function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [p, q] = raw.split('?');
  return { path: p ? p.split('/').map(decodeURIComponent) : [], params: new URLSearchParams(q || '') };
}

/** Builds "#/a/b?k=v", leaving out empty values. */
export function href(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return `#/${path.map(encodeURIComponent).join('/')}${s ? `?${s}` : ''}`;
}

/** Updates the URL's query without a new history entry or a re-render. */
export function replaceParams(params) {
  const { path } = route();
  const url = href(path, params);
  if (url !== location.hash) history.replaceState(null, '', url);
}

export function toast(msg, kind = 'info') {
  const t = document.getElementById('toast');
  if (!t) return;
  t.textContent = msg;
  t.className = `show ${kind}`;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (t.className = ''), 3500);
}

export function errorBox(e) {
  return h('div.error', h('strong', 'Error: '), e && e.message ? e.message : String(e));
}

export function spinner(text = 'Loading…') {
  return h('div.loading', h('span.spin'), text);
}

/** A span/trace id shortened for display. */
export function shortId(id) {
  return id && id.length > 12 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id || '';
}

/** Debounce. */
export function debounce(f, ms) {
  let t;
  return (...a) => {
    clearTimeout(t);
    t = setTimeout(() => f(...a), ms);
  };
}

/** Known Zipkin annotation meanings. */
export const ANNOTATIONS = {
  cs: 'client send',
  sr: 'server receive',
  ss: 'server send',
  cr: 'client receive',
  ws: 'wire send',
  wr: 'wire receive',
};

const TOKEN_KEY = 'weft.controlToken';

/** The control API's bearer token field, shared by every control action (kept for this tab only). */
export function tokenField() {
  let v = '';
  try {
    v = sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (e) {
    /* storage off: the field holds it for this page only */
  }
  const input = h('input.token', { type: 'password', name: 'token', value: v, placeholder: 'control token', autocomplete: 'off', spellcheck: 'false', 'aria-label': 'Control token' });
  input.addEventListener('input', () => {
    try {
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    } catch (e) {
      /* storage off */
    }
  });
  return h('label.field.token-field', h('span', 'Token'), input);
}

/** A call of the control API with the token from {@link tokenField}. */
export function control(path, opts = {}) {
  let token = '';
  try {
    token = sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (e) {
    /* storage off */
  }
  const input = document.querySelector('input.token');
  if (!token && input) token = input.value.trim();
  return api(path, { ...opts, headers: { ...(opts.headers || {}), authorization: `Bearer ${token}` } });
}
