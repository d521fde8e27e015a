// The request fingerprint of docs/fingerprint.md, computed client-side: the same 32 bytes as
// SQL idempotency.fingerprint(body::jsonb, exclude) for every JSON text PostgreSQL accepts.
// A JSON text is parsed here, exactly: numbers keep every digit (never through JSON.parse).
import { createHash } from 'node:crypto';
import { InvalidJsonError, InvalidParameterValueError, ProgramLimitExceededError } from './errors.js';

export const MAX_DEPTH = 1000;
export const MAX_DIGITS = 1000;

const tooDeep = () => new ProgramLimitExceededError(`JSON nesting exceeds ${MAX_DEPTH} levels`);
const tooLong = () => new ProgramLimitExceededError(`JSON number has more than ${MAX_DIGITS} digits`);

const NUMBER = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$/;

// The canonical form of a JSON number text (section 3 of docs/fingerprint.md).
export function canonicalNumber(text) {
  const m = NUMBER.exec(text);
  if (m === null) throw new InvalidJsonError(`invalid JSON number "${text.slice(0, 40)}"`);
  const [, negative, intDigits, frac = '', exp = '0'] = m;
  const digits = (intDigits + frac).replace(/^0+/, '');
  if (digits === '') return '0';
  // A non-zero number whose exponent has 16 or more digits is far beyond MAX_DIGITS digits.
  if (exp.replace(/^[-+]?0*/, '').length > 15) throw tooLong();
  const significand = digits.replace(/0+$/, '');
  const n = significand.length;
  const x = Number(exp) - frac.length + (digits.length - n);
  const point = n + x;
  const width = x >= 0 ? n + x : point > 0 ? n : 1 - x;
  if (width > MAX_DIGITS) throw tooLong();
  const sign = negative ? '-' : '';
  if (x >= 0) return sign + significand + '0'.repeat(x);
  if (point > 0) return `${sign}${significand.slice(0, point)}.${significand.slice(point)}`;
  return `${sign}0.${'0'.repeat(-point)}${significand}`;
}

// Parsed values: numbers in canonical form, objects with their members as written.
class Num {
  constructor(text) { this.text = text; }
}
class Obj {
  constructor() { this.names = []; this.values = []; }
}

