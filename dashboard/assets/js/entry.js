// One dead letter: what it is, its payload and headers, its failures, its
// audit trail, and the actions on it.
import { api, session, seg, rawMember } from './api.js';
import { h, fill, fmtTime, fmtNum, badge, kvTable, payloadView, shortID, table, errorNotice, notify } from './dom.js';
import { confirmAction } from './dialog.js';

export function streamLink(destination, stream) {
  if (!stream) return '—';
  return h('a', { href: `#/streams/${seg(destination)}/${seg(stream)}` }, stream);
}

function actions(e, reload) {
  if (!session.canOperate) return null;
  const act = (name, label, opts) => h('button', { type: 'button', dataset: { action: name }, class: opts.danger ? 'danger' : '',
    onclick: async () => {
      const res = await confirmAction({ ...opts, run: (notes) => name === 'delete'
        ? api('DELETE', '/dlq/' + seg(e.id), { body: notes ? { notes } : undefined })
        : api('POST', `/dlq/${seg(e.id)}/${name}`, { body: notes ? { notes } : undefined }) });
      if (!res) return;
      notify(`${label}: done (audit record ${res.audit_id || '—'}).`, 'ok');
      if (name === 'delete') location.hash = '#/dead-letters'; else reload();
    } }, label);
  const pending = e.status === 'pending';
  return h('div', { class: 'actions panel' },
    pending ? act('replay', 'Replay', { title: 'Replay this dead letter?', confirm: 'Replay', text: `The message goes back to ${e.destination} as a new delivery${e.stream ? ' at the head of its stream' : ''}.` }) : null,
    pending ? act('resolve', 'Resolve', { title: 'Resolve this dead letter?', confirm: 'Resolve', text: 'The entry is marked handled and is never replayed. Say how in the notes.' }) : null,
    act('delete', 'Delete', { title: 'Delete this dead letter?', confirm: 'Delete', danger: true, text: 'The entry is removed for good; the audit log keeps the action.' }));
}

export async function entry(main, id) {
  main.replaceChildren(h('h1', {}, 'Dead letter'), h('p', {}, 'Loading…'));
  let e;
  try {
    e = await api('GET', '/dlq/' + seg(id));
  } catch (err) {
    main.replaceChildren(h('h1', {}, 'Dead letter'), errorNotice(err), h('p', {}, h('a', { href: '#/dead-letters' }, 'Back to the dead letters')));
    return;
  }
  const reload = () => entry(main, id);
  const fields = [
    ['Entry', h('code', {}, e.id)],
    ['Status', badge(e.status)],
    ['Message', h('a', { href: '#/messages/' + seg(e.message_id) }, h('code', {}, e.message_id))],
    ['Destination', e.destination],
    ['Stream', streamLink(e.destination, e.stream)],
    ['Type', e.type],
    ['Reason', e.reason],
    ['Fingerprint', h('code', {}, e.fingerprint || '—')],
    ['Attempts', fmtNum(e.attempts)],
    e.resolved_at ? ['Resolved', `${fmtTime(e.resolved_at)} by ${e.resolved_by}: ${e.resolution_notes || 'no notes'}`] : null,
    e.replayed_at ? ['Replayed', `${fmtTime(e.replayed_at)} by ${e.replayed_by}: ${e.replay_notes || 'no notes'}`] : null,
    e.task_id ? ['Task', `${e.task_id} (DAG ${e.dag_id}, run ${e.dag_run_id})`] : null,
  ].filter(Boolean);
  // The API keeps the first failure, the last attempt and the final
  // error; each attempt's own error is not stored.
  const failures = [
    { what: 'First failure', at: e.first_failure_time, error: '' },
    { what: 'Last attempt', at: e.last_attempt_time, error: '' },
    { what: `Dead-lettered after ${e.attempts} attempt${e.attempts === 1 ? '' : 's'}`, at: e.failure_time, error: `${e.reason}: ${e.error}` },
  ].filter((f) => f.at);
  fill(main,
    h('p', {}, h('a', { href: '#/dead-letters' }, '← Dead letters')),
    h('h1', {}, 'Dead letter ', shortID(e.id)),
    actions(e, reload) || '',
    h('section', { class: 'panel', 'aria-label': 'Entry' }, h('dl', { class: 'fields' }, fields.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
    h('h2', {}, 'Failures'),
    table('Failures', [['When', (f) => fmtTime(f.at)], ['What', (f) => f.what], ['Error', (f) => h('code', {}, f.error || '—')]], failures),
    h('h2', {}, 'Payload'), payloadView(rawMember(e, 'payload'), e.payload_base64),
    h('h2', {}, 'Headers'), kvTable(e.headers, 'Headers'),
    Object.keys(e.metadata || {}).length ? h('section', { 'aria-labelledby': 'meta-h' }, h('h2', { id: 'meta-h' }, 'Metadata'), h('pre', { class: 'payload' }, JSON.stringify(e.metadata, null, 2))) : '',
    h('h2', {}, 'Audit trail'),
    table('Audit trail', [
      ['When', (r) => fmtTime(r.at)], ['Who', (r) => r.actor], ['Action', (r) => r.action], ['Notes', (r) => r.notes || '—'],
    ], e.history || [], 'No operator has acted on this entry.'));
}
