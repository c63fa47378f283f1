// Compare two traces: spans matched by their service+name path from the root, aggregated per
// path (count, total time), shown side by side on one time scale, classified as
// added / removed / slower / faster / count changed, with the biggest changes listed first.
import { h, api, fmtDur, fmtInt, colour, href, errorBox, spinner, shortId, replaceParams } from './util.js';

let root = null;
const FILTERS = {
  all: 'All',
  changed: 'Changed',
  slower: 'Slower',
  faster: 'Faster',
  added: 'Added',
  removed: 'Removed',
};

export function mount(el, path, params) {
  root = el;
  const a = params.get('a') || '';
  const b = params.get('b') || '';
  const f = h(
    'form.cmp-form',
    {
      onsubmit: (e) => {
        e.preventDefault();
        location.hash = href(['compare'], { a: e.target.a.value.trim().toLowerCase(), b: e.target.b.value.trim().toLowerCase() });
      },
    },
    h('label.field', h('span', 'Trace A (baseline)'), h('input', { name: 'a', value: a, placeholder: 'trace id', spellcheck: 'false' })),
    h('label.field', h('span', 'Trace B (compared)'), h('input', { name: 'b', value: b, placeholder: 'trace id', spellcheck: 'false' })),
    h('div.actions', h('button.primary', { type: 'submit' }, 'Compare'), h('button', { type: 'button', onclick: () => (location.hash = href(['compare'], { a: b, b: a })) }, 'Swap')),
  );
  const out = h('div.cmp-out');
  el.append(h('div.page-pad.compare-page', h('h2', 'Compare two traces'), f, out));
  if (a && b) run(out, a, b, params.get('show') || 'all');
  else out.append(h('p.hint', 'Enter two trace ids — or tick two traces in the search results and press "Compare". Spans are matched by their path of service:name from the root, so two requests of one endpoint line up even though their ids and timings differ.'));
}

export function unmount() {
  root = null;
}