const NUMBER_TOKEN = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/y;
const PLAIN_RUN = /[^"\\\u0000-\u001f\ud800-\udfff]*/y;
const isSpace = (c) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

// Parses a JSON text (a JS string) into Num / Obj / array / string / true / false / null.
// Iterative, so that a text nested far deeper than MAX_DEPTH cannot overflow the stack. As in
// SQL, a syntax error anywhere wins over a limit (nesting, digits), which is raised after.
function parseText(text) {
  let pos = 0;
  let limit = null;
  const stack = [];
  const fail = (what) => {
    const near = pos < text.length ? `"${text.slice(pos, pos + 20)}"` : 'the end of the text';
    return new InvalidJsonError(`invalid JSON: ${what} at character ${pos + 1}, near ${near}`);
  };
  const skipSpace = () => {
    while (pos < text.length && isSpace(text.charCodeAt(pos))) pos++;
  };
  const hex4 = () => {
    const h = text.slice(pos, pos + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) throw fail('bad \\u escape');
    pos += 4;
    return parseInt(h, 16);
  };
  const parseString = () => {
    pos++; // the opening quote
    let out = '';
    for (;;) {
      PLAIN_RUN.lastIndex = pos;
      PLAIN_RUN.exec(text);
      if (PLAIN_RUN.lastIndex > pos) {
        out += text.slice(pos, PLAIN_RUN.lastIndex);
        pos = PLAIN_RUN.lastIndex;
      }
      if (pos >= text.length) throw fail('unterminated string');
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        pos++;
        return out;
      }
      if (c < 0x20) throw fail('control character in a string');
      if (c >= 0xd800 && c <= 0xdfff) { // a raw surrogate: only a well-formed pair
        const d = text.charCodeAt(pos + 1);
        if (c > 0xdbff || !(d >= 0xdc00 && d <= 0xdfff)) throw fail('unpaired surrogate');
        out += text.slice(pos, pos + 2);
        pos += 2;
        continue;
      }
      pos++; // a backslash
      const e = text[pos++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const u = hex4();
          if (u === 0) {
            throw new InvalidJsonError(
              'unsupported Unicode escape sequence: \\u0000 cannot be stored', { code: '22P05' });
          }
          if (u >= 0xdc00 && u <= 0xdfff) throw fail('unpaired low surrogate escape');
          if (u >= 0xd800 && u <= 0xdbff) {
            if (text[pos] !== '\\' || text[pos + 1] !== 'u') throw fail('unpaired high surrogate escape');
            pos += 2;
            const low = hex4();
            if (!(low >= 0xdc00 && low <= 0xdfff)) throw fail('unpaired high surrogate escape');
            out += String.fromCharCode(u, low);
          } else {
            out += String.fromCharCode(u);
          }
          break;
        }
        default:
          pos--;
          throw fail('bad escape');
      }
    }
  };
  const parseName = (obj) => {
    if (text.charCodeAt(pos) !== 0x22) throw fail('expected a member name');
    obj.names.push(parseString());
    skipSpace();
    if (text.charCodeAt(pos) !== 0x3a) throw fail('expected ":"');
    pos++;
    skipSpace();
  };

  skipSpace();
  for (;;) {
    // A value starts at pos.
    let value;
    const c = text.charCodeAt(pos);
    if (c === 0x7b || c === 0x5b) { // { [
      pos++;
      if (stack.length >= MAX_DEPTH && limit === null) limit = tooDeep();
      const container = c === 0x7b ? new Obj() : [];
      skipSpace();
      const close = c === 0x7b ? 0x7d : 0x5d;
      if (text.charCodeAt(pos) === close) {
        pos++;
        value = container;
      } else {
        stack.push(container);
        if (c === 0x7b) parseName(container);
        continue;
      }
    } else if (c === 0x22) {
      value = parseString();
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER_TOKEN.lastIndex = pos;
      const m = NUMBER_TOKEN.exec(text);
      if (m === null) throw fail('invalid number');
      pos = NUMBER_TOKEN.lastIndex;
      try {
        value = new Num(canonicalNumber(m[0]));
      } catch (err) {
        if (limit === null) limit = err;
        value = new Num('0');
      }
    } else if (text.startsWith('true', pos)) {
      pos += 4;
      value = true;
    } else if (text.startsWith('false', pos)) {
      pos += 5;
      value = false;
    } else if (text.startsWith('null', pos)) {
      pos += 4;
      value = null;
    } else {
      throw fail(pos >= text.length ? 'expected a value' : 'unexpected token');
    }
    // Attach the value to its container; close containers that end here.
    for (;;) {
      skipSpace();
      if (stack.length === 0) {
        if (pos !== text.length) throw fail('text after the value');
        if (limit !== null) throw limit;
        return value;
      }
      const top = stack[stack.length - 1];
      const isObj = top instanceof Obj;
      if (isObj) top.values.push(value);
      else top.push(value);
      const d = text.charCodeAt(pos);
      if (d === 0x2c) { // ,
        pos++;
        skipSpace();
        if (isObj) parseName(top);
        break;
      }
      if (d !== (isObj ? 0x7d : 0x5d)) throw fail(`expected "," or "${isObj ? '}' : ']'}"`);
      pos++;
      value = stack.pop();
    }
  }
}

// Code point order of well-formed UTF-16 strings (the order of their UTF-8 bytes): units
// D800-DFFF stand for code points above FFFF, so they move above E000-FFFF.
function codePointUnit(u) {
  if (u >= 0xd800 && u <= 0xdfff) return u + 0x2000;
  if (u >= 0xe000) return u - 0x800;
  return u;
}
export function compareNames(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointUnit(x) - codePointUnit(y);
  }
  return a.length - b.length;
}

function checkString(s) {
  if (s.includes('\u0000')) {
    throw new InvalidJsonError('unsupported Unicode escape sequence: \\u0000 cannot be stored',
      { code: '22P05' });
  }
  if (!s.isWellFormed()) throw new InvalidJsonError('invalid JSON: unpaired Unicode surrogate in a string');
}

// JSON.stringify escapes exactly as section 4 does, for well-formed strings.
const quote = JSON.stringify;

function checkExclude(exclude) {
  if (exclude === undefined) return [];
  if (exclude === null || typeof exclude === 'string' ||
      typeof exclude[Symbol.iterator] !== 'function') {
    throw new InvalidParameterValueError('exclude must be an array of strings', {
      detail: `got ${exclude === null ? 'null' : `a ${typeof exclude}`}`,
      hint: "write { exclude: ['sent_at'] }, not { exclude: 'sent_at' }",
    });
  }
  const paths = [...exclude];
  for (const p of paths) {
    if (typeof p !== 'string') {
      throw new InvalidParameterValueError('exclude must be an array of strings',
        { detail: `an element is ${p === null ? 'null' : `a ${typeof p}`}` });
    }
    if (p === '' || p.startsWith('.') || p.endsWith('.') || p.includes('..'))
      throw new InvalidParameterValueError(`invalid exclude path "${p}"`);
  }
  return paths;
}

class Writer {
  constructor(paths) {
    this.paths = new Set(paths);
    this.prefixes = new Set();
    for (const p of paths) {
      const segments = p.split('.');
      for (let i = 1; i < segments.length; i++) this.prefixes.add(segments.slice(0, i).join('.'));
    }
    this.out = '';
  }

