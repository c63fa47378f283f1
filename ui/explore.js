// Explore: the hypothesis forest `weft explore` published to this collector (VAIF). One tree
// per request type: its first epoch's groups (root), then each hypothesis — a tracepoint
// enabled, by which principle, in which edge — with its two nodes (+ traces with the
// tracepoint, ~ without). Selecting a node shows its groups (count, mean, CV, verdicts), each
// group's top edges with their shares of the variance, and a link to the group's
// representative trace. Findings are highlighted.
import { h, api, errorBox, spinner, fmtDur, fmtInt, fmtAgo, href, replaceParams } from './util.js';

let root = null;
let state = null;

export function mount(el, path, params) {
  root = el;
  state = { rt: params.get('rt') || '', node: params.get('node') || '' };
  const out = h('div.ex-out');
  el.append(h('div.page-pad.ex-page', h('h2', 'Explore', h('span.muted.ex-sub', 'hypothesis forest of weft explore')), out));
  load(out);
}

export function unmount() {
  root = null;
}

async function load(out) {
  out.replaceChildren(spinner());
  let r;
  try {
    r = await api('/api/ui/explore');
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  if (!root) return;
  const f = r && r.forest;
  if (!f || !Object.keys(f.trees || {}).length) {
    out.replaceChildren(
      h(
        'div.empty.ex-empty',
        h('p', 'No hypothesis forest here yet.'),
        h('p', 'A live ', h('code', 'weft explore run --collector URL'), ' publishes its forest to this collector after every epoch; a replay run does with ', h('code', '--publish URL'), '.'),
      ),
    );
    return;
  }
  const trees = Object.values(f.trees);
  if (!f.trees[state.rt]) state.rt = trees[0].request_type;
  const findings = trees.reduce((n, t) => n + t.findings.length, 0);
  const head = h(
    'div.ex-head',
    h('span', `${fmtInt(f.epochs)} epochs · ${trees.length} request types · ${findings} findings`),
    r.updated_unix_ms ? h('span.muted', ` · updated ${fmtAgo(r.updated_unix_ms)}`) : null,
    h('div.ex-always.muted', 'always on: ', (f.always_on || []).join(', ') || '–', f.skeleton && f.skeleton.length ? ` · skeleton: ${f.skeleton.join(', ')}` : ''),
  );
  const detail = h('aside.ex-detail');
  const forestEl = h('div.ex-forest', trees.map((t) => treeView(t, detail)));
  out.replaceChildren(head, h('div.ex-main', forestEl, detail));
  const sel = forestEl.querySelector(`.ex-node[data-rt="${CSS.escape(state.rt)}"][data-node="${CSS.escape(state.node || 'root')}"]`);
  if (sel) sel.click();
  else detail.replaceChildren(h('p.hint', 'Select a node (root, + or ~) to see its groups.'));
}

const PRINCIPLE = { variance: 'high variance', slow: 'consistently slow', key: 'key correlation' };

function findingTracepoints(t) {
  const s = new Set();
  for (const f of t.findings) for (const tp of f.tracepoints.slice(0, 1)) s.add(tp);
  return s;
}

function treeView(t, detail) {
  const found = findingTracepoints(t);
  const kids = new Map();
  for (const hy of t.hypotheses) {
    const k = hy.parent === null || hy.parent === undefined ? 'root' : hy.parent;
    if (!kids.has(k)) kids.set(k, []);
    kids.get(k).push(hy);
  }
  const nodeButton = (label, id, node, title) =>
    h(
      'button.ex-node',
      {
        type: 'button',
        dataset: { rt: t.request_type, node: id },
        title,
        onclick: (e) => select(e.currentTarget, t, id, label, node, detail),
      },
      h('b', label),
      ` ${plural(node.traces, 'trace')} · ${plural(node.groups.length, 'group')}`,
      node.groups.some((g) => g.high_variance) ? h('span.badge.ex-hv', 'high variance') : null,
      node.groups.some((g) => g.consistently_slow) ? h('span.badge.ex-cs', 'slow') : null,
    );
  const seen = new Set();
  const branch = (k) =>
    h(
      'ul.ex-branch',
      (kids.get(k) || []).filter((hy) => !seen.has(hy.id) && seen.add(hy.id)).map((hy) =>
        h(
          'li.ex-hyp',
          { class: found.has(hy.tracepoint) ? 'finding' : '', dataset: { tracepoint: hy.tracepoint, principle: hy.principle } },
          h(
            'div.ex-hyp-head',
            h('span.ex-id', `#${hy.id}`),
            h('span.badge.ex-pr', { class: `p-${hy.principle}` }, PRINCIPLE[hy.principle] || hy.principle),
            'enable ',
            h('code.ex-tp', hy.tracepoint),
            h('span.muted', ` in ${hy.edge[0]} → ${hy.edge[1]} · epoch ${hy.epoch} · group of ${fmtInt(hy.group_traces)}${cvText(hy.group_cv, ', CV ')} · score ${hy.score.toFixed(3)}${hy.key ? ` · key ${hy.key}` : ''}`),
            found.has(hy.tracepoint) ? h('span.badge.ex-found', 'finding') : null,
          ),
          h(
            'div.ex-pair',
            hy.with ? nodeButton('+', `${hy.id}+`, hy.with, `traces of epoch ${hy.with.epoch} with ${hy.tracepoint}`) : h('span.muted.ex-pending', '+ pending'),
            hy.without ? nodeButton('~', `${hy.id}~`, hy.without, `traces of epoch ${hy.without.epoch} without ${hy.tracepoint}`) : h('span.muted.ex-pending', '~ pending'),
          ),
          branch(hy.id),
        ),
      ),
    );
  return h(
    'section.ex-tree',
    { dataset: { rt: t.request_type } },
    h(
      'h3',
      t.request_type,
      h('span.muted', ` ${fmtInt(t.traces)} traces · ${t.hypotheses.length} hypotheses · ${t.findings.length} findings${t.done ? ' · done' : ''}`),
    ),
    t.findings.length ? h('ul.ex-findings', t.findings.map(findingView)) : null,
    t.keys && t.keys.length ? h('ul.ex-keys', t.keys.map(keyView)) : null,
    t.root ? h('div.ex-root', nodeButton('root', 'root', t.root, `the groups of epoch ${t.root.epoch}`)) : null,
    branch('root'),
  );
}

function findingView(f) {
  const what =
    f.key && f.correlation !== undefined && f.correlation !== null
      ? `grows with ${f.key} (r = ${f.correlation.toFixed(2)})`
      : f.share_of_variance !== undefined && f.share_of_variance !== null
        ? `${Math.round(100 * f.share_of_variance)} % of the variance, mean ${fmtDur(f.mean_latency_ns)}`
        : `mean ${fmtDur(f.mean_latency_ns)}`;
  return h(
    'li.ex-finding',
    { dataset: { tracepoint: f.tracepoints[0] || '', principle: f.principle } },
    h('span.badge.ex-pr', { class: `p-${f.principle}` }, PRINCIPLE[f.principle] || f.principle),
    h('code.ex-tp', f.tracepoints.join(' ⊂ ')),
    h('span', ` — ${what} · epoch ${f.epoch}, ${f.enabled} enabled · `),
    h('a.ex-rep', { href: href(['trace', f.group]) }, 'representative trace'),
  );
}

function keyView(k) {
  const levels = (k.levels || []).map((l) => `${l.label}: ${fmtInt(l.count)} × ${fmtDur(l.mean_response_ns)}`).join(', ');
  return h('li.ex-key', h('code', k.key), ` of ${k.tracepoint}: r = ${k.pearson.toFixed(2)} over ${fmtInt(k.traces)} traces`, levels ? h('span.muted', ` · ${levels}`) : null);
}

function plural(n, word) {
  return `${fmtInt(n)} ${word}${n === 1 ? '' : 's'}`;
}

function cvText(cv, prefix = '') {
  return cv === null || cv === undefined ? '' : `${prefix}${(100 * cv).toFixed(1)} %`;
}

function select(btn, t, id, label, node, detail) {
  for (const b of document.querySelectorAll('.ex-node.sel')) b.classList.remove('sel');
  btn.classList.add('sel');
  state.rt = t.request_type;
  state.node = id;
  replaceParams({ rt: state.rt, node: id });
  const title = id === 'root' ? `${t.request_type}: root (epoch ${node.epoch})` : `${t.request_type}: hypothesis #${id.slice(0, -1)}, ${label} (epoch ${node.epoch})`;
  detail.replaceChildren(
    h('h3', title),
    h('p.muted', `${plural(node.traces, 'trace')} in ${plural(node.groups.length, 'group')} (the largest kept)`),
    node.groups.length ? h('div.ex-groups', node.groups.map(groupView)) : h('p.empty', 'No groups.'),
  );
}

function groupView(g, i) {
  return h(
    'div.ex-group',
    { class: `${g.high_variance ? 'hv' : ''} ${g.consistently_slow ? 'cs' : ''}` },
    h(
      'div.ex-group-head',
      h('b', `group ${i + 1}`),
      h('span', ` ${plural(g.count, 'trace')} · mean ${fmtDur(g.mean_ns)} · `),
      h('span.ex-cv', g.cv === null || g.cv === undefined ? 'CV –' : `CV ${cvText(g.cv)}`),
      g.high_variance ? h('span.badge.ex-hv', 'high variance') : null,
      g.consistently_slow ? h('span.badge.ex-cs', 'consistently slow') : null,
      h('a.ex-rep', { href: href(['trace', g.representative]), title: g.representative }, 'representative trace'),
    ),
    h('div.ex-path.muted', g.path.join(' → ')),
    g.top_edges.length
      ? h(
          'table.grid.ex-edges',
          h('thead', h('tr', h('th', 'Edge'), h('th.num', 'Mean'), h('th', 'Share of variance'))),
          h(
            'tbody',
            g.top_edges.map((e) =>
              h(
                'tr.ex-edge',
                h('td', `${e.from} → ${e.to}`),
                h('td.num', fmtDur(e.mean_ns)),
                h(
                  'td.ex-share',
                  h('span.ex-bar', h('span', { class: (e.share || 0) < 0 ? 'neg' : '', style: { width: `${Math.min(100, 100 * Math.abs(e.share || 0))}%` } })),
                  e.share === null || e.share === undefined ? '–' : `${(100 * e.share).toFixed(1)} %`,
                ),
              ),
            ),
          ),
        )
      : null,
  );
}