async function run(out, a, b, show) {
  out.replaceChildren(spinner('Comparing…'));
  let c;
  try {
    c = await api(`/api/ui/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  if (!root) return;
  const counts = { added: 0, removed: 0, slower: 0, faster: 0, count: 0, same: 0 };
  for (const n of c.nodes) counts[n.change]++;
  const scale = Math.max(c.a.durationNs, c.b.durationNs, 1);
  const delta = c.b.durationNs - c.a.durationNs;
  const pct = c.a.durationNs ? (100 * delta) / c.a.durationNs : 0;
  const summary = h(
    'div.cmp-summary',
    card('A', c.a, a),
    card('B', c.b, b),
    h(
      'div.card.delta',
      h('div.card-k', 'B − A'),
      h('div.card-v', { class: delta > 0 ? 'worse' : delta < 0 ? 'better' : '' }, `${delta > 0 ? '+' : ''}${fmtDur(delta)}`),
      h('div.muted', `${pct > 0 ? '+' : ''}${pct.toFixed(1)} % end to end · spans ${c.b.spans - c.a.spans >= 0 ? '+' : ''}${c.b.spans - c.a.spans}`),
      h(
        'div.counts',
        ['slower', 'faster', 'added', 'removed', 'count'].map((k) => (counts[k] ? h(`span.chg.${k}`, `${counts[k]} ${k === 'count' ? 'count changed' : k}`) : null)),
      ),
    ),
  );
  // Biggest differences first: where did B's time go?
  const top = c.nodes
    .map((n, i) => ({ n, i }))
    .filter(({ n }) => n.change !== 'same' && n.deltaNs !== 0)
    .sort((x, y) => Math.abs(y.n.deltaNs) - Math.abs(x.n.deltaNs))
    .slice(0, 8);
  const topBox = top.length
    ? h(
        'div.cmp-top',
        h('h3', 'Largest changes'),
        h(
          'ol',
          top.map(({ n, i }) =>
            h(
              'li',
              h('a', { href: `#cmp-row-${i}`, onclick: (e) => (e.preventDefault(), focusRow(i)) }, h('span.svc-dot', { style: { background: colour(n.service) } }), h('b', n.service), `: ${n.name}`),
              h(`span.chg.${n.change}`, n.change),
              h('span.delta', { class: n.deltaNs > 0 ? 'worse' : 'better' }, `${n.deltaNs > 0 ? '+' : ''}${fmtDur(n.deltaNs)}`),
              h('span.muted', ` (${n.a ? `${n.a.count}×` : '–'} → ${n.b ? `${n.b.count}×` : '–'})`),
            ),
          ),
        ),
      )
    : h('p.muted', 'No significant differences: same structure, times within 10 %.');
  const filters = h(
    'div.chips.filters',
    Object.entries(FILTERS).map(([k, label]) =>
      h('button.chip', { class: k === show ? 'on' : '', dataset: { f: k }, onclick: () => setShow(k) }, label),
    ),
  );
  const table = h('table.cmp-table');
  const render = (flt) => {
    const rows = [];
    rows.push(h('thead', h('tr', h('th', 'Service : span (path)'), h('th.num', 'A'), h('th.bars', 'A timeline'), h('th.num', 'B'), h('th.bars', 'B timeline'), h('th.num', 'Δ total'), h('th', 'Change'))));
    const body = h('tbody');
    c.nodes.forEach((n, i) => {
      const visible = flt === 'all' || (flt === 'changed' ? n.change !== 'same' : n.change === flt);
      if (!visible) return;
      body.append(
        h(
          'tr',
          { id: `cmp-row-${i}`, class: `chg-${n.change}` },
          h('td.path', h('span.ind', { style: { width: `${Math.min(n.depth, 24) * 14}px` } }), h('span.svc-dot', { style: { background: colour(n.service) } }), h('span.pname', h('b', n.service), `: ${n.name}`)),
          h('td.num', side(n.a)),
          h('td.bars', bar(n.a, scale, c.a.traceId)),
          h('td.num', side(n.b)),
          h('td.bars', bar(n.b, scale, c.b.traceId)),
          h('td.num', { class: n.deltaNs > 0 ? 'worse' : n.deltaNs < 0 ? 'better' : '' }, n.deltaNs ? `${n.deltaNs > 0 ? '+' : ''}${fmtDur(n.deltaNs)}` : '·'),
          h('td', h(`span.chg.${n.change}`, n.change === 'count' ? 'count' : n.change)),
        ),
      );
    });
    rows.push(body);
    table.replaceChildren(...rows);
  };
  const setShow = (k) => {
    show = k;
    for (const b2 of filters.children) b2.classList.toggle('on', b2.dataset.f === k);
    replaceParams({ a, b, show: k === 'all' ? '' : k });
    render(k);
  };
  render(show);
  out.replaceChildren(summary, topBox, h('div.cmp-legend.muted', `Both timelines share one scale (${fmtDur(scale)}, the longer trace): a bar runs from the earliest start to the latest end of the spans on that path, relative to its trace's start. Times are totals over the spans on the path. Click a bar to open the span.`), filters, h('div.table-wrap', table));
}

function focusRow(i) {
  const r = root.querySelector(`#cmp-row-${i}`);
  if (!r) return;
  r.scrollIntoView({ block: 'center' });
  r.classList.add('flash');
  setTimeout(() => r.classList.remove('flash'), 1200);
}

function card(label, t, id) {
  return h(
    'div.card',
    h('div.card-k', `Trace ${label}`),
    h('div.card-v', fmtDur(t.durationNs)),
    h('div.muted', `${fmtInt(t.spans)} spans · critical path ${fmtDur(t.criticalNs)}`),
    h('a', { href: href(['trace', id]) }, h('code', shortId(t.traceId)), ' open →'),
  );
}

function side(s) {
  if (!s) return h('span.muted', '—');
  return h('span', { title: `${s.count} span(s), total ${fmtDur(s.totalNs)}, longest ${fmtDur(s.maxNs)}${s.errors ? `, ${s.errors} error(s)` : ''}` }, s.count > 1 ? h('span.muted', `${s.count}× `) : '', fmtDur(s.totalNs), s.errors ? h('span.err', ' !') : '');
}

function bar(s, scale, trace) {
  if (!s) return h('div.mbar.none');
  const l = (100 * s.startNs) / scale;
  const w = Math.max(0.4, (100 * (s.endNs - s.startNs)) / scale);
  return h(
    'div.mbar',
    h('a.mseg', {
      href: href(['trace', trace], { span: s.spanId }),
      title: `+${fmtDur(s.startNs)} … +${fmtDur(s.endNs)}`,
      style: { left: `${l}%`, width: `${w}%` },
    }),
  );
}
