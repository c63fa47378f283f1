// Dependency graph by service or component: calls (parent span → child span across services)
// and caused_by links (cause → effect across components), laid out left to right in layers.
import { h, api, errorBox, spinner, fmtInt, colour, href } from './util.js';

let root = null;

export function mount(el, path, params) {
  root = el;
  const by = params.get('by') === 'component' ? 'component' : 'service';
  const lookback = params.get('lookback') || 'all';
  const go = (p) => (location.hash = href(['deps'], { by, lookback, ...p }));
  const out = h('div.deps-out');
  el.append(
    h(
      'div.page-pad.deps-page',
      h(
        'div.deps-bar',
        h('h2', 'Dependencies'),
        h('div.chips', ['service', 'component'].map((k) => h('button.chip', { class: k === by ? 'on' : '', onclick: () => go({ by: k }) }, `by ${k}`))),
        h(
          'select',
          { onchange: (e) => go({ lookback: e.target.value }), 'aria-label': 'time range' },
          ['15m', '1h', '6h', '24h', '7d', 'all'].map((v) => h('option', { value: v, selected: v === lookback }, v === 'all' ? 'all time' : `last ${v}`)),
        ),
        h('span.legend', h('i.l-call'), 'calls', h('i.l-caused'), 'caused_by links'),
      ),
      out,
    ),
  );
  load(out, by, lookback);
}

export function unmount() {
  root = null;
}

