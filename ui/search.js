// Search: criteria form (state in the URL), sortable result list, a duration-over-time scatter,
// selection of two traces to compare.
import { breakdownPanel } from './breakdown.js';
import { captureBox } from './capture.js';
import { h, api, fmtDur, fmtTime, fmtAgo, fmtInt, colour, href, errorBox, spinner, shortId } from './util.js';

const SORTS = {
  longest: ['Longest first', (a, b) => b.durationNs - a.durationNs],
  shortest: ['Shortest first', (a, b) => a.durationNs - b.durationNs],
  newest: ['Newest first', (a, b) => b.startMs - a.startMs],
  oldest: ['Oldest first', (a, b) => a.startMs - b.startMs],
  spans: ['Most spans', (a, b) => b.spanCount - a.spanCount],
  errors: ['Most errors', (a, b) => b.errors - a.errors || b.durationNs - a.durationNs],
};
const FIELDS = ['service', 'component', 'name', 'attrs', 'minDuration', 'maxDuration', 'lookback', 'start', 'end', 'limit'];

let root = null;
let state = null;

export function mount(el, path, params) {
  root = el;
  state = { params, services: null, result: null, selected: new Set() };
  el.append(h('div.search-page', form(params), h('section.results#results')));
  loadServices();
  if ([...params.keys()].length) run(params);
  else root.querySelector('#results').append(h('p.hint', 'Pick criteria and press Search — or just press Search to list the most recent traces.'));
}

export function update(path, params) {
  // A new query string: re-run without rebuilding the form (keeps focus).
  state.params = params;
  fill(params);
  run(params);
  return true;
}

export function unmount() {
  root = null;
}

function input(name, label, placeholder, extra = {}) {
  return h('label.field', h('span', label), h('input', { name, placeholder, spellcheck: 'false', autocomplete: 'off', ...extra }));
}

function form(params) {
  const f = h(
    'form.criteria#search-form',
    { onsubmit: submit },
    h('label.field', h('span', 'Service'), h('select', { name: 'service', onchange: () => fillNames() }, h('option', { value: '' }, 'all services'))),
    h('label.field', h('span', 'Component'), h('select', { name: 'component' }, h('option', { value: '' }, 'any'))),
    h('label.field', h('span', 'Span name'), h('select', { name: 'name' }, h('option', { value: '' }, 'all spans'))),
    input('attrs', 'Attributes', 'http.route=/api/cart error', { title: 'key=value terms separated by spaces; key="a b" quotes; a bare key means present; error = failed spans' }),
    h('div.row2', input('minDuration', 'Min duration', '10ms'), input('maxDuration', 'Max duration', '2s')),
    h(
      'label.field',
      h('span', 'Time range'),
      h(
        'select',
        { name: 'lookback' },
        ['15m', '1h', '6h', '24h', '7d', 'all'].map((v) => h('option', { value: v }, v === 'all' ? 'all time' : `last ${v}`)),
      ),
    ),
    h('div.row2', input('start', 'From (epoch ms)', 'optional'), input('end', 'To (epoch ms)', 'now')),
    h('label.field', h('span', 'Limit'), h('input', { name: 'limit', type: 'number', min: 1, max: 1000, placeholder: '50' })),
    h('div.actions', h('button.primary', { type: 'submit' }, 'Search'), h('button', { type: 'button', onclick: reset }, 'Reset'), h('button#svc-capture', { type: 'button', title: 'Capture the selected service\'s function calls for a bounded period (EXIST)', onclick: openCapture }, 'Capture…')),
    h('div.svc-capture-slot'),
  );
  queueMicrotask(() => fill(params));
  return f;
}

function fill(params) {
  const f = root && root.querySelector('#search-form');
  if (!f) return;
  for (const k of FIELDS) {
    const el = f.elements[k];
    if (!el) continue;
    const v = params.get(k) || (k === 'lookback' ? 'all' : '');
    if (el.tagName === 'SELECT' && v && ![...el.options].some((o) => o.value === v)) el.append(h('option', { value: v }, v));
    el.value = v;
  }
  fillNames(params.get('name') || '');
}

function fillNames(keep) {
  const f = root && root.querySelector('#search-form');
  if (!f || !state.services) return;
  const sel = f.elements.name;
  const cur = keep !== undefined ? keep : sel.value;
  const svc = f.elements.service.value;
  const names = new Set();
  for (const [s, list] of Object.entries(state.services.operations || {})) if (!svc || s === svc) for (const n of list) names.add(n);
  sel.replaceChildren(h('option', { value: '' }, 'all spans'), ...[...names].sort().map((n) => h('option', { value: n }, n)));
  if (cur && !names.has(cur)) sel.append(h('option', { value: cur }, cur));
  sel.value = cur;
}

