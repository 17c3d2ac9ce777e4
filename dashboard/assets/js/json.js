// JSON as text. A payload is shown as the API sent it, never through
// JSON.parse and JSON.stringify: those round 12345678901234567890 to
// 12345678901234567000, turn 1e400 into null, write 10.50 as 10.5 and keep
// only the last of repeated keys. Here every token is copied as it stands;
// only the white space between tokens changes.

// SPACE is the white space JSON allows between tokens; TOKEN is one
// token: a punctuator, a string, or a bare word (a number, true, false or
// null, copied as is).
const SPACE = /[ \t\n\r]*/y;
const TOKEN = /([{}[\]:,])|("[^"\\]*(?:\\[^][^"\\]*)*")|([^ \t\n\r{}[\]:,"]+)/y;

// tokens returns the tokens of text as { kind, text, start, end }, kind
// being the punctuator itself, 'string' or 'word'. It throws on text that
// is not made of JSON tokens.
function tokens(text) {
  const out = [];
  for (let at = 0; ;) {
    SPACE.lastIndex = at;
    SPACE.exec(text);
    at = SPACE.lastIndex;
    if (at >= text.length) return out;
    TOKEN.lastIndex = at;
    const m = TOKEN.exec(text);
    if (!m) throw new SyntaxError(`not JSON at offset ${at}`);
    out.push({ kind: m[1] || (m[2] !== undefined ? 'string' : 'word'), text: m[0], start: at, end: TOKEN.lastIndex });
    at = TOKEN.lastIndex;
  }
}

// member returns the source text of the member name of the JSON object
// text (the last one if the name repeats, as JSON.parse keeps), or
// undefined when the object has none. A member whose value is null
// returns 'null'.
export function member(text, name) {
  const toks = tokens(text);
  if (!toks.length || toks[0].kind !== '{') return undefined;
  let found;
  let i = 1;
  while (i < toks.length && toks[i].kind === 'string') {
    const key = JSON.parse(toks[i].text);
    if (toks[i + 1]?.kind !== ':') break;
    const first = i + 2;
    let last = first;
    for (let depth = 0; last < toks.length; last++) {
      const k = toks[last].kind;
      if (k === '{' || k === '[') depth++;
      else if (k === '}' || k === ']') depth--;
      if (depth <= 0) break;
    }
    if (last >= toks.length) break;
    if (key === name) found = text.slice(toks[first].start, toks[last].end);
    i = last + 1;
    if (toks[i]?.kind !== ',') break;
    i++;
  }
  return found;
}

// HTML_SAFE are the escapes encoding/json writes for <, > and & in every
// string; they are written back as the characters, the same string either
// way. Any other escape stays as it was.
const HTML_SAFE = /\\(?:u(003[cCeE]|0026)|[^])/g;

// pretty indents the JSON text by two spaces a level, as
// JSON.stringify(v, null, 2) would lay it out, without changing a token.
// Text that is not JSON comes back as it is.
export function pretty(text) {
  let toks;
  try { toks = tokens(text); } catch { return text; }
  let out = '';
  let depth = 0;
  const newline = () => '\n' + '  '.repeat(Math.max(0, depth));
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i];
    switch (t.kind) {
      case '{': case '[': {
        const close = t.kind === '{' ? '}' : ']';
        if (toks[i + 1]?.kind === close) { out += t.kind + close; i++; break; }
        depth++;
        out += t.kind + newline();
        break;
      }
      case '}': case ']': depth--; out += newline() + t.kind; break;
      case ',': out += ',' + newline(); break;
      case ':': out += ': '; break;
      case 'string': out += t.text.replace(HTML_SAFE, (m, hex) => (hex ? String.fromCharCode(parseInt(hex, 16)) : m)); break;
      default: out += t.text;
    }
  }
  return out;
}