async function load(out, by, lookback) {
  out.replaceChildren(spinner());
  let g;
  try {
    g = await api(`/api/ui/dependencies?by=${by}&lookback=${encodeURIComponent(lookback)}`);
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  if (!root) return;
  if (!g.nodes.length) {
    out.replaceChildren(h('p.empty', 'No spans in this time range.'));
    return;
  }
  out.replaceChildren(graph(g, by), edgeTable(g, by));
}

function layout(g) {
  const ids = g.nodes.map((n) => n.id);
  const idx = new Map(ids.map((id, i) => [id, i]));
  const outE = ids.map(() => []);
  const inDeg = ids.map(() => 0);
  for (const e of g.edges) {
    const a = idx.get(e.from);
    const b = idx.get(e.to);
    if (a === undefined || b === undefined || a === b) continue;
    outE[a].push(b);
    inDeg[b]++;
  }
  // Longest-path layering on a DFS-acyclic subgraph (back edges ignored).
  const layer = ids.map(() => 0);
  const state = ids.map(() => 0);
  const order = [];
  const visit = (v) => {
    state[v] = 1;
    for (const w of outE[v]) if (state[w] === 0) visit(w);
    state[v] = 2;
    order.push(v);
  };
  const starts = ids.map((_, i) => i).sort((a, b) => inDeg[a] - inDeg[b]);
  for (const v of starts) if (state[v] === 0) visit(v);
  order.reverse();
  const pos = new Map(order.map((v, i) => [v, i]));
  for (const v of order) for (const w of outE[v]) if (pos.get(w) > pos.get(v)) layer[w] = Math.max(layer[w], layer[v] + 1);
  const layers = [];
  for (const v of order) (layers[layer[v]] ||= []).push(v);
  // One barycentre pass to reduce crossings.
  const y = new Map();
  layers.forEach((L) => L.forEach((v, i) => y.set(v, i)));
  for (let k = 1; k < layers.length; k++) {
    const bc = (v) => {
      const preds = g.edges.filter((e) => idx.get(e.to) === v && layer[idx.get(e.from)] < k).map((e) => y.get(idx.get(e.from)));
      return preds.length ? preds.reduce((a, b) => a + b, 0) / preds.length : y.get(v);
    };
    layers[k].sort((a, b) => bc(a) - bc(b));
    layers[k].forEach((v, i) => y.set(v, i));
  }
  return { idx, layer, layers, y };
}

function graph(g, by) {
  const { idx, layers, layer, y } = layout(g);
  const NW = 190;
  const NH = 54;
  const GX = 110;
  const GY = 26;
  const maxRows = Math.max(...layers.map((L) => L.length));
  const W = layers.length * (NW + GX) + 40;
  const H = maxRows * (NH + GY) + 40;
  const px = (v) => 20 + layer[v] * (NW + GX);
  const py = (v) => 20 + y.get(v) * (NH + GY) + ((maxRows - layers[layer[v]].length) * (NH + GY)) / 2;
  const NS = 'http://www.w3.org/2000/svg';
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'deps-svg' });
  const defs = el('defs', {});
  defs.innerHTML =
    '<marker id="dep-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="dep-head"/></marker>' +
    '<marker id="dep-arrow-c" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="dep-head-c"/></marker>';
  svg.append(defs);
  const maxCount = Math.max(...g.edges.map((e) => e.count), 1);
  for (const e of g.edges) {
    const a = idx.get(e.from);
    const b = idx.get(e.to);
    if (a === undefined || b === undefined) continue;
    const forward = layer[b] > layer[a];
    const x1 = forward ? px(a) + NW : px(a) + NW / 2;
    const y1 = forward ? py(a) + NH / 2 : py(a) + NH;
    const x2 = forward ? px(b) : px(b) + NW / 2;
    const y2 = forward ? py(b) + NH / 2 : py(b) + NH;
    const d = forward
      ? `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`
      : `M${x1},${y1} C${x1},${y1 + 60} ${x2},${y2 + 60} ${x2},${y2}`;
    const caused = e.kind === 'caused_by';
    const p = el('path', {
      d,
      class: `dep-edge ${caused ? 'caused' : 'call'}${e.errors ? ' has-err' : ''}`,
      'stroke-width': (1.2 + 2.8 * Math.sqrt(e.count / maxCount)).toFixed(1),
      'marker-end': caused ? 'url(#dep-arrow-c)' : 'url(#dep-arrow)',
    });
    p.append(el('title', {}, `${e.from} → ${e.to}: ${e.count} ${caused ? 'caused_by links' : 'calls'}${e.errors ? `, ${e.errors} errors` : ''}`));
    svg.append(p);
    const lx = (x1 + x2) / 2;
    const ly = forward ? (y1 + y2) / 2 - 4 : Math.max(y1, y2) + 48;
    svg.append(el('text', { x: lx, y: ly, class: 'dep-elabel', 'text-anchor': 'middle' }, `${fmtInt(e.count)}${e.errors ? ` · ${fmtInt(e.errors)} err` : ''}`));
  }
  for (const n of g.nodes) {
    const v = idx.get(n.id);
    const gr = el('g', { class: 'dep-node', transform: `translate(${px(v)},${py(v)})`, tabindex: 0 });
    gr.append(el('rect', { width: NW, height: NH, rx: 8, class: n.errors ? 'has-err' : '' }));
    gr.append(el('rect', { width: 6, height: NH, rx: 3, fill: colour(n.id) }));
    const label = n.id.length > 24 ? `${n.id.slice(0, 23)}…` : n.id;
    gr.append(el('text', { x: 16, y: 22, class: 'dep-name' }, label));
    gr.append(el('text', { x: 16, y: 41, class: 'dep-sub' }, `${n.kind ? `${n.kind} · ` : ''}${fmtInt(n.spans)} spans${n.errors ? ` · ${fmtInt(n.errors)} err` : ''}`));
    gr.append(el('title', {}, `${n.id}: ${n.spans} spans in ${n.traces} traces${n.errors ? `, ${n.errors} errors` : ''} — click to search`));
    gr.addEventListener('click', () => (location.hash = href(['search'], by === 'component' ? { component: n.id } : { service: n.id })));
    svg.append(gr);
  }
  return h('div.deps-graph', svg);
}

function edgeTable(g) {
  return h(
    'details.deps-table',
    h('summary', `${g.edges.length} edges, ${g.nodes.length} nodes`),
    h(
      'table.grid',
      h('thead', h('tr', h('th', 'From'), h('th', 'To'), h('th', 'Kind'), h('th.num', 'Count'), h('th.num', 'Errors'))),
      h('tbody', g.edges.map((e) => h('tr', h('td', e.from), h('td', e.to), h('td', e.kind), h('td.num', fmtInt(e.count)), h('td.num', fmtInt(e.errors))))),
    ),
  );
}
