// Overview: rates over time, the dead-letter queue, the scheduled backlog,
// blocked streams and each destination's state, polled live.
import { api } from './api.js';
import { h, fmtNum, fmtDuration, fmtTime, badge, table, errorNotice } from './dom.js';
import { lineChart } from './chart.js';

const WINDOW_MS = 5 * 60 * 1000;

// The samples outlive the page so that the chart has its history when the
// operator comes back to it.
const samples = [];
const polls = []; // the counters of the last polls, oldest first

// RATE_MS is the least time a rate is measured over: polls that bunch up
// (a slow answer, then a quick one) would otherwise read as spikes.
const RATE_MS = 1000;

// counters sums the destinations' counts. The API's breakers carry
// delivered and failed; dead_lettered and in_flight are read when the
// server reports them, else derived (see below).
function counters(stats, breakers) {
  const c = { t: Date.now(), delivered: 0, failed: 0, dead: null, depth: stats.dlq_depth };
  let dead = 0, haveDead = true;
  for (const b of breakers) {
    c.delivered += b.delivered || 0;
    c.failed += b.failed || 0;
    if (typeof b.dead_lettered === 'number') dead += b.dead_lettered; else haveDead = false;
  }
  if (haveDead && breakers.length) c.dead = dead;
  return c;
}

function sample(c) {
  let last = null;
  for (const p of polls) if (c.t - p.t >= RATE_MS) last = p;
  polls.push(c);
  while (polls.length > 2 && c.t - polls[1].t >= RATE_MS) polls.shift();
  if (last) {
    const dt = (c.t - last.t) / 1000;
    const rate = (a, b) => (a >= b ? (a - b) / dt : 0); // a counter reset reads as 0
    // Without a dead-letter counter, growth of the queue's depth stands in
    // for it (a replay during the interval hides as many new entries).
    const dead = c.dead !== null && last.dead !== null ? rate(c.dead, last.dead) : rate(c.depth, last.depth);
    samples.push({ t: c.t, delivered: rate(c.delivered, last.delivered), failed: rate(c.failed, last.failed), dead });
    while (samples.length && samples[0].t < c.t - WINDOW_MS) samples.shift();
  }
}

// inFlight counts the leased messages per destination, when the breakers
// do not report in_flight themselves (a server whose breakers come from the
// store's circuits, not from a relay of its own). The page of leased
// messages is a costly read on a large outbox, so serve reports in_flight.
async function inFlight(breakers) {
  if (breakers.length && breakers.every((b) => typeof b.in_flight === 'number')) {
    return Object.fromEntries(breakers.map((b) => [b.destination, b.in_flight]));
  }
  const page = await api('GET', '/messages', { params: { state: 'leased', payload: 'false', limit: 1000 } });
  const out = {};
  for (const m of page.items) out[m.destination] = (out[m.destination] || 0) + 1;
  out.more = !!page.next_cursor;
  return out;
}

function tile(label, value, sub, alert) {
  return h('div', { class: 'tile' + (alert ? ' alert' : '') }, h('div', { class: 'label' }, label),
    h('div', { class: 'value', dataset: { tile: label } }, value), h('div', { class: 'sub' }, sub || '\u00a0'));
}

// reportsRelay says the breaker comes from a relay in this server, which
// reports its pause (paused_until, absent when not paused) and in_flight.
function reportsRelay(b) {
  return 'paused_until' in b || typeof b.in_flight === 'number';
}

function pausedText(b) {
  if (!b.paused_until) return 'no';
  const until = new Date(b.paused_until);
  return until > new Date() ? `until ${fmtTime(b.paused_until)}` : 'no';
}

export function overview(main) {
  const chart = lineChart('Outcomes per second', [
    { key: 'delivered', label: 'Delivered', cls: 'delivered' },
    { key: 'failed', label: 'Failed attempts', cls: 'failed' },
    { key: 'dead', label: 'Dead-lettered', cls: 'dead' },
  ], WINDOW_MS);
  const tiles = h('div', { class: 'tiles' });
  const dests = h('section', { 'aria-labelledby': 'dests-h' });
  const reasons = h('section', { 'aria-labelledby': 'reasons-h' });
  const err = h('div');
  const updated = h('p', { class: 'muted small', 'aria-live': 'off' });
  main.replaceChildren(h('h1', {}, 'Overview'), err, tiles, chart.el, dests, reasons, updated);

  async function poll() {
    try {
      const t = Date.now();
      const [stats, br] = await Promise.all([api('GET', '/stats'), api('GET', '/breakers')]);
      const breakers = br.items || [];
      const flight = await inFlight(breakers);
      sample({ ...counters(stats, breakers), t });
      chart.draw(samples);
      const bl = stats.scheduled_backlog || {};
      tiles.replaceChildren(
        tile('Dead letters', fmtNum(stats.dlq_depth), stats.dlq_depth ? `oldest ${fmtDuration(stats.dlq_oldest_age_seconds)} old` : 'queue empty', stats.dlq_depth > 0),
        tile('Scheduled backlog', fmtNum(bl.count), bl.next ? `next try ${fmtTime(bl.next)}` : 'nothing waiting'),
        tile('Blocked streams', fmtNum(stats.blocked_streams), stats.blocked_streams ? h('a', { href: '#/streams' }, 'see why') : 'none', stats.blocked_streams > 0),
        tile('Poison candidates', fmtNum((stats.poison_candidates || []).length), 'failing for 3 attempts or more'),
      );
      dests.replaceChildren(h('h2', { id: 'dests-h' }, 'Destinations'), table('Destinations', [
        ['Destination', (b) => b.destination],
        ['Circuit', (b) => badge(b.state, b.state)],
        ['Paused by Retry-After', (b) => (reportsRelay(b) ? pausedText(b) : h('span', { class: 'muted', title: 'not reported by this server' }, 'n/a'))],
        ['In flight', (b) => fmtNum(flight[b.destination] || 0) + (flight.more ? '+' : ''), 'num'],
        ['Delivered', (b) => fmtNum(b.delivered), 'num'],
        ['Failed', (b) => fmtNum(b.failed), 'num'],
        ['Released', (b) => fmtNum(b.released), 'num hide-narrow'],
        ['Openings', (b) => fmtNum(b.openings), 'num hide-narrow'],
      ], breakers, 'No destination reports a breaker (is a relay running in this server?).'));
      reasons.replaceChildren(h('h2', { id: 'reasons-h' }, 'Failing messages by reason'), table('Failure reasons', [
        ['Reason', (r) => r.reason],
        ['Messages', (r) => fmtNum(r.count), 'num'],
      ], stats.failure_reasons || [], 'No message is failing.'));
      updated.textContent = 'Updated ' + fmtTime(new Date().toISOString());
      err.replaceChildren();
    } catch (e) {
      err.replaceChildren(errorNotice(e));
    }
  }
  return poll;
}
