// The dashboard's shell: sign-in, navigation between pages (in the URL's
// fragment), and live polling of the page on show.
import { session, signIn, APIError } from './api.js';
import { h, fill, field, errorNotice, clearNotice } from './dom.js';
import { closeDialog } from './dialog.js';
import { overview } from './overview.js';
import { deadLetters } from './deadletters.js';
import { entry } from './entry.js';
import { streams } from './streams.js';
import { messages, message } from './messages.js';
import { workflows, workflowRun } from './workflows.js';

// POLL_MS is how often a live page refreshes, in milliseconds; ?poll=500
// in the URL changes it, within 250 ms and an hour. A value that is no
// number, zero or not finite leaves the default. (setInterval takes any
// delay that is not finite or beyond 2^31-1 as 0: polls back to back.)
const POLL_MS = pollInterval(new URLSearchParams(location.search).get('poll'));

function pollInterval(param) {
  const ms = Number(param);
  if (!ms || !Number.isFinite(ms)) return 2000;
  return Math.min(60 * 60 * 1000, Math.max(250, ms));
}

const main = document.getElementById('content');
const header = document.querySelector('header.top');
let timer = null;

// route reads the page from the URL; its show draws it into view.
function route(view) {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  } catch (e) {
    if (!(e instanceof URIError)) throw e;
    return { page: '', show: () => notFound(view, h('p', { class: 'notice error', role: 'alert' },
      'Bad address: ', h('code', {}, location.hash), ' holds a malformed percent-escape.')) };
  }
  switch (parts[0]) {
    case '': case 'overview': return { page: 'overview', show: () => overview(view) };
    case 'dead-letters': return { page: 'dead-letters', show: () => (parts[1] ? entry(view, parts[1]) : deadLetters(view)) };
    case 'streams': return { page: 'streams', show: () => streams(view, parts[1], parts.slice(2).join('/')) };
    case 'messages': return { page: 'messages', show: () => (parts[1] ? message(view, parts[1]) : messages(view)) };
    case 'workflows': return { page: 'workflows', show: () => (parts[1] ? workflowRun(view, parts[1]) : workflows(view)) };
    default: return { page: '', show: () => notFound(view) };
  }
}

// notFound says the address names no page, and why when it knows.
function notFound(view, why) {
  fill(view, h('h1', {}, 'Not found'), why, h('p', {}, h('a', { href: '#/' }, 'Overview')));
}

function render() {
  clearInterval(timer);
  timer = null;
  closeDialog();
  if (!session.token) { login(); return; }
  header.hidden = false;
  document.getElementById('role').textContent = session.canOperate ? 'operate' : 'read only';
  // Each page draws into a view of its own: a poll that was waiting for
  // its answer when the operator moved on then fills a view no longer
  // shown, instead of drawing the page left over the one now open.
  const view = h('div', { class: 'view' });
  main.replaceChildren(view);
  const r = route(view);
  for (const a of header.querySelectorAll('nav a')) {
    if (a.dataset.page === r.page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  document.title = `${r.page ? r.page.replace('-', ' ') : 'not found'} · Backstop`;
  main.dataset.page = r.page;
  const poll = r.show();
  if (typeof poll === 'function') {
    // A poll still waiting for its answers is not started again.
    let busy = false;
    const tick = async () => {
      if (busy) return;
      busy = true;
      try { await poll(); } finally { busy = false; }
    };
    tick();
    timer = setInterval(tick, POLL_MS);
  }
}

function login(message) {
  header.hidden = true;
  main.dataset.page = 'login';
  const token = h('input', { type: 'password', name: 'token', required: true, autocomplete: 'off', spellcheck: 'false' });
  const err = h('div', { 'aria-live': 'assertive' }, message ? errorNotice(message) : null);
  const form = h('form', { class: 'panel login', 'aria-labelledby': 'login-h' },
    h('h1', { id: 'login-h' }, 'Sign in to Backstop'),
    h('p', { class: 'muted' }, 'Paste an admin API token. A read token sees; an operate token also acts. The token stays in this tab only.'),
    field('Admin API token', token), err,
    h('p', {}, h('button', { type: 'submit', class: 'primary' }, 'Sign in')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await signIn(token.value.trim());
      render();
    } catch (e) {
      err.replaceChildren(errorNotice(e instanceof APIError && e.status === 401 ? 'The server does not know this token.' : e));
    }
  });
  main.replaceChildren(form);
  token.focus();
}

document.getElementById('signout').addEventListener('click', () => {
  session.clear();
  clearNotice();
  location.hash = '#/';
  render();
});

// A token the server stopped accepting signs the tab out.
window.addEventListener('backstop:unauthorized', () => {
  if (!session.token) return;
  session.clear();
  clearInterval(timer);
  timer = null;
  closeDialog();
  login('The server no longer accepts the token; sign in again.');
});

window.addEventListener('hashchange', () => { clearNotice(); render(); });
render();
