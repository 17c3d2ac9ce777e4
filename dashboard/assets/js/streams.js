// Streams: the blocked ones and why, in words, with release and replay.
// The API has no list of blocked streams, only their number (stats) and
// one stream's status; the candidates are the streams of pending dead
// letters and of messages waiting for a retry, each asked for its status.
import { api, listAll, session, seg } from './api.js';
import { h, field, fmtTime, fmtNum, plural, badge, shortID, errorNotice, notify } from './dom.js';
import { confirmAction } from './dialog.js';

// The most streams asked for their status at once.
const MAX_STREAMS = 100;

async function candidates() {
  const [dead, retrying] = await Promise.all([
    listAll('/dlq', { status: 'pending' }, 1000),
    listAll('/messages', { state: 'retrying' }, 1000),
  ]);
  const seen = new Map();
  for (const x of [...dead.items, ...retrying.items]) {
    if (x.stream && !seen.has(x.destination + '\u0000' + x.stream)) {
      seen.set(x.destination + '\u0000' + x.stream, { destination: x.destination, stream: x.stream });
    }
  }
  return { list: [...seen.values()].slice(0, MAX_STREAMS), truncated: seen.size > MAX_STREAMS || dead.more || retrying.more, dead: dead.items };
}

// headEntry finds the pending dead letter of a stream's head message,
// asked for by the message's ID: a stream may hold any number of others.
async function headEntry(st) {
  const page = await api('GET', '/dlq', { params: { message_id: st.head.id, status: 'pending', payload: 'false', limit: 1 } });
  return page.items.find((e) => e.message_id === st.head.id) || null;
}

// named is the query naming a stream for /stream and /stream/release:
// a browser drops a path segment "." or ".." (even written %2E), so the
// stream's name travels in the query, where every name survives.
// The head's payload is left out: the page shows none, and asks up to
// MAX_STREAMS streams at once.
const named = (destination, stream) => ({ destination, stream });
const status = (destination, stream) => api('GET', '/stream', { params: { ...named(destination, stream), payload: 'false' } });

function streamActions(st, after) {
  if (!session.canOperate) return null;
  const where = `${st.destination} / ${st.stream}`;
  const release = h('button', { type: 'button', class: 'primary', dataset: { action: 'release' }, onclick: async () => {
    const res = await confirmAction({ title: `Release ${where}?`, confirm: 'Release',
      text: 'The later messages go past the failed and dead-lettered ones (the dead letters stay in the queue to replay or resolve).',
      run: (notes) => api('POST', '/stream/release', { params: named(st.destination, st.stream), body: notes ? { notes } : undefined }) });
    if (res) { notify(`Released ${where}: ${plural(res.count, 'blocking message')} let go.`, 'ok'); after(); }
  } }, 'Release…');
  let replay = null;
  if (st.head && st.head.dead_lettered_at) {
    replay = h('button', { type: 'button', dataset: { action: 'replay-head' }, onclick: async () => {
      const e = await headEntry(st).catch(() => null);
      if (!e) { notify('The head message has no pending dead letter to replay.', 'error'); return; }
      const res = await confirmAction({ title: `Replay the head of ${where}?`, confirm: 'Replay',
        text: 'The head message is delivered again, before the messages behind it.',
        run: (notes) => api('POST', `/dlq/${seg(e.id)}/replay`, { body: notes ? { notes } : undefined }) });
      if (res) { notify(`Replayed the head of ${where}.`, 'ok'); after(); }
    } }, 'Replay head…');
  } else if (st.head) {
    replay = h('button', { type: 'button', dataset: { action: 'retry-head' }, onclick: async () => {
      const res = await confirmAction({ title: `Retry the head of ${where} now?`, confirm: 'Retry now',
        text: 'The head message is tried at once instead of at its scheduled time.',
        run: (notes) => api('POST', `/messages/${seg(st.head.id)}/retry-now`, { body: notes ? { notes } : undefined }) });
      if (res) { notify(`The head of ${where} is due now.`, 'ok'); after(); }
    } }, 'Retry head now…');
  }
  return h('div', { class: 'actions' }, release, replay);
}

function streamCard(st, after) {
  return h('article', { class: 'group stream-card', dataset: { stream: st.stream, destination: st.destination } },
    h('div', { class: 'head' },
      h('strong', {}, `${st.destination} / ${st.stream}`),
      st.blocked ? badge('blocked', 'bad') : badge('flowing', 'ok'),
      h('span', { class: 'muted' }, plural(st.pending, 'message') + ' undelivered')),
    h('p', { class: 'why' }, st.why || 'Nothing holds this stream back.'),
    st.head ? h('p', { class: 'small' }, 'Head: ', h('a', { href: '#/messages/' + seg(st.head.id) }, shortID(st.head.id)),
      ` (${st.head.type}, ${plural(st.head.attempts, 'attempt')}${st.head.scheduled_for ? ', next try ' + fmtTime(st.head.scheduled_for) : ''})`) : null,
    streamActions(st, after));
}

export function streams(main, dest, name) {
  const err = h('div');
  const summary = h('p', { 'aria-live': 'polite' });
  const list = h('div');
  const d = h('input', { name: 'destination', value: dest || '', required: true, autocomplete: 'off' });
  const s = h('input', { name: 'stream', value: name || '', required: true, autocomplete: 'off' });
  const form = h('form', { class: 'filters panel', role: 'search', 'aria-label': 'Look up a stream' },
    field('Destination', d), field('Stream', s),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Look up')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = `#/streams/${seg(d.value)}/${seg(s.value)}`;
  });
  main.replaceChildren(h('h1', {}, 'Streams'), form, err, summary, list);

  async function one() {
    try {
      const st = await status(dest, name);
      summary.textContent = '';
      list.replaceChildren(streamCard(st, one), h('p', {}, h('a', { href: '#/streams' }, 'All blocked streams')));
    } catch (e) {
      err.replaceChildren(errorNotice(e));
    }
  }

  async function all() {
    summary.textContent = 'Looking for blocked streams…';
    try {
      const [stats, c] = await Promise.all([api('GET', '/stats'), candidates()]);
      const sts = await Promise.all(c.list.map((x) => status(x.destination, x.stream).catch(() => null)));
      const blocked = sts.filter((st) => st && st.blocked);
      summary.textContent = `${plural(stats.blocked_streams, 'stream')} blocked. ` +
        (blocked.length ? `Shown: ${fmtNum(blocked.length)} found among the streams of pending dead letters and retrying messages` : 'None found among the streams of pending dead letters and retrying messages') +
        (c.truncated ? ` (the first ${MAX_STREAMS} looked at).` : '.');
      list.replaceChildren(...blocked.map((st) => streamCard(st, all)));
      err.replaceChildren();
    } catch (e) {
      summary.textContent = '';
      err.replaceChildren(errorNotice(e));
    }
  }
  if (dest && name) one(); else all();
}