async function loadServices() {
  try {
    state.services = await api('/api/ui/services');
  } catch (e) {
    state.services = { services: [], components: [], operations: {} };
  }
  const f = root && root.querySelector('#search-form');
  if (!f) return;
  const fillSel = (sel, list, first) => {
    const cur = state.params.get(sel.name) || '';
    sel.replaceChildren(h('option', { value: '' }, first), ...list.map((s) => h('option', { value: s }, s)));
    if (cur && !list.includes(cur)) sel.append(h('option', { value: cur }, cur));
    sel.value = cur;
  };
  fillSel(f.elements.service, state.services.services, 'all services');
  fillSel(f.elements.component, state.services.components, 'any');
  fillNames(state.params.get('name') || '');
}

/** Opens the capture form for the selected service (EXIST), below the criteria. */
function openCapture(e) {
  const f = e.target.form;
  const slot = f.querySelector('.svc-capture-slot');
  const svc = f.elements.service.value;
  slot.replaceChildren(svc ? captureBox(svc) : h('p.warn', 'Choose a service to capture.'));
}

function submit(e) {
  e.preventDefault();
  const f = e.target;
  const p = {};
  for (const k of FIELDS) {
    const v = f.elements[k] && f.elements[k].value.trim();
    if (v) p[k] = v;
  }
  for (const k of ['sort', 'bd', 'bdw', 'bdr']) if (state.params.get(k)) p[k] = state.params.get(k);
  const url = href(['search'], p);
  if (url === location.hash) run(new URLSearchParams(url.split('?')[1] || ''));
  else location.hash = url;
}

function reset() {
  location.hash = '#/search';
}

async function run(params) {
  const res = root.querySelector('#results');
  res.replaceChildren(spinner('Searching…'));
  const q = new URLSearchParams();
  for (const k of FIELDS) if (params.get(k)) q.set(k, params.get(k));
  try {
    const r = await api(`/api/ui/search?${q}`);
    if (!root) return;
    state.result = r;
    state.selected.clear();
    showResults();
  } catch (e) {
    res.replaceChildren(errorBox(e));
  }
}

function showResults() {
  const res = root.querySelector('#results');
  const traces = state.result.traces.slice();
  const sortKey = SORTS[state.params.get('sort')] ? state.params.get('sort') : 'longest';
  traces.sort(SORTS[sortKey][1]);
  if (!traces.length) {
    res.replaceChildren(h('p.empty', 'No traces match. Widen the time range or remove criteria.'));
    return;
  }
  const max = Math.max(...traces.map((t) => t.durationNs), 1);
  const compareBtn = h('button#compare-selected', { disabled: true, onclick: compareSelected, title: 'Tick two traces to compare them' }, 'Compare selected');
  const head = h(
    'div.results-head',
    h('strong', `${traces.length} trace${traces.length === 1 ? '' : 's'}`),
    h('span.muted', ` in ${state.result.elapsedMs.toFixed(0)} ms`),
    h('span.grow'),
    h('button#bd-results', { class: state.params.get('bd') ? 'on' : '', title: 'Where the time of these traces went: per component (or service, operation) and the wire between them, per direction', onclick: () => setBreakdown(state.params.get('bd') ? null : { by: 'component' }) }, 'Breakdown'),
    compareBtn,
    h(
      'label.sort',
      'Sort ',
      h(
        'select#sort',
        { onchange: (e) => setSort(e.target.value) },
        Object.entries(SORTS).map(([k, [label]]) => h('option', { value: k, selected: k === sortKey }, label)),
      ),
    ),
  );
  const list = h(
    'ol.trace-list',
    traces.map((t) =>
      h(
        'li.trace-item',
        { dataset: { trace: t.traceId } },
        h('input', {
          type: 'checkbox',
          title: 'Select for comparison',
          'aria-label': `select trace ${t.traceId}`,
          onchange: (e) => {
            if (e.target.checked) state.selected.add(t.traceId);
            else state.selected.delete(t.traceId);
            compareBtn.disabled = state.selected.size !== 2;
            compareBtn.textContent = state.selected.size === 2 ? 'Compare the two selected' : `Compare selected (${state.selected.size}/2)`;
          },
        }),
        h(
          'a.trace-link',
          { href: href(['trace', t.traceId]) },
          h(
            'div.t-line1',
            h('span.svc-dot', { style: { background: colour(t.rootService || '?') } }),
            h('span.t-root', h('b', t.rootService || '(no service)'), ': ', t.rootName || '(no root)'),
            h('span.grow'),
            h('span.t-dur', fmtDur(t.durationNs)),
          ),
          h('div.t-bar', h('span', { style: { width: `${Math.max(0.5, (100 * t.durationNs) / max)}%` } })),
          h(
            'div.t-line2',
            h('span.badge', `${fmtInt(t.spanCount)} spans`),
            t.errors ? h('span.badge.err', `${t.errors} error${t.errors === 1 ? '' : 's'}`) : null,
            h(
              'span.chips',
              t.services.slice(0, 8).map(([s, n]) => h('span.chip', { style: { borderColor: colour(s) } }, h('i', { style: { background: colour(s) } }), `${s} ${n}`)),
              t.services.length > 8 ? h('span.chip', `+${t.services.length - 8}`) : null,
            ),
            h('span.grow'),
            h('span.muted', { title: fmtTime(t.startMs) }, `${fmtTime(t.startMs)} · ${fmtAgo(t.startMs)}`),
            h('code.muted', shortId(t.traceId)),
          ),
        ),
      ),
    ),
  );
  const bd = state.params.get('bd');
  const bdState = { by: bd, wire: state.params.get('bdw') || 'total', rules: state.params.get('bdr') || '' };
  res.replaceChildren(head, bd ? breakdownPanel(traces.map((t) => t.traceId), bdState, (st) => keepBreakdown(st)) : scatter(traces), list);
}

