// The admin API client: the bearer token kept in sessionStorage (gone when
// the tab closes), JSON in and out, RFC 9457 problems turned into errors.
import { member } from './json.js';

const TOKEN_KEY = 'backstop.token';
const ROLE_KEY = 'backstop.role';

export class APIError extends Error {
  constructor(status, problem) {
    const title = (problem && problem.title) || `HTTP ${status}`;
    const detail = problem && problem.detail ? `: ${problem.detail}` : '';
    super(title + detail);
    this.status = status;
    this.problem = problem || {};
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ''; },
  get role() { return sessionStorage.getItem(ROLE_KEY) || ''; },
  get canOperate() { return this.role === 'operate'; },
  set(token, role) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(ROLE_KEY, role);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ROLE_KEY);
  },
};

// query builds a query string from the non-empty values of params.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// seg escapes one path segment (a stream name may hold a slash).
export const seg = (s) => encodeURIComponent(s);

// sources keeps the text of each decoded answer, for rawMember.
const sources = new WeakMap();

// rawMember returns the source text of a member of an answer api
// returned, exactly as the server wrote it ('null' for a null), or
// undefined when the answer has no such member. A payload is read this way:
// decoded, its numbers would be rounded and its repeated keys merged.
export function rawMember(answer, name) {
  const text = sources.get(answer);
  return text === undefined ? undefined : member(text, name);
}

// api calls the admin API and returns the decoded JSON body (rawMember
// reads its members as text).
export async function api(method, path, { params, body, token } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const t = token ?? session.token;
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch('/v1' + path + query(params), init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
    if (data !== null && typeof data === 'object') sources.set(data, text);
  }
  if (!resp.ok) {
    const err = new APIError(resp.status, data);
    // The session's token refused (revoked, or the server restarted with
    // others): the shell signs the tab out.
    if (resp.status === 401 && token === undefined) window.dispatchEvent(new CustomEvent('backstop:unauthorized', { detail: err }));
    throw err;
  }
  return data;
}

// ROLE_PROBE is a dry run of a bulk replay matching no entry: an operate
// token gets 200 and nothing changes, a read token gets 403. The API has no
// "who am I" route, so this is how the dashboard learns the role.
const ROLE_PROBE = { fingerprint: 'backstop-dashboard-role-probe', dry_run: true };

// signIn checks a token and learns its role; it throws APIError (401) for
// a token the server does not know.
export async function signIn(token) {
  await api('GET', '/stats', { token });
  let role = 'read';
  try {
    await api('POST', '/dlq/replay', { token, body: ROLE_PROBE });
    role = 'operate';
  } catch (e) {
    if (!(e instanceof APIError) || e.status !== 403) throw e;
  }
  session.set(token, role);
  return role;
}

// listAll pages through a list route until limit items or the end,
// without the items' payloads: no listing shows one, and a page of 1,000
// with them could weigh a gigabyte.
export async function listAll(path, params, limit) {
  const items = [];
  let cursor = '';
  for (;;) {
    const page = await api('GET', path, { params: { ...params, payload: 'false', limit: Math.min(1000, limit - items.length), cursor } });
    items.push(...page.items);
    cursor = page.next_cursor || '';
    if (!cursor || items.length >= limit) return { items, more: !!cursor };
  }
}
