// Workflows: the runs, newest first, filtered by DAG and state; one run as
// its task graph, in dependency order: each task's state, attempts,
// upstream tasks, times and, for a task that did not run or did not
// succeed, why in words, with its attempts and its dead letter.
import { api, seg, APIError } from './api.js';
import { h, fill, field, fmtTime, fmtNum, badge, table, errorNotice } from './dom.js';

const STATES = ['running', 'success', 'failed', 'partial_success'];
const search = { dag_id: '', state: '' };

// stateClass maps run and task states onto the badge colours.
function stateClass(s) {
  switch (s) {
    case 'success': return 'ok';
    case 'failed': case 'upstream_failed': return 'bad';
    case 'up_for_retry': case 'partial_success': return 'warn';
    default: return 'neutral';
  }
}

const stateBadge = (s) => badge(s.replace(/_/g, ' '), stateClass(s));

// notServed says what a 404 on the list means: this server reads no runs.
function notServed(e) {
  return e instanceof APIError && e.status === 404
    ? h('p', { class: 'notice info' }, 'This server does not serve workflow runs.')
    : errorNotice(e);
}

export function workflows(main) {
  const err = h('div');
  const results = h('div');
  const more = h('div');
  const dag = h('input', { name: 'dag_id', value: search.dag_id, autocomplete: 'off', spellcheck: 'false' });
  const state = h('select', { name: 'state' }, h('option', { value: '' }, 'Any state'),
    STATES.map((s) => h('option', { value: s, selected: search.state === s }, s.replace('_', ' '))));
  const form = h('form', { class: 'filters panel', role: 'search', 'aria-label': 'Filter workflow runs' },
    field('DAG', dag), field('State', state),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Filter')));
  main.replaceChildren(h('h1', {}, 'Workflows'), form, err, results, more);

  let rows = [];
  async function load(cursor) {
    search.dag_id = dag.value; // a DAG ID may begin or end with spaces
    search.state = state.value;
    try {
      const page = await api('GET', '/workflows/runs', { params: { ...search, limit: 100, cursor } });
      rows = cursor ? rows.concat(page.items) : page.items;
      results.replaceChildren(h('p', { 'aria-live': 'polite' }, `${fmtNum(rows.length)} run${rows.length === 1 ? '' : 's'}${page.next_cursor ? ' so far' : ''}.`),
        table('Workflow runs', [
          ['Run', (r) => h('a', { href: '#/workflows/' + seg(r.id), dataset: { run: r.id } }, r.id)],
          ['DAG', (r) => r.dag_id],
          ['State', (r) => stateBadge(r.state)],
          ['Created', (r) => fmtTime(r.created_at), 'hide-narrow'],
          ['Ended', (r) => fmtTime(r.ended_at), 'hide-narrow'],
          ['Why', (r) => r.reason || '—'],
        ], rows, 'No run matches.'));
      more.replaceChildren(page.next_cursor ? h('button', { type: 'button', onclick: () => load(page.next_cursor) }, 'Load more') : '');
      err.replaceChildren();
    } catch (e) {
      results.replaceChildren();
      err.replaceChildren(notServed(e));
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); load(''); });
  load('');
}

// history lists a task's attempts, oldest first.
function history(t) {
  if (!t.history || t.history.length === 0) return '—';
  return h('ol', { class: 'attempts' }, t.history.map((a) => h('li', {},
    `#${a.number} ${a.outcome} on ${a.instance || '—'}, ${fmtTime(a.started_at)}`, a.error ? ': ' + a.error : '')));
}

export function workflowRun(main, id) {
  main.replaceChildren(h('h1', {}, 'Workflow run'), h('p', {}, 'Loading…'));
  const back = h('p', {}, h('a', { href: '#/workflows' }, '← Workflows'));
  // The page follows a run that is still going.
  return async () => {
    let r;
    try {
      // The query form: a run named . or .. cannot be a path segment.
      r = await api('GET', '/workflows/run', { params: { id } });
    } catch (e) {
      fill(main, back, h('h1', {}, 'Workflow run'), notServed(e));
      return;
    }
    const unknown = r.tasks.some((t) => t.upstream === null);
    const fields = [
      ['Run', h('code', {}, r.id)], ['DAG', r.dag_id], ['State', stateBadge(r.state)],
      ['Why', r.reason || '—'], ['Held by', r.owner || '—'],
      ['Created', fmtTime(r.created_at)], ['Ended', fmtTime(r.ended_at)],
    ];
    fill(main, back,
      h('h1', {}, 'Run ', r.id),
      h('section', { class: 'panel', 'aria-label': 'Run' }, h('dl', { class: 'fields' }, fields.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
      h('h2', {}, 'Tasks'),
      table('Tasks, in dependency order', [
        ['Task', (t) => h('span', { dataset: { task: t.id } }, t.id)],
        ['State', (t) => stateBadge(t.state)],
        ['Upstream', (t) => (t.upstream === null ? '?' : t.upstream.join(', ') || '—')],
        ['Attempts', (t) => fmtNum(t.attempts), 'num'],
        ['Why', (t) => [t.reason || '—', t.error && !(t.reason || '').includes(t.error) ? ` (error: ${t.error})` : '']],
        ['Dead letter', (t) => (t.dead_letter_id ? h('a', { href: '#/dead-letters/' + seg(t.dead_letter_id) }, 'entry') : '—')],
        ['Attempts made', history, 'hide-narrow'],
      ], r.tasks, 'The run has no tasks.'),
      unknown ? h('p', { class: 'muted' }, 'Upstream ?: the run was stored before runs kept their DAG\'s edges, and this server does not have the DAG.') : '');
  };
}
