// DOM building and formatting. Every text from the API goes in through
// text nodes, never parsed as markup: payloads, errors and names may hold
// anything, markup included. h and fill show every text, and every title
// and aria-label, with its invisible and bidirectional control characters
// escaped (escapeInvisible): an error text quotes what a webhook endpoint
// answered, and a name or a note is whatever was written into the store.
import { pretty } from './json.js';

// h creates an element: h('a', {href: '#/'}, 'text', child, [more]).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else if (SHOWN.has(k)) el.setAttribute(k, escapeInvisible(String(v)));
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

// SHOWN are the attributes whose text a person reads (as a tooltip or
// through a screen reader); h escapes them as it does text.
const SHOWN = new Set(['title', 'aria-label']);

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(escapeInvisible(String(c))));
  }
}

// fill replaces el's children, skipping null, undefined and false and
// flattening arrays as h does.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// svg creates an SVG element.
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

let ids = 0;
// field is a labelled control.
export function field(label, control) {
  if (!control.id) control.id = 'f' + (++ids);
  return h('div', {}, h('label', { for: control.id }, label), control);
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// fmtAge says how long ago in the largest whole unit: 42 s, 3 min, 5 h, 2 d.
export function fmtDuration(secs) {
  if (secs === null || secs === undefined || isNaN(secs)) return '—';
  const s = Math.max(0, Math.round(secs));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export const fmtNum = (n) => (n === undefined || n === null ? '—' : Number(n).toLocaleString('en'));

export const plural = (n, one, many) => `${fmtNum(n)} ${n === 1 ? one : (many || one + 's')}`;

export function badge(text, cls) {
  return h('span', { class: 'badge ' + (cls || String(text).toLowerCase()) }, text);
}

// escapeInvisible writes invisible and bidirectional control characters
// as \uXXXX (valid inside a JSON string; a character beyond U+FFFF as its
// surrogate pair), so that a payload cannot hide or reorder what the
// operator reads: every format character (Cf, as the CLI's termtext
// escapes: the Bidi_Control ones U+061C, U+200E, U+200F, U+202A to U+202E,
// U+2066 to U+2069; the zero-width ones U+200B to U+200D, U+2060 to U+2064,
// U+FEFF; U+00AD, U+180E; the tag characters U+E0001 and U+E0020 to
// U+E007F, which spell hidden ASCII; the interlinear annotations U+FFF9 to
// U+FFFB), U+2065 and the line and paragraph separators, and the control
// characters but tab and line breaks (C0, DEL, C1): a name written by hand
// into the store, such as a circuit's destination, may hold an ESC the
// browser shows as nothing.
export function escapeInvisible(text) {
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u2028\u2029\u2065\p{Cf}]/gu, (c) => {
    let out = '';
    for (let i = 0; i < c.length; i++) out += '\\u' + c.charCodeAt(i).toString(16).padStart(4, '0');
    return out;
  });
}

// payloadView shows a payload: json, the JSON's source text (rawMember),
// indented without changing a token; else the base64 of bytes that are not
// JSON as a hex dump (offset, hex, printable ASCII).
export function payloadView(json, base64) {
  if (json !== undefined) {
    return h('pre', { class: 'payload', 'aria-label': 'Payload (JSON)' }, pretty(json));
  }
  if (!base64) return h('p', { class: 'muted' }, 'No payload.');
  const bin = atob(base64);
  const lines = [];
  for (let off = 0; off < bin.length && off < 64 * 1024; off += 16) {
    const chunk = bin.slice(off, off + 16);
    let hex = '', asc = '';
    for (let i = 0; i < 16; i++) {
      if (i < chunk.length) {
        const c = chunk.charCodeAt(i);
        hex += c.toString(16).padStart(2, '0') + ' ';
        asc += c >= 0x20 && c < 0x7f ? chunk[i] : '.';
      } else hex += '   ';
      if (i === 7) hex += ' ';
    }
    lines.push(off.toString(16).padStart(8, '0') + '  ' + hex + ' ' + asc);
  }
  if (bin.length > 64 * 1024) lines.push(`… ${fmtNum(bin.length)} bytes in all`);
  return h('div', {},
    h('p', { class: 'muted small' }, `Binary payload, ${plural(bin.length, 'byte')}, shown in hex.`),
    h('pre', { class: 'payload', 'aria-label': 'Payload (hex)' }, lines.join('\n')));
}

export function kvTable(obj, caption) {
  const keys = Object.keys(obj || {}).sort();
  if (!keys.length) return h('p', { class: 'muted' }, `No ${caption.toLowerCase()}.`);
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', { class: 'skip' }, caption),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Value'))),
    h('tbody', {}, keys.map((k) => h('tr', {}, h('td', {}, h('code', {}, k)), h('td', {}, h('code', {}, String(obj[k]))))))));
}

// table renders rows under headers: cols are [header, cell(row), class].
export function table(caption, cols, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted' }, empty || 'Nothing.');
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', { class: 'skip' }, caption),
    h('thead', {}, h('tr', {}, cols.map(([head, , cls]) => h('th', { scope: 'col', class: cls }, head)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, cols.map(([, cell, cls]) => h('td', { class: cls }, cell(r))))))));
}

// notify shows a message in the live region at the top of the page.
export function notify(text, kind = 'info') {
  const box = document.getElementById('status');
  box.replaceChildren(h('div', { class: 'notice ' + kind }, text));
}

export function clearNotice() {
  document.getElementById('status').replaceChildren();
}

export function errorNotice(err) {
  return h('div', { class: 'notice error', role: 'alert' }, String(err && err.message ? err.message : err));
}

// shortID shows the end of a long id (ids are UUIDv7: their start is the
// time, shared by ids made together), the whole of it in the title.
export function shortID(id) {
  return h('code', { title: id }, id && id.length > 13 ? '…' + id.slice(-8) : id);
}
