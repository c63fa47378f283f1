// Breakdown: where the end-to-end time went, per component (or service, or operation), with the
// wire between components, as stacked bars. The numbers come from the server's
// /api/ui/breakdown, which runs weft_analyze::breakdown (the same as `weft breakdown`):
// every instant of a trace goes to the innermost span active then, or to the wire in a gap
// between two components, so a trace's rows add up to its end-to-end time. Over many traces
// (or the request and response halves of one), direction rules split the traces into units;
// each direction gets one bar of mean times, with median, p95 and share in the tooltip and
// the table.
import { h, api, fmtDur, fmtInt, colour, href, errorBox, spinner, shortId } from './util.js';

const BYS = [
  ['component', 'weft.component, else service.name (ns3/sw0, client-nic, …)'],
  ['service', 'service.name'],
  ['operation', 'service and span name'],
];
const RULE_HELP =
  'Direction rules, separated by ";": LABEL: COND, COND, …  — COND is key=value on a span or its resource ' +
  '(children inherit their parent\'s direction; name=… is the span name), root.key=value on the root span, ' +
  'from=GROUP / to=GROUP (where the trace starts / ends); values take a|b alternatives and a trailing *. ' +
  'The first matching rule wins. Example: request: source.address=10.0.0.1; response: source.address=10.0.0.2';

/**
 * A panel that loads and draws the breakdown of trace `ids`.
 * `st` = {by, wire, rules} (URL state: bd, bdw, bdr); `onChange(st)` is called when the user
 * changes it (to keep it in the URL). `single`: the panel sits in one trace's view; `adjust`:
 * with read-time clock-skew adjustment (as the trace view).
 */
export function breakdownPanel(ids, st, onChange, single = false, adjust = false) {
  const box = h('div.breakdown');
  const P = { ids, st: { by: st.by || 'component', wire: st.wire || 'total', rules: st.rules || '' }, onChange, single, adjust, box, dir: 0, seq: 0, last: null };
  load(P);
  return box;
}

function set(P, patch) {
  Object.assign(P.st, patch);
  P.dir = 0;
  P.onChange({ ...P.st });
  load(P);
}

async function load(P) {
  const seq = ++P.seq;
  const q = new URLSearchParams({ traces: P.ids.join(','), by: P.st.by, wire: P.st.wire });
  if (P.st.rules.trim()) q.set('rules', P.st.rules);
  if (P.adjust) q.set('adjust', 'true');
  P.box.replaceChildren(controls(P), spinner('Computing breakdown…'));
  let r;
  try {
    r = await api(`/api/ui/breakdown?${q}`);
  } catch (e) {
    if (seq === P.seq) P.box.replaceChildren(controls(P), errorBox(e));
    return;
  }
  if (seq !== P.seq) return;
  P.last = r;
  draw(P, r);
}

// ---------------------------------------------------------------------------------------------
// Controls: group by, wire per link, direction rules and presets.

function controls(P) {
  const r = P.last;
  const n = P.ids.length;
  const title = P.single ? 'Where the time went' : `Where the time went · ${fmtInt(n)} trace${n === 1 ? '' : 's'}`;
  const rulesInput = h('input.bd-rules', {
    name: 'rules',
    value: P.st.rules,
    placeholder: 'direction rules, e.g. request: source.address=10.0.0.1; response: source.address=10.0.0.2',
    title: RULE_HELP,
    spellcheck: 'false',
    autocomplete: 'off',
    onkeydown: (e) => e.key === 'Enter' && (e.preventDefault(), set(P, { rules: e.target.value.trim() })),
  });
  const presets = r ? rulePresets(r) : [];
  return h(
    'div.bd-controls',
    h(
      'div.bd-head',
      h('h3', title),
      h('div.chips', { role: 'group', 'aria-label': 'rows by' }, BYS.map(([k, t]) => h('button.chip', { class: k === P.st.by ? 'on' : '', dataset: { by: k }, title: `Rows by ${t}`, onclick: () => set(P, { by: k }) }, `by ${k}`))),
      h('button.chip#bd-wire', { class: P.st.wire === 'link' ? 'on' : '', title: 'One wire row per link between two components (wire A→B) instead of one summed wire row', onclick: () => set(P, { wire: P.st.wire === 'link' ? 'total' : 'link' }) }, 'wire per link'),
      h('span.muted.bd-what', { title: 'Every instant of a trace goes to the innermost span active then; a gap between two components is wire time (PCIe, link serialization and propagation). The rows add up to the end-to-end time.' }, 'timeline time — rows add up to end-to-end'),
    ),
    h(
      'form.bd-dirs',
      { onsubmit: (e) => (e.preventDefault(), set(P, { rules: rulesInput.value.trim() })) },
      h('span.bd-dirs-label', { title: RULE_HELP }, 'Directions'),
      h('button.chip', { type: 'button', class: P.st.rules ? '' : 'on', dataset: { preset: 'none' }, title: 'No rules: every trace is one unit of one direction, "all"', onclick: () => set(P, { rules: '' }) }, 'one'),
      presets.map(([key, label, rules, tip]) => h('button.chip', { type: 'button', class: rules === P.st.rules ? 'on' : '', dataset: { preset: key }, title: `${tip}\n\n${rules.split('; ').join('\n')}`, onclick: () => set(P, { rules }) }, label)),
      rulesInput,
      h('button', { type: 'submit', title: 'Apply the rules (Enter)' }, 'Apply'),
    ),
  );
}

