// Confirmation dialogs: one for a single action (with notes), one for a
// bulk action that first runs a dry run and shows how many entries and a
// sample before anything changes.
import { api } from './api.js';
import { h, field, fmtTime, plural, shortID, table, errorNotice } from './dom.js';

const dialog = () => document.getElementById('dialog');

function open(title, body, buttons) {
  const d = dialog();
  d.replaceChildren(h('h2', { id: 'dialog-title' }, title), body, h('div', { class: 'actions' }, buttons));
  if (!d.open) d.showModal();
  return d;
}

export function closeDialog() {
  const d = dialog();
  if (d.open) d.close();
}

// confirmAction asks to confirm an action, with optional notes, runs
// run(notes) and resolves with its result, or with null when cancelled.
export function confirmAction({ title, text, confirm, danger, notes = true, run }) {
  return new Promise((resolve) => {
    const area = h('textarea', { name: 'notes', maxlength: 2000 });
    const status = h('div', { 'aria-live': 'polite' });
    const ok = h('button', { type: 'button', class: danger ? 'danger' : 'primary', 'data-confirm': '' }, confirm);
    const cancel = h('button', { type: 'button' }, 'Cancel');
    cancel.addEventListener('click', () => { closeDialog(); resolve(null); });
    ok.addEventListener('click', async () => {
      ok.disabled = true;
      try {
        const res = await run(area.value.trim());
        closeDialog();
        resolve(res);
      } catch (e) {
        ok.disabled = false;
        status.replaceChildren(errorNotice(e));
      }
    });
    open(title, h('div', {}, h('p', {}, text), notes ? field('Notes for the audit log (optional)', area) : null, status), [ok, cancel]);
    dialog().addEventListener('cancel', () => resolve(null), { once: true });
  });
}

const verbs = { replay: ['Replay', 'replayed'], resolve: ['Resolve', 'resolved'], delete: ['Delete', 'deleted'] };

// bulkAction runs action (replay, resolve or delete) on the dead letters
// matching filter after a dry run; it resolves with the result, or null.
export function bulkAction(action, filter, what) {
  const [Verb, done] = verbs[action];
  return new Promise((resolve) => {
    const cancel = h('button', { type: 'button' }, 'Cancel');
    cancel.addEventListener('click', () => { closeDialog(); resolve(null); });
    dialog().addEventListener('cancel', () => resolve(null), { once: true });
    open(`${Verb} ${what}?`, h('p', { 'aria-live': 'polite' }, 'Dry run: counting the entries…'), [cancel]);
    api('POST', '/dlq/' + action, { body: { ...filter, dry_run: true } }).then((dry) => {
      const area = h('textarea', { name: 'notes', maxlength: 2000 });
      const status = h('div', { 'aria-live': 'polite' });
      const ok = h('button', { type: 'button', class: action === 'delete' ? 'danger' : 'primary', 'data-confirm': '' },
        `${Verb} ${plural(dry.count, 'entry', 'entries')}`);
      ok.disabled = dry.count === 0;
      ok.addEventListener('click', async () => {
        ok.disabled = true;
        try {
          // Only what the dry run counted: entries dead-lettered before
          // it looked (as_of), not those that failed since. The operator
          // confirmed the count, so an empty filter means every entry.
          const res = await api('POST', '/dlq/' + action, { body: { ...filter, ...(dry.as_of ? { before: dry.as_of } : {}), notes: area.value.trim(), all: true } });
          closeDialog();
          resolve(res);
        } catch (e) {
          ok.disabled = false;
          status.replaceChildren(errorNotice(e));
        }
      });
      const sample = table('Sample of the entries', [
        ['Entry', (e) => shortID(e.id)],
        ['Destination', (e) => e.destination],
        ['Stream', (e) => e.stream || '—'],
        ['Error', (e) => e.error],
        ['Dead-lettered', (e) => fmtTime(e.failure_time)],
      ], dry.sample || []);
      open(`${Verb} ${what}?`, h('div', { class: 'dry-run' },
        h('p', { 'data-dry-count': dry.count },
          h('strong', {}, `Dry run: ${plural(dry.count, 'entry', 'entries')} would be ${done}.`),
          dry.count > (dry.sample || []).length ? ` The first ${dry.sample.length} are shown.` : ''),
        sample,
        field('Notes for the audit log (optional)', area), status), [ok, cancel]);
    }).catch((e) => {
      open(`${Verb} ${what}?`, errorNotice(e), [cancel]);
    });
  });
}
