// The shell: hash router, navigation, theme, "open trace by id".
import { route, toast } from './util.js';
import * as search from './search.js';
import * as trace from './trace.js';
import * as compare from './compare.js';
import * as deps from './deps.js';
import * as sql from './sql.js';
import * as explore from './explore.js';
import * as live from './live.js';

const VIEWS = { search, trace, compare, deps, sql, explore, live };
const view = document.getElementById('view');
let current = null;

function render() {
  const { path, params } = route();
  const name = VIEWS[path[0]] ? path[0] : 'search';
  if (!VIEWS[path[0]] && location.hash && location.hash !== '#' && location.hash !== '#/') {
    toast(`No view "${path[0]}"; showing search`);
  }
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', a.dataset.nav === name || (name === 'trace' && a.dataset.nav === 'search'));
  }
  if (current && current.name === name && current.mod.update && current.mod.update(path, params)) return;
  if (current && current.mod.unmount) current.mod.unmount();
  view.replaceChildren();
  current = { name, mod: VIEWS[name] };
  document.body.dataset.view = name;
  VIEWS[name].mount(view, path, params);
}

window.addEventListener('hashchange', render);

document.getElementById('theme').addEventListener('click', () => {
  const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = t;
  try {
    localStorage.setItem('weft.theme', t);
  } catch (e) {
    /* private mode: theme lasts this page only */
  }
  window.dispatchEvent(new Event('weft-theme'));
});

document.getElementById('jump').addEventListener('submit', (e) => {
  e.preventDefault();
  const v = e.target.id.value.trim().toLowerCase();
  if (!/^[0-9a-f]{16,32}$/.test(v)) {
    toast('A trace id is 16 or 32 hex digits', 'error');
    return;
  }
  e.target.id.value = '';
  location.hash = `#/trace/${v}`;
});

render();
