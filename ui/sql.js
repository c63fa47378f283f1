// SQL console over the store (POST /api/sql): editor, examples, results as a table.
import { h, api, errorBox, spinner, fmtInt, href } from './util.js';

const EXAMPLES = [
  ['Slowest operations', "SELECT service_name, name, count(*) AS spans, avg(duration_ns) / 1e6 AS avg_ms,\n       approx_percentile_cont(duration_ns, 0.99) / 1e6 AS p99_ms\nFROM spans\nGROUP BY 1, 2\nORDER BY p99_ms DESC\nLIMIT 20"],
  ['Errors by service', "SELECT service_name, count(*) AS errors\nFROM spans\nWHERE status_code = 'error'\nGROUP BY 1\nORDER BY 2 DESC"],
  ['Cross-component links', "SELECT encode(l.trace_id, 'hex') AS trace, s.service_name AS effect, s.name,\n       encode(l.linked_trace_id, 'hex') AS cause_trace\nFROM span_links l JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id\nWHERE l.relation = 'caused_by'\nLIMIT 50"],
  ['Biggest traces', "SELECT encode(trace_id, 'hex') AS trace_id, count(*) AS spans,\n       (max(CAST(start_time AS BIGINT) + duration_ns) - min(CAST(start_time AS BIGINT))) / 1e6 AS ms\nFROM spans\nGROUP BY trace_id\nORDER BY spans DESC\nLIMIT 10"],
  ['Tables', 'SELECT table_name, column_name, data_type\nFROM information_schema.columns\nWHERE table_schema = \'public\'\nORDER BY table_name'],
];

let root = null;

export function mount(el, path, params) {
  root = el;
  const q = params.get('q') || EXAMPLES[0][1];
  const ta = h('textarea#sql-input', { spellcheck: 'false', rows: 8, 'aria-label': 'SQL query' });
  ta.value = q;
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      go();
    }
  });
  const out = h('div.sql-out#sql-out');
  const go = () => {
    const text = ta.value;
    history.replaceState(null, '', href(['sql'], { q: text }));
    run(text, out);
  };
  el.append(
    h(
      'div.page-pad.sql-page',
      h('h2', 'SQL'),
      h('p.muted', 'Read-only SQL (DataFusion) over the tables spans, span_events, span_links and events. Ctrl+Enter runs. Trace ids in results open the trace.'),
      h('div.chips', EXAMPLES.map(([label, text]) => h('button.chip', { type: 'button', onclick: () => ((ta.value = text), go()) }, label))),
      ta,
      h('div.actions', h('button.primary#sql-run', { type: 'button', onclick: go }, 'Run'), h('span.muted', ' max 10,000 rows')),
      out,
    ),
  );
  if (params.get('q')) run(q, out);
}

export function unmount() {
  root = null;
}

async function run(text, out) {
  out.replaceChildren(spinner('Running…'));
  let r;
  try {
    r = await api('/api/sql?format=json', { method: 'POST', body: text, headers: { 'content-type': 'text/plain' } });
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  if (!root) return;
  const isId = (v) => typeof v === 'string' && /^[0-9a-f]{32}$/.test(v);
  const cell = (v) => {
    if (v === null || v === undefined) return h('td.null', 'NULL');
    if (typeof v === 'number') return h('td.num', Number.isInteger(v) ? fmtInt(v) : String(Math.round(v * 1000) / 1000));
    if (isId(v)) return h('td', h('a', { href: href(['trace', v]) }, h('code', v)));
    if (typeof v === 'object') return h('td', h('code', JSON.stringify(v)));
    return h('td', String(v));
  };
  out.replaceChildren(
    h('div.muted.sql-meta', `${fmtInt(r.rows.length)} row${r.rows.length === 1 ? '' : 's'} in ${r.elapsed_ms.toFixed(1)} ms${r.truncated ? ' — truncated' : ''}`),
    h(
      'div.table-wrap',
      h(
        'table.grid#sql-table',
        h('thead', h('tr', r.columns.map((c) => h('th', { title: c.type }, c.name)))),
        h('tbody', r.rows.map((row) => h('tr', row.map(cell)))),
      ),
    ),
  );
}
