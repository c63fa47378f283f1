// Live queries (Fay): start a query that runs inside the agents' processes (POST
// /api/control/queries, with the control token), watch its per-window results refresh
// (GET /api/control/queries/{id}/results every second: the latest windows, the total, each
// agent's state) and stop it (DELETE /api/control/queries/{id}). The queries this collector
// knows, running and ended, are listed to watch.
import { h, control, errorBox, fill, fmtInt, fmtTime, href, replaceParams, tokenField } from './util.js';

const EXAMPLE = "SELECT count(*) FROM tp('blocker.write') INTERVAL 1s";
const REFRESH_MS = 1000;

let root = null;
let timer = null;

export function mount(el, path, params) {
  root = el;
  const ta = h('textarea#live-input', { spellcheck: 'false', rows: 4, 'aria-label': 'Live query' });
  ta.value = params.get('text') || EXAMPLE;
  const list = h('div.live-list');
  const out = h('div.live-out');
  const start = async () => {
    out.replaceChildren(h('p.muted', 'Deploying to the agents…'));
    let r;
    try {
      r = await control('/api/control/queries?wait=2s', { method: 'POST', body: ta.value, headers: { 'content-type': 'text/plain' } });
    } catch (e) {
      out.replaceChildren(errorBox(e));
      return;
    }
    if (!root) return;
    if (r.id === undefined) {
      out.replaceChildren(h('pre.live-explain', r.explain || JSON.stringify(r)));
      return;
    }
    replaceParams({ id: String(r.id) });
    watch(r.id, out, list);
  };
  el.append(
    h(
      'div.page-pad.live-page',
      h('h2', 'Live queries'),
      h('p.muted', 'A query over running processes\' tracepoints (tp(\'name\')), filtered and aggregated inside them, merged per machine and across the cluster, one result per window. EXPLAIN shows the plan.'),
      h('div.live-form', tokenField(), ta, h('div.actions', h('button.primary#live-start', { type: 'button', onclick: start }, 'Start'), h('button#live-refresh', { type: 'button', onclick: () => listQueries(list, out) }, 'List queries'))),
      list,
      out,
    ),
  );
  const id = params.get('id');
  if (id) watch(Number(id), out, list);
}

export function unmount() {
  root = null;
  clearTimeout(timer);
  timer = null;
}

async function listQueries(list, out) {
  let r;
  try {
    r = await control('/api/control/queries');
  } catch (e) {
    list.replaceChildren(errorBox(e));
    return;
  }
  if (!root) return;
  list.replaceChildren(
    r.queries.length
      ? h(
          'table.grid.live-queries',
          h('thead', h('tr', ['id', 'query', 'state', 'windows', ''].map((c) => h('th', c)))),
          h('tbody', r.queries.map((q) => h('tr', { dataset: { id: String(q.id) } }, h('td', String(q.id)), h('td', h('code', q.query)), h('td', q.state), h('td.num', fmtInt(q.windows)), h('td', h('button', { type: 'button', onclick: () => (replaceParams({ id: String(q.id) }), watch(q.id, out, list)) }, 'Watch'))))),
        )
      : h('p.muted', 'No live queries on this collector.'),
    h('p.muted', `${r.agents.length} agent${r.agents.length === 1 ? '' : 's'} in the exchange`),
  );
}

/** Shows query `id`'s results, refreshing every second until it ended (or the view left). */
function watch(id, out, list) {
  clearTimeout(timer);
  const stop = async (btn) => {
    btn.disabled = true;
    try {
      await control(`/api/control/queries/${id}?wait=2s`, { method: 'DELETE' });
    } catch (e) {
      out.prepend(errorBox(e));
      btn.disabled = false;
      return;
    }
    listQueries(list, out);
    tick();
  };
  const tick = async () => {
    let r;
    try {
      r = await control(`/api/control/queries/${id}/results?windows=5`);
    } catch (e) {
      if (root) out.replaceChildren(errorBox(e));
      return;
    }
    if (!root) return;
    render(r, out, stop);
    if (r.state === 'running') timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

function render(r, out, stop) {
  const running = r.state === 'running';
  const table = (rows, cls) =>
    h(
      `table.grid.${cls}`,
      h('thead', h('tr', r.columns.map((c) => h('th', c)))),
      h('tbody', rows.map((row) => h('tr', row.map((v) => (typeof v === 'number' ? h('td.num', fmtInt(v)) : h('td', v === null ? '–' : typeof v === 'object' ? JSON.stringify(v) : String(v))))))),
    );
  fill(
    out,
    h(
      'div.live-head',
      { dataset: { id: String(r.id), state: r.state } },
      h('b', `query #${r.id}: ${r.state}`),
      ` · every ${fmtInt(r.interval_ms)} ms · ${fmtInt(r.windows_closed)} windows closed`,
      running ? h('button.live-stop', { type: 'button', onclick: (e) => stop(e.target) }, 'Stop') : null,
    ),
    h('p', h('code', r.query)),
    h('div.live-agents', r.agents.map((a) => h('span.chip', { dataset: { agent: a.agent, state: a.state } }, `${a.agent}: ${a.state}`))),
    r.failures && r.failures.length ? h('div.warn', r.failures.map((f) => h('div', typeof f === 'string' ? f : JSON.stringify(f)))) : null,
    h('h3', 'Latest windows'),
    r.windows.length
      ? r.windows.map((w) =>
          h(
            'section.live-window',
            { dataset: { start: String(w.start_ns), events: String(w.result.events) } },
            h('h4', `${fmtTime(w.start_ns / 1e6)} · ${fmtInt(w.result.events)} events · ${w.agents.length} agents`, w.missing.length ? h('span.warn', ` · missing ${w.missing.join(', ')}`) : ''),
            table(w.result.rows, 'live-rows'),
          ),
        )
      : h('p.muted', 'No window closed yet.'),
    h('h3', 'Total'),
    h('div.live-total', { dataset: { events: String(r.total.events) } }, table(r.total.rows, 'live-rows')),
    h('p.muted', `${fmtInt(r.partial_bytes)} bytes of partials received · ${fmtInt(r.late_partials)} late · ${fmtInt(r.refused_partials)} refused`),
    h('p', h('a', { href: href(['live'], {}) }, 'New query')),
  );
}
