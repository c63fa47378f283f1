// Theme before first paint (a classic script in <head>, not a module): saved choice, else the
// system's. A file rather than inline, so the Content-Security-Policy needs no 'unsafe-inline'.
(function () {
  var t = null;
  try { t = localStorage.getItem('weft.theme'); } catch (e) {}
  if (t !== 'light' && t !== 'dark') t = matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
  document.documentElement.dataset.theme = t;
})();