// The breakdown's state in the URL: bd (rows by), bdw (wire), bdr (direction rules).
function bdParams(p, st) {
  for (const k of ['bd', 'bdw', 'bdr']) delete p[k];
  if (st) {
    p.bd = st.by || 'component';
    if (st.wire === 'link') p.bdw = 'link';
    if (st.rules) p.bdr = st.rules;
  }
  return p;
}

function keepBreakdown(st) {
  const p = bdParams(Object.fromEntries(state.params.entries()), st);
  history.replaceState(null, '', href(['search'], p));
  state.params = new URLSearchParams(p);
}

function setBreakdown(st) {
  keepBreakdown(st);
  showResults();
}

function setSort(k) {
  const p = Object.fromEntries(state.params.entries());
  p.sort = k;
  history.replaceState(null, '', href(['search'], p));
  state.params = new URLSearchParams(p);
  showResults();
}

function compareSelected() {
  const [a, b] = [...state.selected];
  if (a && b) location.hash = href(['compare'], { a, b });
}

// Duration (y, log) over start time (x); click a dot to open the trace.
function scatter(traces) {
  const H = 120;
  const pad = 6;
  const t0 = Math.min(...traces.map((t) => t.startMs));
  const t1 = Math.max(...traces.map((t) => t.startMs));
  const d0 = Math.log(Math.max(1, Math.min(...traces.map((t) => t.durationNs))));
  const d1 = Math.log(Math.max(2, Math.max(...traces.map((t) => t.durationNs))));
  // x in percent (the SVG stretches to the page width without distorting the dots).
  const x = (t) => 1 + ((t.startMs - t0) / Math.max(1, t1 - t0)) * 98;
  const y = (t) => H - pad - ((Math.log(Math.max(1, t.durationNs)) - d0) / Math.max(1e-9, d1 - d0)) * (H - 2 * pad);
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('height', H);
  svg.classList.add('scatter');
  for (const t of traces) {
    const c = document.createElementNS(NS, 'circle');
    c.setAttribute('cx', `${x(t).toFixed(2)}%`);
    c.setAttribute('cy', y(t).toFixed(1));
    c.setAttribute('r', Math.min(7, 2.5 + Math.log10(Math.max(1, t.spanCount))).toFixed(1));
    c.setAttribute('fill', t.errors ? 'var(--err)' : colour(t.rootService || '?'));
    const title = document.createElementNS(NS, 'title');
    title.textContent = `${t.rootService}: ${t.rootName} — ${fmtDur(t.durationNs)}, ${t.spanCount} spans`;
    c.append(title);
    c.addEventListener('click', () => (location.hash = href(['trace', t.traceId])));
    svg.append(c);
  }
  return h('div.scatter-box', h('div.scatter-label', 'duration (log) over time'), svg);
}
