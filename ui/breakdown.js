// Breakdown: where the end-to-end time went, per service or component, as stacked bars. Each
// trace's critical path is split by the service (or component) of the span on it, so the parts
// add up to the critical-path length (≈ the trace's latency): one bar per trace, and the mean
// over a set of traces (the search result).
import { h, api, fmtDur, colour, href, errorBox, spinner, shortId } from './util.js';

/** A panel that loads and draws the breakdown of `ids`; `by` is 'service' or 'component'. */
export function breakdownPanel(ids, by, onBy) {
  const box = h('div.breakdown', spinner('Computing breakdown…'));
  load(box, ids, by, onBy);
  return box;
}

async function load(box, ids, by, onBy) {
  let r;
  try {
    r = await api(`/api/ui/breakdown?by=${by}&traces=${ids.join(',')}`);
  } catch (e) {
    box.replaceChildren(errorBox(e));
    return;
  }
  const keys = r.totals.map(([k]) => k);
  const total = r.totals.reduce((a, [, v]) => a + v, 0) || 1;
  const n = r.traces.length || 1;
  const head = h(
    'div.bd-head',
    h('h3', r.traces.length === 1 ? 'Breakdown of the critical path' : `Breakdown over ${r.traces.length} traces`),
    h('div.chips', ['service', 'component'].map((k) => h('button.chip', { class: k === by ? 'on' : '', dataset: { by: k }, onclick: () => onBy(k) }, `by ${k}`))),
    h('span.muted', r.traces.length === 1 ? `critical path ${fmtDur(total)}` : `mean critical path ${fmtDur(total / n)}`),
  );
  const meanBar = stacked(r.totals.map(([k, v]) => [k, v / n]), total / n, total / n, r.traces.length === 1 ? 'this trace' : 'mean');
  const legend = h(
    'table.bd-legend',
    h(
      'tbody',
      r.totals.map(([k, v]) =>
        h(
          'tr',
          h('td', h('i.sw', { style: { background: colour(k) } }), k),
          h('td.num', fmtDur(v / n)),
          h('td.num', `${((100 * v) / total).toFixed(1)} %`),
          h('td.bd-mini', h('span', { style: { width: `${(100 * v) / total}%`, background: colour(k) } })),
        ),
      ),
    ),
  );
  const parts = [head, h('div.bd-main', h('div.bd-bars', meanBar), legend)];
  if (r.traces.length > 1) {
    const max = Math.max(...r.traces.map((t) => t.criticalNs), 1);
    const sorted = r.traces.slice().sort((a, b) => b.criticalNs - a.criticalNs);
    parts.push(
      h(
        'div.bd-per',
        h('div.muted.bd-per-title', 'Per trace, longest first (one scale; click to open)'),
        sorted.map((t) =>
          h(
            'a.bd-row',
            { href: href(['trace', t.traceId]), title: `${t.root || ''} — ${fmtDur(t.criticalNs)}` },
            h('span.bd-label', h('code', shortId(t.traceId)), ' ', t.root || ''),
            h('span.bd-track', stacked(t.parts, t.criticalNs, max, null)),
            h('span.bd-dur', fmtDur(t.criticalNs)),
          ),
        ),
      ),
    );
  }
  if (r.missing.length) parts.push(h('p.muted', `${r.missing.length} trace(s) no longer stored`));
  box.replaceChildren(...parts);
  box.dataset.keys = keys.join(',');
}

function stacked(parts, sum, scale, label) {
  const bar = h('div.stack', { style: { width: `${(100 * sum) / Math.max(1, scale)}%` } });
  for (const [k, v] of parts) {
    if (v <= 0) continue;
    const pct = (100 * v) / Math.max(1, sum);
    bar.append(h('span', { style: { width: `${pct}%`, background: colour(k) }, title: `${k}: ${fmtDur(v)} (${pct.toFixed(1)} %)` }, pct > 8 ? k : ''));
  }
  return label ? h('div.stack-wrap', h('span.stack-label', label), bar) : bar;
}
