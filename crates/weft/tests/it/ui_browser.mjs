// Drives weft's web UI in headless Chromium (Debian's chromium, through playwright-core) against
// a running `weft serve`. Started by tests/it/ui.rs, which loads the data and passes, in the
// environment: WEFT_UI_TEST (JSON: url, shots, trace ids), WEFT_NODE_MODULES.
// Prints `ok <step>` per passed step and `metric <name> <value>` lines; exits 1 on the first
// failure (after a screenshot of the page as it was).
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';

const cfg = JSON.parse(process.env.WEFT_UI_TEST || '{}');
const require = createRequire(`${process.env.WEFT_NODE_MODULES}/`);
const { chromium } = require('playwright-core');

mkdirSync(cfg.shots, { recursive: true });
// A fresh profile directory (playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(cfg.profile, {
  executablePath: cfg.chromium || '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-dev-shm-usage',
  ],
  viewport: { width: 1440, height: 900 },
  colorScheme: 'light',
});
const page = browser.pages()[0] || (await browser.newPage());
const consoleErrors = [];
page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
page.setDefaultTimeout(30000);

let step = '';
const shot = (name) => page.screenshot({ path: `${cfg.shots}/${name}.png` });
const ok = (what) => console.log(`ok ${what}`);
const metric = (name, value) => console.log(`metric ${name} ${typeof value === 'number' ? value.toFixed(1) : value}`);
function check(cond, msg) {
  if (!cond) throw new Error(`${step}: ${msg}`);
}
async function go(hash) {
  await page.goto(`${cfg.url}/${hash}`);
}
// A rendered part shows no value the DOM printed for want of an element ("null", "[object …]").
async function noStrayText(sel) {
  const text = await page.locator(sel).first().innerText();
  check(!/\bnull\b|\[object /.test(text), `${sel} shows a stray value: ${JSON.stringify(text)}`);
}
async function traceReady(id) {
  await page.waitForFunction((id) => {
    const v = window.__weftTraceView && window.__weftTraceView();
    return v && v.id === id && document.querySelector('.waterfall[data-ready]');
  }, id);
}
// Clicks a waterfall row by the text of its service/component and span name.
async function clickRow(svc, name) {
  const row = page.locator('.row', { has: page.locator('.svc', { hasText: new RegExp(`^${svc}$`) }) }).filter({ has: page.locator('.nm', { hasText: new RegExp(`^${name}$`) }) }).first();
  await row.locator('.nm').click();
  await page.waitForSelector('aside.detail:not([hidden]) dl.d-facts');
}
async function selectedName() {
  return page.evaluate(() => {
    const r = document.querySelector('.row.sel');
    return r ? `${r.querySelector('.svc').textContent}: ${r.querySelector('.nm').textContent}` : null;
  });
}
// In the open span detail, follows the incoming caused_by link (from the component the request
// went to next).
async function follow(toTrace, expectSel) {
  await page.locator('aside.detail li.link', { hasText: '← caused_by' }).first().locator('button.follow').click();
  await traceReady(toTrace);
  await page.waitForSelector('.row.sel');
  await page.waitForSelector('aside.detail:not([hidden]) dl.d-facts');
  const sel = await selectedName();
  check(sel === expectSel, `after following: selected ${sel}, expected ${expectSel}`);
}

try {
  // 1. Search: the recent traces, sorted longest first; filter by service.
  step = 'search';
  await go('#/search?lookback=all&limit=100');
  await page.waitForSelector('.trace-item');
  const n = await page.locator('.trace-item').count();
  check(n >= 50, `expected ≥ 50 results, got ${n}`);
  const durs = await page.$$eval('.t-dur', (e) => e.map((x) => x.textContent));
  check(durs.length === n, 'every result shows a duration');
  const sorted = await page.evaluate(async () => {
    const r = await (await fetch('/api/ui/search?lookback=all&limit=100')).json();
    const d = r.traces.map((t) => t.durationNs).sort((a, b) => b - a);
    return d;
  });
  check(sorted[0] >= sorted[sorted.length - 1], 'durations');
  const firstId = await page.locator('.trace-item').first().getAttribute('data-trace');
  const firstIsLongest = await page.evaluate(async (id) => {
    const r = await (await fetch('/api/ui/search?lookback=all&limit=100')).json();
    const max = Math.max(...r.traces.map((t) => t.durationNs));
    return r.traces.find((t) => t.traceId === id).durationNs === max;
  }, firstId);
  check(firstIsLongest, 'default sort puts the longest trace first');
  await shot('01-search');
  ok('search lists traces, longest first');
  await page.selectOption('#sort', 'newest');
  check((await page.locator('.trace-item').count()) === n, 'sorting keeps the results');
  // Breakdown across the search result (the big trace is left out: a shop-only search).
  await go('#/search?service=frontend&lookback=all&limit=60&bd=service');
  await page.waitForSelector('.bd-row');
  const bdRows = await page.locator('.bd-row').count();
  const items = await page.locator('.trace-item').count();
  check(bdRows === items && items > 10, `one breakdown bar per result (${bdRows} of ${items})`);
  check((await page.locator('.breakdown .bd-dir').count()) === 1, 'without rules: one direction bar');
  await page.click('.breakdown [data-by="component"]');
  await page.waitForSelector('.breakdown [data-by="component"].on');
  check(page.url().includes('bd=component'), 'rows-by is in the URL');
  // One direction per root span (a preset built from the result).
  await page.click('.breakdown [data-preset="root"]');
  await page.waitForFunction(() => (document.querySelector('.breakdown')?.dataset.directions || '').split(',').length > 1);
  const shopDirs = await page.$eval('.breakdown', (e) => e.dataset.directions.split(','));
  check(shopDirs.includes('POST /api/checkout'), `directions per root span: ${shopDirs}`);
  check((await page.locator('.breakdown .bd-bars .bd-dir').count()) === shopDirs.length, 'one bar per direction');
  check(page.url().includes('bdr='), 'the rules are in the URL');
  await page.locator('.breakdown .bd-bars .bd-dir', { hasText: 'POST /api/checkout' }).click();
  await page.waitForSelector('.breakdown table.bd-stats caption:has-text("POST /api/checkout")');
  const tip = await page.locator('.breakdown .bd-bars .bd-dir.on .stack span').first().getAttribute('title');
  check(/mean .* median .* p95 .* share/.test(tip), `segment tooltip: ${tip}`);
  await shot('01b-search-breakdown');
  ok(`breakdown across the search result (${shopDirs.length} directions by root span)`);
  await go('#/search?service=checkout&lookback=all&limit=20');
  await page.waitForSelector('.trace-item');
  const chips = await page.$$eval('.trace-item', (items) => items.map((i) => i.textContent.includes('checkout')));
  check(chips.length > 0 && chips.every(Boolean), 'every result for service=checkout involves checkout');
  await go('#/search?attrs=http.route%3D%2Fapi%2Fcheckout&lookback=all&limit=20');
  await page.waitForSelector('.trace-item, .empty');
  const roots = await page.$$eval('.t-root', (e) => e.map((x) => x.textContent));
  check(roots.length > 0 && roots.every((r) => r.includes('/api/checkout')), `attribute search: ${roots.slice(0, 3)}`);
  ok('search by service and by attribute');

  // 2. Open a trace from the results; expand / collapse.
  step = 'open trace';
  await go('#/search?service=frontend&name=' + encodeURIComponent('POST /api/checkout') + '&lookback=all&limit=50');
  await page.waitForSelector('.trace-item');
  const tid = await page.locator('.trace-item').first().getAttribute('data-trace');
  await page.locator('.trace-item a.trace-link').first().click();
  await traceReady(tid);
  const total = await page.evaluate(() => window.__weftTraceView().rows);
  check(total >= 5, `trace has ${total} rows`);
  await shot('02-trace');
  ok(`open trace (${total} rows)`);
  step = 'expand/collapse';
  await page.locator('.row[data-row="0"] .tog').click();
  check((await page.evaluate(() => window.__weftTraceView().rows)) === 1, 'collapsing the root leaves one row');
  await shot('03-trace-collapsed');
  await page.locator('.row[data-row="0"] .tog').click();
  check((await page.evaluate(() => window.__weftTraceView().rows)) === total, 'expanding restores every row');
  ok('collapse and expand');

  // 3. Critical path.
  step = 'critical path';
  const crit = await page.locator('.row.crit').count();
  const segs = await page.locator('.bar .cseg').count();
  check(crit >= 2 && segs >= 2, `critical rows ${crit}, sections ${segs}`);
  const cpApi = await page.evaluate(async (id) => (await (await fetch(`/api/ui/trace/${id}`)).json()).critical.length, tid);
  check(cpApi === segs, `every critical section drawn (${segs} of ${cpApi})`);
  await page.click('#cp-toggle');
  check((await page.locator('.bar .cseg').count()) === 0, 'toggle hides the critical path');
  await page.click('#cp-toggle');
  await page.click('#only-cp');
  const onlyRows = await page.evaluate(() => window.__weftTraceView().rows);
  check(onlyRows >= 1 && onlyRows <= total, 'only-critical filter');
  await page.click('#only-cp');
  ok(`critical path: ${crit} rows, ${segs} sections`);

  // 4. Span detail: attributes and annotations.
  step = 'span detail';
  await page.locator('.row[data-row="1"] .nm').click();
  await page.waitForSelector('aside.detail:not([hidden]) table.kv');
  const attrs = await page.locator('aside.detail table.kv tr').count();
  check(attrs >= 3, `detail shows attributes (${attrs})`);
  check(page.url().includes('span='), 'the selected span is in the URL');
  await shot('04-span-detail');
  // The URL alone reproduces the view.
  const shared = page.url();
  await page.goto('about:blank');
  await page.goto(shared);
  await traceReady(tid);
  await page.waitForSelector('aside.detail:not([hidden]) table.kv');
  check((await page.locator('.row.sel').count()) === 1, 'shared URL restores the selection');
  ok('span detail and sharable URL');

  // 5. Zoom.
  step = 'zoom';
  await page.click('#zoom-in');
  check(page.url().includes('z='), 'zoom is in the URL');
  await page.click('#zoom-reset');
  ok('zoom');

  // 6. Follow a request host → NIC → network → NIC → host across four traces.
  step = 'follow caused_by links';
  const w = cfg.woven;
  await go(`#/trace/${w.client}`);
  await traceReady(w.client);
  const arrows = await page.locator('svg.wf-links path.lk').count();
  check(arrows >= 3, `same-trace caused_by arrows drawn (${arrows})`);
  await clickRow('host0', 'mmio_write TDT');
  await shot('05-woven-client-host');
  await clickRow('nic0', 'tx');
  check((await page.locator('aside.detail li.link', { hasText: 'mmio_write TDT' }).count()) >= 1, 'NIC tx names the MMIO write that caused it');
  await clickRow('nic0', 'eth_tx');
  await follow(w.requestNet, 'ns3: packet host0 → host1');
  await shot('06-woven-network');
  await clickRow('ns3/link sw1-h', 'propagate');
  await follow(w.server, 'nic1: rx');
  await shot('07-woven-server-nic');
  await clickRow('nic1', 'msix_interrupt');
  await page.locator('aside.detail li.link', { hasText: 'irq' }).locator('button.follow').click();
  await page.waitForFunction(() => document.querySelector('.row.sel .nm')?.textContent.startsWith('irq'));
  check((await selectedName()) === 'host1: irq i40e_msix_clean_rings', 'NIC interrupt → host interrupt handler');
  await clickRow('nic1', 'eth_tx');
  await follow(w.responseNet, 'ns3: packet host1 → host0');
  await clickRow('ns3/link sw1-h', 'propagate');
  await follow(w.client, 'nic0: rx');
  await shot('08-woven-back-at-client');
  // Breakdown of this request's critical path by component.
  await page.click('#bd-toggle');
  await page.waitForSelector('.breakdown .stack span');
  const bdKeys = await page.$eval('.breakdown', (e) => e.dataset.keys.split(','));
  check(bdKeys.includes('host0') && bdKeys.includes('nic0'), `breakdown parts ${bdKeys}`);
  await shot('08b-woven-breakdown');
  await page.click('#bd-toggle');
  ok('followed caused_by links host0 → nic0 → ns3 → nic1 → host1 → nic1 → ns3 → nic0');
  // Badges on rows follow too.
  await clickRow('nic0', 'rx');
  await page.locator('.row.sel .b-link').first().click();
  await traceReady(w.responseNet);
  ok('row link badge follows across traces');

  // 6b. Really woven traces (`weft weave` on the SimBricks ping): follow one request
  // host → NIC → network → NIC → host through the real caused_by links inside the trace.
  step = 'real woven trace';
  const pg = cfg.ping;
  await go('#/search?component=server-nic&lookback=all&limit=50');
  await page.waitForSelector('.trace-item');
  const pingItems = await page.$$eval('.trace-item', (e) => e.map((x) => x.dataset.trace));
  check(pingItems.length === pg.rounds && pg.traces.every((t) => pingItems.includes(t)), `search by component server-nic: ${pingItems.length} traces`);
  await go(`#/trace/${pg.trace}`);
  await traceReady(pg.trace);
  const pingArrows = await page.locator('svg.wf-links path.lk').count();
  check(pingArrows >= 5, `caused_by arrows inside the woven trace (${pingArrows})`);
  const followHere = async (expectSel) => {
    await page.locator('aside.detail li.link', { hasText: '← caused_by' }).first().locator('button.follow').click();
    await page.waitForFunction((want) => {
      const r = document.querySelector('.row.sel');
      return r && `${r.querySelector('.svc').textContent}: ${r.querySelector('.nm').textContent}` === want;
    }, expectSel);
    await page.waitForSelector('aside.detail:not([hidden]) dl.d-facts');
  };
  await clickRow('client', 'HostMmio');
  await followHere('client-nic: NicMmio');
  check((await page.locator('aside.detail li.link', { hasText: 'caused_by →' }).count()) >= 1, 'the NIC MMIO names its cause');
  await clickRow('client-nic', 'NicEth');
  await followHere('ns3/sw0: NetDevice');
  await shot('06b-ping-first-hop');
  // The packet's hops chain parent → child: walk them with the keyboard.
  await page.focus('.wf-scroll');
  for (const want of ['ns3/sw0: NetDevice', 'ns3/sw1: NetDevice', 'ns3/sw1: NetDevice']) {
    await page.keyboard.press('ArrowDown');
    await page.waitForFunction((w) => {
      const r = document.querySelector('.row.sel');
      return r && `${r.querySelector('.svc').textContent}: ${r.querySelector('.nm').textContent}` === w;
    }, want);
  }
  await page.waitForSelector('aside.detail:not([hidden]) table.kv');
  await page.waitForFunction(() => document.querySelector('aside.detail')?.textContent.includes('to_adapter'));
  await followHere('server-nic: NicEth');
  await followHere('server: i40e_msix_clean_rings');
  await shot('06c-ping-server-host');
  ok('real woven trace: followed caused_by links client → client-nic → ns3/sw0 → ns3/sw1 → server-nic → server');
  // The Columbo breakdown of this woven trace: hosts, NICs, switches and wire.
  step = 'woven breakdown';
  await page.click('#bd-toggle');
  await page.waitForSelector('.breakdown .bd-trace .stack span');
  const pingKeys = await page.$eval('.breakdown', (e) => e.dataset.keys.split(','));
  for (const k of ['client', 'client-nic', 'ns3/sw0', 'ns3/sw1', 'server-nic', 'server', 'wire']) check(pingKeys.includes(k), `breakdown row ${k} in ${pingKeys}`);
  check((await page.locator('.breakdown table.bd-one tr.wire').count()) === 1, 'one wire row, drawn as wire');
  check((await page.locator('.breakdown .bd-trace .stack span.wire').count()) === 1, 'the wire segment is hatched');
  await shot('08c-ping-breakdown');
  await page.click('#bd-wire');
  await page.waitForSelector('.breakdown table.bd-one tr[data-name="wire client→client-nic"]');
  const links = await page.locator('.breakdown table.bd-one tr.wire').count();
  check(links >= 5, `wire per link: ${links} links`);
  check(page.url().includes('bdw=link'), 'wire per link is in the URL');
  await shot('08d-ping-breakdown-per-link');
  await page.click('#bd-wire');
  await page.waitForSelector('.breakdown table.bd-one tr.wire[data-name="wire"]');
  await page.click('.breakdown [data-preset="flow"]');
  await page.waitForFunction(() => document.querySelector('.breakdown')?.dataset.directions === 'request,response');
  check((await page.locator('.breakdown .bd-bars .bd-dir').count()) === 2, 'request and response halves of this trace');
  await shot('08e-ping-breakdown-directions');
  ok(`woven breakdown: ${pingKeys.length} rows, wire per link, request / response`);
  // Across all woven pings: one bar per direction with mean/median/p95 per component.
  await go('#/search?component=server-nic&lookback=all&limit=50&bd=component');
  await page.waitForSelector('.bd-row');
  check((await page.locator('.bd-row').count()) === pg.rounds, 'one bar per woven trace');
  await page.click('.breakdown [data-preset="flow"]');
  await page.waitForFunction(() => document.querySelector('.breakdown')?.dataset.directions === 'request,response');
  const req = await page.$$eval('.breakdown table.bd-stats tbody tr', (rows) => rows.map((r) => [r.dataset.name || 'end-to-end', [...r.querySelectorAll('td.num')].map((t) => t.textContent)]));
  const sw0 = req.find((r) => r[0] === 'ns3/sw0');
  check(sw0 && sw0[1].length >= 6, `request table row for ns3/sw0: ${JSON.stringify(sw0)}`);
  check(req.some((r) => r[0] === 'wire') && req.some((r) => r[0] === 'end-to-end'), 'wire and end-to-end rows');
  // Requests queue in sw0's uplink (the scenario varies it per round); responses pass sw0 at once.
  check(sw0[1][0] !== '0 ns', `requests spend time in sw0: mean ${sw0[1][0]}`);
  await shot('08f-ping-search-breakdown');
  await page.locator('.breakdown .bd-bars .bd-dir', { hasText: 'response' }).click();
  await page.waitForSelector('.breakdown table.bd-stats caption:has-text("response")');
  const respSw0 = await page.$$eval('.breakdown table.bd-stats tbody tr[data-name="ns3/sw0"] td.num', (t) => t.map((x) => x.textContent));
  check(respSw0[0] === '0 ns', `responses pass sw0 without queueing: mean ${respSw0[0]}`);
  ok(`woven breakdown across ${pg.rounds} traces: request / response, ${req.length} rows`);

  // 7. SQL console.
  step = 'sql';
  await go('#/sql');
  await page.fill('#sql-input', 'SELECT service_name, count(*) AS spans FROM spans GROUP BY 1 ORDER BY 2 DESC');
  await page.click('#sql-run');
  await page.waitForSelector('#sql-table tbody tr');
  const sqlRows = await page.locator('#sql-table tbody tr').count();
  const sqlText = await page.locator('#sql-table').textContent();
  check(sqlRows >= 10 && sqlText.includes('frontend') && sqlText.includes('nic0'), `SQL rows ${sqlRows}`);
  await shot('09-sql');
  await page.fill('#sql-input', 'SELECT nope FROM spans');
  await page.click('#sql-run');
  await page.waitForSelector('.sql-out .error');
  // The deliberate error above logs its 400 in the console; only unexpected errors count.
  consoleErrors.splice(0, consoleErrors.length, ...consoleErrors.filter((e) => !e.includes('status of 400')));
  ok(`sql (${sqlRows} rows; errors shown)`);

  // 8. Dependency graph.
  step = 'dependencies';
  await go('#/deps?by=service&lookback=all');
  await page.waitForSelector('.dep-node');
  const nodes = await page.locator('.dep-node').count();
  check(nodes >= 10, `service graph nodes ${nodes}`);
  await shot('10-deps-service');
  await go('#/deps?by=component&lookback=all');
  await page.waitForSelector('.dep-node');
  const caused = await page.locator('.dep-edge.caused').count();
  const compText = await page.locator('.deps-svg').textContent();
  check(caused >= 4 && compText.includes('ns3/sw0'), `component graph: ${caused} caused_by edges`);
  await shot('11-deps-component');
  ok(`dependency graphs (${nodes} services, ${caused} caused_by edges by component)`);

  // 9. Compare two traces.
  step = 'compare';
  await go(`#/compare?a=${cfg.compare[0]}&b=${cfg.compare[1]}`);
  await page.waitForSelector('table.cmp-table tbody tr');
  const cmpRows = await page.locator('table.cmp-table tbody tr').count();
  const changed = await page.locator('table.cmp-table tbody .chg:not(.same)').count();
  check(cmpRows >= 5 && changed >= 1, `compare rows ${cmpRows}, changed ${changed}`);
  await shot('12-compare');
  await page.click('.filters [data-f="changed"]');
  const cmpChanged = await page.locator('table.cmp-table tbody tr').count();
  check(cmpChanged === changed, 'the changed filter shows only changed rows');
  ok(`compare (${cmpRows} paths, ${changed} changed)`);

  // 9b. Explore: the hypothesis forest a replay run published; a node's groups; a representative.
  step = 'explore';
  await go('#/explore');
  await page.waitForSelector('.ex-tree');
  for (const tp of cfg.explore) {
    check((await page.locator(`.ex-finding[data-tracepoint="${tp}"]`).count()) >= 1, `finding ${tp} listed`);
    check((await page.locator(`.ex-hyp.finding[data-tracepoint="${tp}"]`).count()) >= 1, `the tree highlights the hypothesis enabling ${tp}`);
  }
  check((await page.locator('nav a.active[data-nav="explore"]').count()) === 1, 'Explore is the active nav entry');
  // The + node of the hypothesis that enabled the variance problem's tracepoint.
  const hyp = page.locator(`.ex-hyp.finding[data-tracepoint="${cfg.explore[0]}"]`).first();
  await hyp.locator(':scope > .ex-pair .ex-node[data-node$="+"]').click();
  await page.waitForSelector('.ex-detail .ex-group');
  const groups = await page.locator('.ex-detail .ex-group').count();
  const cvs = await page.$$eval('.ex-detail .ex-cv', (e) => e.map((x) => x.textContent));
  check(groups >= 1 && cvs.some((c) => /^CV \d+(\.\d)? %$/.test(c)), `groups with CV: ${cvs}`);
  const shares = await page.locator('.ex-detail .ex-edge .ex-bar span').count();
  check(shares >= 1, 'edges with variance-share bars');
  check(/node=\d+%2B|node=\d+\+/.test(page.url()), `the selected node is in the URL: ${page.url()}`);
  await shot('19-explore');
  const rep = page.locator('.ex-detail a.ex-rep').first();
  const repId = (await rep.getAttribute('href')).split('/').pop();
  await rep.click();
  await traceReady(repId);
  const repRows = await page.evaluate(() => window.__weftTraceView().rows);
  check(repRows >= 3, `the representative trace opens (${repRows} rows)`);
  await shot('20-explore-representative');
  ok(`explore: ${cfg.explore.length} findings in the forest, ${groups} groups with CV, representative trace opens`);

  // 10. Dark theme.
  step = 'theme';
  await go(`#/trace/${w.client}`);
  await traceReady(w.client);
  await page.click('#theme');
  check((await page.evaluate(() => document.documentElement.dataset.theme)) === 'dark', 'dark theme');
  await clickRow('nic0', 'tx');
  await shot('13-trace-dark');
  await go(`#/compare?a=${cfg.compare[0]}&b=${cfg.compare[1]}`);
  await page.waitForSelector('table.cmp-table tbody tr');
  await shot('14-compare-dark');
  await go('#/search?lookback=all&limit=30');
  await page.waitForSelector('.trace-item');
  await shot('15-search-dark');
  await page.click('#theme');
  ok('light and dark themes');

  // 11. A 100,000-span trace: time to first render, scrolling frame times.
  step = 'large trace';
  await go('#/search');
  const t0 = Date.now();
  await page.evaluate((id) => (location.hash = `#/trace/${id}`), cfg.big);
  await traceReady(cfg.big);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  const firstRender = Date.now() - t0;
  const tm = await page.evaluate(() => window.__weftTrace);
  check(tm.spans === cfg.bigSpans, `big trace has ${tm.spans} spans`);
  metric('big_trace_spans', tm.spans);
  metric('big_trace_first_render_ms', firstRender);
  for (const k of ['fetchMs', 'parseMs', 'prepareMs', 'renderMs']) metric(`big_trace_${k}`, tm.timings[k]);
  metric('big_trace_json_mb', tm.timings.bytes / 1e6);
  const domRows = await page.locator('.row').count();
  check(domRows < 200, `virtualized: ${domRows} row elements for ${tm.spans} spans`);
  await shot('16-big-trace');
  // Scroll: one screen per frame for 240 frames, then random jumps; record frame intervals.
  const frames = await page.evaluate(async () => {
    window.__weftProfile = [];
    const sc = document.querySelector('.wf-scroll');
    const out = { intervals: [], work: [] };
    let last = performance.now();
    for (let f = 0; f < 240; f++) {
      const t = performance.now();
      sc.scrollTop += sc.clientHeight;
      sc.dispatchEvent(new Event('scroll'));
      out.work.push(performance.now() - t);
      await new Promise((r) => requestAnimationFrame(r));
      const now = performance.now();
      out.intervals.push(now - last);
      last = now;
    }
    for (let f = 0; f < 60; f++) {
      sc.scrollTop = Math.random() * (sc.scrollHeight - sc.clientHeight);
      await new Promise((r) => requestAnimationFrame(r));
      const now = performance.now();
      out.intervals.push(now - last);
      last = now;
    }
    out.render = window.__weftProfile;
    window.__weftProfile = null;
    return out;
  });
  const q = (a, p) => {
    const s = [...a].sort((x, y) => x - y);
    return s[Math.min(s.length - 1, Math.floor(p * s.length))];
  };
  metric('big_trace_scroll_frames', frames.intervals.length);
  metric('big_trace_scroll_frame_p50_ms', q(frames.intervals, 0.5));
  metric('big_trace_scroll_frame_p95_ms', q(frames.intervals, 0.95));
  metric('big_trace_scroll_frame_max_ms', Math.max(...frames.intervals));
  metric('big_trace_scroll_render_js_p50_ms', q(frames.render, 0.5));
  metric('big_trace_scroll_render_js_p95_ms', q(frames.render, 0.95));
  // The bottom renders the last span.
  await page.evaluate(() => {
    const sc = document.querySelector('.wf-scroll');
    sc.scrollTop = sc.scrollHeight;
  });
  await page.waitForFunction((n) => [...document.querySelectorAll('.row')].some((r) => r.style.display !== 'none' && +r.dataset.row === n - 1), cfg.bigSpans);
  await shot('17-big-trace-bottom');
  // Collapse and expand the root of 100,000 spans.
  await page.evaluate(() => (document.querySelector('.wf-scroll').scrollTop = 0));
  await page.waitForSelector('.row[data-row="0"]');
  const tc = Date.now();
  await page.locator('.row[data-row="0"] .tog').click();
  check((await page.evaluate(() => window.__weftTraceView().rows)) === 1, 'collapse the big root');
  await page.locator('.row[data-row="0"] .tog').click();
  check((await page.evaluate(() => window.__weftTraceView().rows)) === cfg.bigSpans, 'expand the big root');
  metric('big_trace_collapse_expand_ms', Date.now() - tc);
  // Critical path on the big trace.
  check((await page.locator('.row.crit').count()) >= 1, 'critical path shown on the big trace');
  await page.fill('#find', 'compact block');
  await page.press('#find', 'Enter');
  await page.waitForSelector('aside.detail:not([hidden]) dl.d-facts');
  await shot('18-big-trace-find');
  ok('100,000-span trace opens, scrolls, collapses');

  // 11. Live queries: start one with the control token, watch its windows fill, stop it.
  step = 'live query';
  await go('#/live');
  check((await page.locator('nav a.active[data-nav="live"]').count()) === 1, 'Live is the active nav entry');
  await page.fill('input.token', cfg.live.token);
  await page.fill('#live-input', cfg.live.query);
  await page.click('#live-start');
  await page.waitForSelector('.live-head[data-state="running"]');
  check(/[?&]id=\d+/.test(page.url()), 'the watched query is in the URL');
  // The total merges closed windows only, so the render that first shows all the events also
  // lists the window(s) holding them among the latest (later, the agent's empty windows push
  // them out of the five shown): read both from that one render.
  const live = await (
    await page.waitForFunction(
      (n) => {
        const total = document.querySelector(`.live-total[data-events="${n}"]`);
        if (!total) return null;
        const cells = (el) => [...el.querySelectorAll('tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
        return { total: cells(total), windows: [...document.querySelectorAll('.live-window')].map((w) => ({ events: Number(w.dataset.events), rows: cells(w) })) };
      },
      cfg.live.events,
      { timeout: 60000 },
    )
  ).jsonValue();
  const perKind = cfg.live.events / cfg.live.kinds.length;
  for (const k of cfg.live.kinds) {
    const row = live.total.find((r) => r[0] === k);
    check(row && row[1] === String(perKind), `total row for ${k}: ${JSON.stringify(live.total)}`);
  }
  const withEvents = live.windows.filter((w) => w.events > 0);
  const inWindows = withEvents.reduce((n, w) => n + w.events, 0);
  check(inWindows === cfg.live.events, `the closed windows listed hold the ${cfg.live.events} events: ${JSON.stringify(live.windows)}`);
  for (const k of cfg.live.kinds) {
    const n = withEvents.flatMap((w) => w.rows).filter((r) => r[0] === k).reduce((a, r) => a + Number(r[1]), 0);
    check(n === perKind, `count(*) of ${k} over the windows listed: ${JSON.stringify(live.windows)}`);
  }
  check((await page.locator(`.live-agents .chip[data-agent="${cfg.live.agent}"]`).count()) === 1, 'the agent and its state shown');
  await noStrayText('.live-out');
  await shot('21-live-query');
  await page.click('.live-stop');
  await page.waitForSelector('.live-head[data-state="removed"]');
  await page.click('#live-refresh');
  await page.waitForSelector('table.live-queries tbody tr');
  ok(`live query: started, ${cfg.live.events} events over ${cfg.live.kinds.length} groups in its windows, stopped`);

  // 12. Capture: from a trace's SERVER span, then from a service chosen in the search form.
  step = 'capture';
  await go(`#/trace/${cfg.capture.trace}?span=${cfg.capture.span}`);
  const box = page.locator(`aside.detail section.capture[data-service="${cfg.capture.service}"]`);
  await box.waitFor();
  await box.locator('.cap-period').fill('300');
  await box.locator('input.token').fill(cfg.live.token);
  await box.locator('button.cap-go').click();
  await box.locator('.cap-state[data-state="complete"]').waitFor({ timeout: 60000 });
  check((await box.locator(`.cap-results tr[data-agent="${cfg.live.agent}"]`).count()) === 1, 'the agent\'s outcome shown');
  await noStrayText('aside.detail section.capture .cap-state');
  await shot('22-capture-span');
  await go('#/search');
  await page.waitForSelector(`#search-form select[name="service"] option[value="${cfg.capture.service}"]`, { state: 'attached' });
  await page.selectOption('#search-form select[name="service"]', cfg.capture.service);
  await page.click('#svc-capture');
  const sbox = page.locator(`.svc-capture-slot section.capture[data-service="${cfg.capture.service}"]`);
  await sbox.locator('button.cap-go').click();
  await sbox.locator('.cap-state[data-state="complete"]').waitFor({ timeout: 60000 });
  await shot('23-capture-service');
  ok(`capture: ${cfg.capture.service} from its SERVER span and from the search form, each answered by ${cfg.live.agent}`);

  check(consoleErrors.length === 0, `browser console errors: ${consoleErrors.join(' | ')}`);
  ok('no console errors');
  await browser.close();
  console.log('UI BROWSER TESTS PASSED');
} catch (e) {
  console.log(`FAILED at ${step}: ${e && e.stack ? e.stack : e}`);
  if (consoleErrors.length) console.log(`console errors: ${consoleErrors.join(' | ')}`);
  try {
    await shot('zz-failure');
  } catch (_) {
    /* page gone */
  }
  await browser.close();
  process.exit(1);
}
