// A small line chart in SVG: rates over the last minutes, redrawn on every
// sample.
import { h, svg } from './dom.js';

const H = 170, L = 44, R = 8, T = 10, B = 22;
// MIN_SPAN is the shortest time the x axis shows: a chart opened a moment
// ago spreads its first samples over it and widens to windowMs.
const MIN_SPAN = 10 * 1000;

// lineChart returns {el, draw(samples)}; series are [{key, label, cls}] and
// each sample is {t (ms), [key]: value}.
export function lineChart(title, series, windowMs) {
  const box = svg('svg', { role: 'img' });
  const legend = h('div', { class: 'legend' }, series.map((s) =>
    h('span', {}, h('span', { class: 'key k-' + s.cls, 'aria-hidden': 'true' }), s.label, ' ', h('strong', { dataset: { series: s.key } }, '—'))));
  const el = h('figure', { class: 'chart panel' }, h('figcaption', {}, h('strong', {}, title)), box, legend);

  function draw(samples) {
    // Draw in the element's own pixels so that text is never stretched.
    const W = Math.max(200, Math.round(box.getBoundingClientRect().width) || 600);
    box.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const now = samples.length ? samples[samples.length - 1].t : Date.now();
    const span = Math.min(windowMs, Math.max(MIN_SPAN, samples.length ? now - samples[0].t : 0));
    const from = now - span;
    const pts = samples.filter((s) => s.t >= from);
    let max = 1;
    for (const p of pts) for (const s of series) max = Math.max(max, p[s.key] || 0);
    max = niceCeil(max);
    const x = (t) => L + ((t - from) / span) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    const kids = [];
    for (const f of [0, 0.5, 1]) {
      kids.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }));
      kids.push(svg('text', { class: 'axis', x: L - 4, y: y(max * f) + 4, 'text-anchor': 'end' }, fmtRate(max * f)));
    }
    kids.push(svg('text', { class: 'axis', x: L, y: H - 5 }, '−' + (span < 60000 ? `${Math.round(span / 1000)} s` : `${Math.round(span / 60000)} min`)));
    kids.push(svg('text', { class: 'axis', x: W - R, y: H - 5, 'text-anchor': 'end' }, 'now'));
    for (const s of series) {
      const line = pts.map((p) => `${x(p.t).toFixed(1)},${y(p[s.key] || 0).toFixed(1)}`).join(' ');
      if (pts.length > 1) kids.push(svg('polyline', { class: 's-' + s.cls, points: line }));
    }
    box.replaceChildren(...kids);
    const last = pts[pts.length - 1] || {};
    const words = series.map((s) => `${s.label} ${fmtRate(last[s.key] || 0)} per second`).join(', ');
    box.setAttribute('aria-label', `${title}, latest: ${words}`);
    for (const s of series) {
      el.querySelector(`[data-series="${s.key}"]`).textContent = pts.length ? fmtRate(last[s.key] || 0) + '/s' : '—';
    }
  }
  draw([]);
  return { el, draw };
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtRate(v) {
  if (v >= 100) return String(Math.round(v));
  if (v >= 10) return v.toFixed(1).replace(/\.0$/, '');
  return v.toFixed(2).replace(/\.?0+$/, '') || '0';
}
