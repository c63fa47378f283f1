// EXIST's "Capture" action: asks the collector's control API (POST /api/control/captures, with
// the control token) for a bounded capture of a service's function calls on every agent that
// runs it, then shows the capture's state (queued, running, per agent: calls, spans, error)
// until every targeted agent has answered.
import { h, control, errorBox, fill, fmtInt, tokenField } from './util.js';

/** A capture form for `service`: period, token, button, state. */
export function captureBox(service) {
  const period = h('input.cap-period', { type: 'number', min: 100, max: 2000, step: 100, value: 500, 'aria-label': 'Capture period (ms)' });
  const state = h('div.cap-state');
  const go = async () => {
    const ms = Number(period.value);
    if (!Number.isInteger(ms) || ms < 100 || ms > 2000) {
      state.replaceChildren(errorBox(new Error('The period is 100 to 2000 ms')));
      return;
    }
    state.replaceChildren(h('p.muted', `Capturing ${service} for ${ms} ms…`));
    let c;
    try {
      c = await control('/api/control/captures?wait=3s', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ service, period_ms: ms }),
      });
    } catch (e) {
      state.replaceChildren(errorBox(e));
      return;
    }
    follow(c, state);
  };
  return h(
    'section.d-sec.capture',
    { dataset: { service } },
    h('h4', 'Capture'),
    h('p.muted', 'Record this service\'s function calls for a bounded period on every agent that runs it (EXIST).'),
    h('div.cap-form', h('label.field', h('span', 'Period (ms)'), period), tokenField(), h('button.primary.cap-go', { type: 'button', onclick: go }, 'Capture')),
    state,
  );
}

/** Shows capture `c` and polls it until complete (or the box left the page). */
async function follow(c, state) {
  for (let i = 0; ; i++) {
    show(c, state);
    if (c.complete || !state.isConnected || i >= 20) return;
    await new Promise((r) => setTimeout(r, 500));
    try {
      c = await control(`/api/control/captures/${c.id}`);
    } catch (e) {
      state.replaceChildren(errorBox(e));
      return;
    }
  }
}

function show(c, state) {
  const targets = c.targets || [];
  const results = c.results || [];
  const phase = c.complete ? 'complete' : targets.length ? 'running' : 'queued';
  state.dataset.capture = String(c.id);
  state.dataset.state = phase;
  fill(
    state,
    h('p.cap-phase', h('b', `capture #${c.id}: ${phase}`), ` · ${targets.length} agent${targets.length === 1 ? '' : 's'} targeted, ${results.length} answered`),
    c.warning ? h('p.warn', c.warning) : null,
    results.length
      ? h(
          'table.kv.cap-results',
          h(
            'tbody',
            results.map((r) =>
              h(
                'tr',
                { dataset: { agent: r.agent } },
                h('th', r.agent),
                h('td', r.error ? h('span.err', r.error) : `${fmtInt(r.calls)} calls, ${fmtInt(r.spans)} spans (${fmtInt(r.in_requests)} inside requests), pids ${(r.pids || []).join(', ') || '–'}`),
              ),
            ),
          ),
        )
      : null,
  );
}
