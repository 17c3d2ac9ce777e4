// Messages: search by id, destination, stream, type and state; one
// message's detail and the actions on it.
import { api, session, seg, rawMember } from './api.js';
import { h, fill, field, fmtTime, fmtNum, badge, shortID, kvTable, payloadView, table, errorNotice, notify } from './dom.js';
import { confirmAction } from './dialog.js';
import { streamLink } from './entry.js';

const STATES = ['ready', 'retrying', 'leased', 'dead_lettered', 'delivered'];
const search = { id: '', destination: '', stream: '', type: '', state: '' };

// stateOf says what a message is doing, from its fields (the API's list
// filters by state but does not return it).
export function stateOf(m) {
  if (/Published/.test(m.status)) return 'delivered';
  if (m.dead_lettered_at) return 'dead_lettered';
  if (m.lease_expiry && new Date(m.lease_expiry) > new Date()) return 'leased';
  if (m.attempts > 0) return 'retrying';
  return 'ready';
}

export function messages(main) {
  const err = h('div');
  const results = h('div');
  const more = h('div');
  const inputs = {};
  const input = (name, attrs) => (inputs[name] = h('input', { name, value: search[name], autocomplete: 'off', ...attrs }));
  inputs.state = h('select', { name: 'state' }, h('option', { value: '' }, 'Any state'),
    STATES.map((s) => h('option', { value: s, selected: search.state === s }, s.replace('_', ' '))));
  const form = h('form', { class: 'filters panel', role: 'search', 'aria-label': 'Search messages' },
    field('Message id', input('id', { placeholder: 'a UUID', spellcheck: 'false' })),
    field('Destination', input('destination')), field('Stream', input('stream')), field('Type', input('type')),
    field('State', inputs.state),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Search')));
  main.replaceChildren(h('h1', {}, 'Messages'), form, err, results, more);

  let rows = [];
  async function load(cursor) {
    // A name may begin or end with spaces: only the id is trimmed.
    for (const k of Object.keys(search)) search[k] = k === 'id' ? inputs[k].value.trim() : inputs[k].value;
    if (search.id) { location.hash = '#/messages/' + seg(search.id); return; }
    try {
      const { id, ...params } = search;
      const page = await api('GET', '/messages', { params: { ...params, payload: 'false', limit: 100, cursor } });
      rows = cursor ? rows.concat(page.items) : page.items;
      results.replaceChildren(h('p', { 'aria-live': 'polite' }, `${fmtNum(rows.length)} message${rows.length === 1 ? '' : 's'}${page.next_cursor ? ' so far' : ''}.`),
        table('Messages', [
          ['Message', (m) => h('a', { href: '#/messages/' + seg(m.id) }, shortID(m.id))],
          ['Destination', (m) => m.destination],
          ['Stream', (m) => streamLink(m.destination, m.stream)],
          ['Type', (m) => m.type, 'hide-narrow'],
          ['State', (m) => badge(stateOf(m).replace('_', ' '), stateOf(m))],
          ['Attempts', (m) => fmtNum(m.attempts), 'num'],
          ['Created', (m) => fmtTime(m.created_at), 'hide-narrow'],
          ['Last error', (m) => m.error || '—', 'hide-narrow'],
        ], rows, 'No message matches.'));
      more.replaceChildren(page.next_cursor ? h('button', { type: 'button', onclick: () => load(page.next_cursor) }, 'Load more') : '');
      err.replaceChildren();
    } catch (e) {
      err.replaceChildren(errorNotice(e));
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); load(''); });
  load('');
}

function messageActions(m, reload) {
  if (!session.canOperate) return null;
  const st = stateOf(m);
  if (st === 'delivered' || st === 'dead_lettered') return null;
  const act = (name, label, text, danger) => h('button', { type: 'button', class: danger ? 'danger' : '', dataset: { action: name },
    onclick: async () => {
      const res = await confirmAction({ title: `${label}?`, confirm: label, text, danger,
        run: (notes) => api('POST', `/messages/${seg(m.id)}/${name}`, { body: notes ? { notes } : undefined }) });
      if (res) { notify(`${label}: done (audit record ${res.audit_id || '—'}).`, 'ok'); reload(); }
    } }, label);
  return h('div', { class: 'actions panel' },
    act('retry-now', 'Retry now', 'The message becomes due at once.'),
    act('reset', 'Reset attempts', 'The message gets its full attempt budget again.'),
    act('cancel', 'Cancel', 'The message is never delivered (only a message not being delivered can be cancelled).', true),
    act('dead-letter', 'Dead-letter', 'The message moves to the dead-letter queue now.', true));
}

export async function message(main, id) {
  main.replaceChildren(h('h1', {}, 'Message'), h('p', {}, 'Loading…'));
  let m;
  try {
    m = await api('GET', '/messages/' + seg(id));
  } catch (e) {
    main.replaceChildren(h('h1', {}, 'Message'), errorNotice(e), h('p', {}, h('a', { href: '#/messages' }, 'Back to the messages')));
    return;
  }
  const st = stateOf(m);
  // A dead-lettered message links to its pending entry, found among its
  // stream's (the API has no lookup by message id).
  let entryLink = '';
  if (st === 'dead_lettered') {
    const page = await api('GET', '/dlq', { params: { destination: m.destination, stream: m.stream, status: 'pending', payload: 'false', limit: 1000 } }).catch(() => ({ items: [] }));
    const e = page.items.find((x) => x.message_id === m.id);
    entryLink = h('p', { class: 'notice info' }, 'This message is in the dead-letter queue: ',
      e ? h('a', { href: '#/dead-letters/' + seg(e.id), dataset: { entry: e.id } }, 'act on its entry') : h('a', { href: '#/dead-letters' }, 'see the dead letters'), '.');
  }
  const fields = [
    ['Message', h('code', {}, m.id)], ['State', badge(st.replace('_', ' '), st)], ['Status flags', m.status],
    ['Destination', m.destination], ['Stream', streamLink(m.destination, m.stream)], ['Sequence', fmtNum(m.seq)],
    ['Type', m.type], ['Ordering', m.ordering || '—'], ['Attempts', fmtNum(m.attempts)],
    ['Last failure', m.error ? `${m.failure_reason}: ${m.error}` : '—'],
    ['Next try', fmtTime(m.scheduled_for)], ['Created', fmtTime(m.created_at)],
    ['Leased by', m.instance_id ? `${m.instance_id} until ${fmtTime(m.lease_expiry)}` : '—'],
    ['Dead-lettered', fmtTime(m.dead_lettered_at)],
  ];
  fill(main,
    h('p', {}, h('a', { href: '#/messages' }, '← Messages')),
    h('h1', {}, 'Message ', shortID(m.id)),
    messageActions(m, () => message(main, id)) || '',
    entryLink,
    h('section', { class: 'panel', 'aria-label': 'Message' }, h('dl', { class: 'fields' }, fields.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
    h('h2', {}, 'Payload'), payloadView(rawMember(m, 'payload'), m.payload_base64),
    h('h2', {}, 'Headers'), kvTable(m.headers, 'Headers'));
}