  // path: the dotted prefix of this object's members ('' at the top, 'a.b.'), or null where
  // exclusion cannot reach.
  writeMembers(names, values, depth, path) {
    // Member order by name, the written order among equal names: of duplicates, the last wins.
    const order = names.map((_, i) => i);
    if (order.length > 1)
      order.sort((a, b) => compareNames(names[a], names[b]) || a - b);
    this.out += '{';
    let first = true;
    for (let k = 0; k < order.length; k++) {
      const i = order[k];
      const name = names[i];
      if (k + 1 < order.length && names[order[k + 1]] === name) continue;
      let childPath = null;
      if (path !== null && !name.includes('.')) {
        const full = path + name;
        if (this.paths.has(full)) continue;
        if (this.prefixes.has(full)) childPath = `${full}.`;
      }
      this.out += first ? `${quote(name)}:` : `,${quote(name)}:`;
      first = false;
      this.write(values[i], depth + 1, childPath);
    }
    this.out += '}';
  }

  // A parsed value (from parseText): checked already.
  write(v, depth, path) {
    if (v instanceof Obj) {
      this.writeMembers(v.names, v.values, depth, path);
    } else if (Array.isArray(v)) {
      this.out += '[';
      for (let i = 0; i < v.length; i++) {
        if (i) this.out += ',';
        this.write(v[i], depth + 1, null);
      }
      this.out += ']';
    } else if (v instanceof Num) {
      this.out += v.text;
    } else if (typeof v === 'string') {
      this.out += quote(v);
    } else {
      this.out += String(v); // true, false, null
    }
  }
}

// A JavaScript value as its JSON text would be, as JSON.stringify sees it (toJSON, undefined
// and functions skipped in objects and null in arrays), but exact: numbers as String(n), the
// shortest round-trip text, and bigints whole. NaN and Infinity are errors, not null.
function toTree(v, depth, key) {
  if (v !== null && typeof v === 'object' && typeof v.toJSON === 'function') v = v.toJSON(key);
  switch (typeof v) {
    case 'string':
      checkString(v);
      return v;
    case 'number':
      if (!Number.isFinite(v)) throw new InvalidJsonError(`invalid JSON: ${v} is not a JSON number`);
      return new Num(canonicalNumber(String(v)));
    case 'bigint':
      return new Num(canonicalNumber(v.toString()));
    case 'boolean':
      return v;
    case 'object': {
      if (v === null) return null;
      if (depth >= MAX_DEPTH) throw tooDeep();
      if (v instanceof Number || v instanceof String || v instanceof Boolean)
        return toTree(v.valueOf(), depth, key);
      if (Array.isArray(v)) {
        return Array.from(v, (item, i) => {
          const t = skippable(item) ? null : toTree(item, depth + 1, String(i));
          return t === undefined ? null : t;
        });
      }
      const obj = new Obj();
      for (const name of Object.keys(v)) {
        const item = v[name];
        if (skippable(item)) continue;
        checkString(name);
        obj.names.push(name);
        obj.values.push(toTree(item, depth + 1, name));
      }
      return obj;
    }
    default:
      return undefined;
  }
}
const skippable = (v) => v === undefined || typeof v === 'function' || typeof v === 'symbol';

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function textOf(body) {
  if (typeof body === 'string') return body;
  try {
    return decoder.decode(body);
  } catch {
    throw new InvalidJsonError('invalid JSON: the text is not valid UTF-8');
  }
}

const isText = (body) => typeof body === 'string' || body instanceof Uint8Array;

function treeOf(body, asValue) {
  if (!asValue && isText(body)) {
    return parseText(textOf(body));
  }
  const tree = toTree(body, 0, '');
  if (tree === undefined) throw new TypeError(`fingerprint: ${typeof body} is not a JSON value`);
  return tree;
}

// The canonical form as UTF-8 bytes. body: a JSON text (a string, or UTF-8 bytes in a Buffer /
// Uint8Array) or a JavaScript value (object, array, number, bigint, boolean, null). Options:
// exclude (an array of dotted paths), asValue (true: a string is a JSON string value).
export function canonicalJson(body, { exclude, asValue = false } = {}) {
  const paths = checkExclude(exclude);
  const tree = treeOf(body, asValue);
  const writer = new Writer(paths);
  writer.write(tree, 0, paths.length > 0 ? '' : null);
  return Buffer.from(writer.out, 'utf8');
}

// SHA-256 of the canonical form: 32 bytes, equal to SQL
// idempotency.fingerprint(body::jsonb, exclude).
export function fingerprint(body, options = {}) {
  return createHash('sha256').update(canonicalJson(body, options)).digest();
}

// fingerprint of a value, a string being a JSON string value (not a text).
export function fingerprintValue(value, options = {}) {
  return fingerprint(value, { ...options, asValue: true });
}
