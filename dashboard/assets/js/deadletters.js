// Dead letters: entries grouped by error fingerprint, filters, and actions
// on one entry, a group or everything the filter matches (bulk actions go
// through a dry run first).
import { api, listAll, session } from './api.js';
import { h, field, fmtTime, fmtNum, plural, badge, shortID, table, errorNotice, notify } from './dom.js';
import { bulkAction } from './dialog.js';

// The most entries a page groups; the API lists 1000 at a time.
const PAGE = 1000;

// REASONS are the failure reasons of package errorhandling.
const REASONS = ['TransportUnavailable', 'HandlerException', 'ValidationFailure', 'TimeoutExceeded',
  'SerializationError', 'DependencyFailure', 'PoisonMessage', 'Unknown'];

// The filter outlives the page, so that coming back from an entry keeps it.
const state = { destination: '', stream: '', reason: '', status: 'pending', after: '', before: '', limit: PAGE };

// apiFilter turns the form's state into the API's filter (times in RFC 3339).
function apiFilter() {
  const f = {};
  for (const k of ['destination', 'stream', 'reason', 'status']) if (state[k]) f[k] = state[k];
  for (const k of ['after', 'before']) if (state[k]) f[k] = new Date(state[k]).toISOString();
  return f;
}

// groupEntries groups entries by fingerprint (by error text when an entry
// has none), largest group first.
export function groupEntries(entries) {
  const groups = new Map();
  for (const e of entries) {
    const key = e.fingerprint || 'error:' + e.error;
    let g = groups.get(key);
    if (!g) {
      g = { key, fingerprint: e.fingerprint, reason: e.reason, error: e.error, entries: [], destinations: new Set(), streams: new Set(), first: e.failure_time, last: e.failure_time };
      groups.set(key, g);
    }
    g.entries.push(e);
    g.destinations.add(e.destination);
    if (e.stream) g.streams.add(e.stream);
    if (e.failure_time < g.first) g.first = e.failure_time;
    if (e.failure_time > g.last) g.last = e.failure_time;
  }
  return [...groups.values()].sort((a, b) => b.entries.length - a.entries.length || (a.key < b.key ? -1 : 1));
}

function filterForm(onApply) {
  const input = (name, attrs) => {
    const el = h('input', { name, value: state[name], ...attrs });
    el.addEventListener('change', () => { state[name] = el.value; });
    return el;
  };
  const select = (name, options) => {
    const el = h('select', { name }, options.map(([v, t]) => h('option', { value: v, selected: state[name] === v }, t)));
    el.addEventListener('change', () => { state[name] = el.value; });
    return el;
  };
  const form = h('form', { class: 'filters panel', role: 'search', 'aria-label': 'Filter dead letters' },
    field('Destination', input('destination', { autocomplete: 'off' })),
    field('Reason', select('reason', [['', 'Any reason'], ...REASONS.map((r) => [r, r])])),
    field('Stream', input('stream', { autocomplete: 'off' })),
    field('Status', select('status', [['pending', 'Pending'], ['replayed', 'Replayed'], ['resolved', 'Resolved'], ['', 'Any status']])),
    field('Dead-lettered after', input('after', { type: 'datetime-local', step: 1 })),
    field('Dead-lettered before', input('before', { type: 'datetime-local', step: 1 })),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Apply'),
      h('button', { type: 'reset' }, 'Clear')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    for (const el of form.elements) if (el.name) state[el.name] = el.value;
    state.limit = PAGE;
    onApply();
  });
  form.addEventListener('reset', (ev) => {
    ev.preventDefault();
    Object.assign(state, { destination: '', stream: '', reason: '', status: 'pending', after: '', before: '', limit: PAGE });
    onApply(true);
  });
  return form;
}

function bulkButtons(filter, what, after) {
  if (!session.canOperate) return null;
  const btn = (action, label) => h('button', { type: 'button', dataset: { bulk: action }, class: action === 'delete' ? 'danger' : '',
    onclick: async () => {
      const res = await bulkAction(action, filter, what);
      if (res) {
        notify(`${res.action}: ${plural(res.count, 'entry', 'entries')} done (audit record ${res.audit_id || '—'}).`, 'ok');
        after();
      }
    } }, label);
  return h('div', { class: 'actions' }, btn('replay', 'Replay…'), btn('resolve', 'Resolve…'), btn('delete', 'Delete…'));
}

function groupCard(g, filter, after) {
  const dests = [...g.destinations].sort();
  const n = g.entries.length;
  // A group's bulk action narrows the page's filter by its fingerprint.
  const gf = g.fingerprint ? { ...filter, fingerprint: g.fingerprint } : null;
  const entries = table('Entries of the group', [
    ['Entry', (e) => h('a', { href: '#/dead-letters/' + encodeURIComponent(e.id) }, shortID(e.id))],
    ['Destination', (e) => e.destination],
    ['Stream', (e) => e.stream ? e.stream : '—'],
    ['Type', (e) => e.type, 'hide-narrow'],
    ['Attempts', (e) => fmtNum(e.attempts), 'num'],
    ['Dead-lettered', (e) => fmtTime(e.failure_time)],
    ['Status', (e) => badge(e.status)],
  ], g.entries.slice(0, 200));
  return h('article', { class: 'group', dataset: { fingerprint: g.fingerprint || '' }, 'aria-label': `${plural(n, 'entry', 'entries')}: ${g.error}` },
    h('div', { class: 'head' },
      h('span', { class: 'count' }, plural(n, 'entry', 'entries')),
      badge(g.reason || 'Unknown', 'bad'),
      h('span', { class: 'err' }, g.error)),
    h('p', { class: 'muted small' },
      `first ${fmtTime(g.first)}, last ${fmtTime(g.last)} · destination ${dests.join(', ')} · ${plural(g.streams.size, 'stream')}`),
    gf ? bulkButtons(gf, `the group of ${plural(n, 'entry', 'entries')}`, after) : null,
    h('details', {}, h('summary', {}, n > 200 ? `Show the first 200 entries` : `Show the ${plural(n, 'entry', 'entries')}`), entries));
}

export function deadLetters(main) {
  const err = h('div');
  const summary = h('p', { 'aria-live': 'polite' });
  const bulk = h('div');
  const groups = h('div', { class: 'groups' });
  const more = h('div');
  main.replaceChildren(h('h1', {}, 'Dead letters'), filterForm(load), err, summary, bulk, groups, more);

  async function load(reset) {
    if (reset) main.querySelector('form').replaceWith(filterForm(load));
    summary.textContent = 'Loading…';
    try {
      const filter = apiFilter();
      const { items, more: hasMore } = await listAll('/dlq', filter, state.limit);
      const gs = groupEntries(items);
      summary.textContent = `${plural(items.length, 'entry', 'entries')}${hasMore ? ' loaded (more match)' : ''} in ${plural(gs.length, 'group')}, grouped by error fingerprint.`;
      bulk.replaceChildren(items.length && session.canOperate
        ? h('div', { class: 'panel' }, h('strong', {}, 'Everything the filter matches: '), bulkButtons(filter, 'every entry the filter matches', load)) : '');
      groups.replaceChildren(...gs.map((g) => groupCard(g, filter, load)));
      more.replaceChildren(hasMore ? h('button', { type: 'button', onclick: () => { state.limit += PAGE; load(); } }, `Load ${PAGE} more`) : '');
      err.replaceChildren();
    } catch (e) {
      summary.textContent = '';
      err.replaceChildren(errorNotice(e));
    }
  }
  load();
}