// A value usable in a rule as is (no separators or pattern syntax).
const plain = (v) => typeof v === 'string' && v !== '' && v.trim() === v && !/[,;|\n]|\*$/.test(v);
const label = (v) => v.replace(/[:;]/g, '·');

/** Ready-made rules from the answer: per root span name, per packet flow, per first → last group. */
export function rulePresets(r) {
  const out = [];
  const count = (key) => {
    const m = new Map();
    for (const t of r.traces) {
      const k = key(t);
      if (k !== null) m.set(k, (m.get(k) || 0) + 1);
    }
    return [...m.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 64);
  };
  const roots = count((t) => (plain(t.rootName) ? t.rootName : null));
  if (roots.length > 1) {
    out.push(['root', 'per root span', roots.map(([n]) => `${label(n)}: root.name=${n}`).join('; '), 'One direction per root span name']);
  }
  const flows = (r.flows || []).filter((f) => plain(f.source) && plain(f.destination)).slice(0, 16);
  if (flows.length) {
    const mirror = flows.length === 2 && flows[0].source === flows[1].destination && flows[0].destination === flows[1].source;
    const names = flows.map((f, i) => (mirror ? ['request', 'response'][i] : label(`${f.source}→${f.destination}`)));
    const rules = flows.map((f, i) => `${names[i]}: source.address=${f.source}, destination.address=${f.destination}`);
    rules.push(`${names[0]}: from=*`);
    out.push(['flow', mirror ? 'request / response' : 'per packet flow', rules.join('; '), 'One direction per packet flow (source.address → destination.address on the network hops; spans below a hop follow it). Spans before the first packet count to the earliest flow.']);
  }
  const routes = count((t) => (plain(t.from) && plain(t.to) ? `${t.from}\u0000${t.to}` : null));
  if (routes.length > 1) {
    const rules = routes.map(([k]) => {
      const [a, b] = k.split('\u0000');
      return `${label(`${a}→${b}`)}: from=${a}, to=${b}`;
    });
    out.push(['route', 'per first → last', rules.join('; '), `One direction per pair of the ${r.by} where a trace starts and where it ends`]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Drawing

function draw(P, r) {
  const parts = [controls(P)];
  const dirs = r.directions || [];
  const trivial = P.single && !P.st.rules.trim();
  if (P.dir >= dirs.length) P.dir = 0;
  if (!trivial && dirs.length) parts.push(directionBars(P, r, dirs), directionTable(dirs[P.dir], r));
  if (P.single && r.traces.length === 1) parts.push(traceSection(r.traces[0]));
  else if (r.traces.length > 1) parts.push(perTrace(r.traces));
  const notes = [];
  if (r.unclassifiedSpans) notes.push(`${fmtInt(r.unclassifiedSpans)} span(s) in no direction (${fmtInt(r.unclassifiedTraces)} trace(s) entirely)`);
  if (r.sampled) notes.push('medians and p95 estimated from a sample');
  if (r.duplicateSpanIds) notes.push(`${fmtInt(r.duplicateSpanIds)} duplicate span id(s)`);
  if (r.missing.length) notes.push(`${r.missing.length} trace(s) no longer stored`);
  if (r.skipped.length) notes.push(`${r.skipped.length} trace(s) not broken down (span budget reached)`);
  if (notes.length) parts.push(h('p.muted.bd-notes', notes.join(' · ')));
  P.box.replaceChildren(...parts);
  // For tests and scripts: what is drawn.
  P.box.dataset.keys = [...new Set(dirs.flatMap((d) => d.components.map((c) => c.name)).concat(r.traces.flatMap((t) => t.rows.map((x) => x.name))))].join(',');
  P.box.dataset.directions = dirs.map((d) => d.direction).join(',');
}

function isWire(row) {
  return row.kind === 'wire';
}

/** Background of a row's segment / swatch: its colour, hatched for wire rows. */
function paint(row) {
  if (!isWire(row)) return { background: colour(row.name) };
  const c = row.name === 'wire' ? 'var(--wire)' : colour(row.name);
  return { background: `repeating-linear-gradient(135deg, ${c} 0 5px, var(--wire2) 5px 9px)` };
}

function kindBadge(row) {
  if (isWire(row)) return h('span.kb.k-wire', { title: 'time between spans of different components' }, 'wire');
  return row.componentKind ? h('span.kb', { class: `k-${row.componentKind}` }, row.componentKind) : null;
}

function swatch(row) {
  return h('i.sw', { style: paint(row) });
}

/** A stacked bar of `segs` = [{row, v, tip}] whose values sum to `sum`, `scale` wide = 100 %. */
function stacked(segs, sum, scale) {
  const bar = h('div.stack', { style: { width: `${Math.max(0.3, (100 * sum) / Math.max(1, scale))}%` } });
  for (const { row, v, tip } of segs) {
    if (!(v > 0)) continue;
    const pct = (100 * v) / Math.max(1e-9, sum);
    bar.append(h('span', { class: isWire(row) ? 'wire' : '', style: { width: `${pct}%`, ...paint(row) }, title: tip, dataset: { name: row.name } }, pct > 9 ? row.name : ''));
  }
  return bar;
}

function pct(x) {
  return `${(100 * x).toFixed(1)} %`;
}

function directionBars(P, r, dirs) {
  const scale = Math.max(...dirs.map((d) => d.endToEnd.meanNs), 1);
  const what = P.single ? 'units of this trace' : 'units';
  return h(
    'div.bd-bars',
    dirs.map((d, i) =>
      h(
        'div.bd-dir',
        { class: i === P.dir ? 'on' : '', dataset: { direction: d.direction }, title: 'Show this direction in the table', onclick: () => ((P.dir = i), draw(P, r)) },
        h('span.bd-dir-label', h('b', d.direction), h('span.muted', ` ${fmtInt(d.units)} ${d.units === 1 ? what.replace('units', 'unit') : what}`)),
        h(
          'span.bd-track',
          d.units
            ? stacked(
                d.components.map((c) => ({
                  row: c,
                  v: c.time.meanNs,
                  tip: `${d.direction} · ${c.name}: mean ${fmtDur(c.time.meanNs)} · median ${fmtDur(c.time.medianNs)} · p95 ${fmtDur(c.time.p95Ns)} · share ${pct(c.share)} · in ${fmtInt(c.present)} of ${fmtInt(d.units)} units`,
                })),
                d.endToEnd.meanNs,
                scale,
              )
            : h('span.muted', 'no span matched'),
        ),
        h('span.bd-dur', { title: `end-to-end: median ${fmtDur(d.endToEnd.medianNs)}, p95 ${fmtDur(d.endToEnd.p95Ns)}` }, d.units ? `mean ${fmtDur(d.endToEnd.meanNs)}` : ''),
      ),
    ),
  );
}

function directionTable(d, r) {
  if (!d || !d.units) return h('p.muted', d ? `Direction ${d.direction}: no span matched its rules.` : '');
  const e = d.endToEnd;
  return h(
    'div.table-wrap.bd-table',
    h(
      'table.bd-stats',
      h('caption', h('b', d.direction), ` — ${fmtInt(d.units)} unit${d.units === 1 ? '' : 's'}, ${fmtInt(d.spans)} spans; rows by ${r.by}; time per unit`),
      h('thead', h('tr', ['', 'kind', 'mean', 'median', 'p95', 'max', 'share', 'present', ''].map((x) => h('th', x)))),
      h(
        'tbody',
        d.components.map((c) =>
          h(
            'tr',
            { class: isWire(c) ? 'wire' : '', dataset: { name: c.name } },
            h('td.bd-name', swatch(c), c.name),
            h('td', kindBadge(c)),
            h('td.num', fmtDur(c.time.meanNs)),
            h('td.num', fmtDur(c.time.medianNs)),
            h('td.num', fmtDur(c.time.p95Ns)),
            h('td.num', fmtDur(c.time.maxNs)),
            h('td.num', pct(c.share)),
            h('td.num', `${fmtInt(c.present)}/${fmtInt(d.units)}`),
            h('td.bd-mini', h('span', { style: { width: `${100 * c.share}%`, ...paint(c) } })),
          ),
        ),
        h('tr.total', h('td', 'end-to-end'), h('td'), h('td.num', fmtDur(e.meanNs)), h('td.num', fmtDur(e.medianNs)), h('td.num', fmtDur(e.p95Ns)), h('td.num', fmtDur(e.maxNs)), h('td.num', '100 %'), h('td'), h('td')),
      ),
    ),
  );
}

function traceSection(t) {
  const seg = (row) => ({ row, v: row.timelineNs, tip: `${row.name}: ${fmtDur(row.timelineNs)} (${pct(row.share)}) of the timeline · ${fmtInt(row.spans)} spans, total ${fmtDur(row.totalNs)}, self ${fmtDur(row.selfNs)}` });
  return h(
    'div.bd-trace',
    h('div.bd-dir.on', h('span.bd-dir-label', h('b', 'this trace')), h('span.bd-track', stacked(t.rows.map(seg), t.durationNs, t.durationNs)), h('span.bd-dur', fmtDur(t.durationNs))),
    h(
      'div.table-wrap.bd-table',
      h(
        'table.bd-stats.bd-one',
        h('caption', 'Timeline: each instant to the innermost active span (or the wire between components); total: sum of span durations; self: minus their children'),
        h('thead', h('tr', ['', 'kind', 'spans', 'total', 'self', 'timeline', 'share', ''].map((x) => h('th', x)))),
        h(
          'tbody',
          t.rows.map((row) =>
            h(
              'tr',
              { class: isWire(row) ? 'wire' : '', dataset: { name: row.name } },
              h('td.bd-name', swatch(row), row.name),
              h('td', kindBadge(row)),
              h('td.num', isWire(row) ? '' : fmtInt(row.spans)),
              h('td.num', isWire(row) ? '' : fmtDur(row.totalNs)),
              h('td.num', isWire(row) ? '' : fmtDur(row.selfNs)),
              h('td.num', h('b', fmtDur(row.timelineNs))),
              h('td.num', pct(row.share)),
              h('td.bd-mini', h('span', { style: { width: `${100 * row.share}%`, ...paint(row) } })),
            ),
          ),
        ),
      ),
    ),
  );
}

function perTrace(traces) {
  const max = Math.max(...traces.map((t) => t.durationNs), 1);
  const sorted = traces.slice().sort((a, b) => b.durationNs - a.durationNs);
  return h(
    'div.bd-per',
    h('div.muted.bd-per-title', 'Per trace, longest first (one scale; click to open)'),
    sorted.map((t) =>
      h(
        'a.bd-row',
        { href: href(['trace', t.traceId]), title: `${t.root || ''} — ${fmtDur(t.durationNs)}` },
        h('span.bd-label', h('code', shortId(t.traceId)), ' ', t.root || ''),
        h('span.bd-track', stacked(t.rows.map((row) => ({ row, v: row.timelineNs, tip: `${row.name}: ${fmtDur(row.timelineNs)} (${pct(row.share)})` })), t.durationNs, max)),
        h('span.bd-dur', fmtDur(t.durationNs)),
      ),
    ),
  );
}
