package io.github.pgidempotency.idempotency;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A strict JSON parser over UTF-8 bytes, the input rules of docs/fingerprint.md: RFC 8259, valid
 * UTF-8, no unpaired surrogate, no {@code \u0000}, at most 1000 levels, numbers whose canonical
 * form has at most 1000 digits. Numbers stay exact decimals (their canonical text), objects keep
 * the last of duplicate members (as jsonb does).
 */
final class Json {
  static final int MAX_DEPTH = 1000;
  static final int MAX_DIGITS = 1000;

  /** A number: its canonical text (section 3 of docs/fingerprint.md). */
  record Num(String canonical) {}

  /** The JSON null (Java's null is not used as a value). */
  static final Object NULL = new Object() {
        @Override
        public String toString() {
          return "null";
        }
      };

  private final byte[] in;
  private int pos;

  private Json(byte[] in) {
    this.in = in;
  }

  /** Parses a JSON text: Map (String keys), List, String, Num, Boolean or NULL. */
  static Object parse(byte[] text) {
    Json p = new Json(text);
    p.ws();
    Object v = p.value(0);
    p.ws();
    if (p.pos != p.in.length) throw p.invalid("unexpected data after the JSON value");
    return v;
  }

  static Object parse(String text) {
    return parse(text.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * The members of a JSON object text, each as the text of its value (as written), in their
   * order; null when the text is not one JSON object.
   */
  static Map<String, String> members(String text) {
    Json p = new Json(text.getBytes(StandardCharsets.UTF_8));
    try {
      p.ws();
      if (p.pos >= p.in.length || p.in[p.pos] != '{') return null;
      p.pos++;
      Map<String, String> m = new LinkedHashMap<>();
      p.ws();
      if (p.pos < p.in.length && p.in[p.pos] == '}') {
        p.pos++;
      } else {
        while (true) {
          p.ws();
          if (p.pos >= p.in.length || p.in[p.pos] != '"') return null;
          String name = p.string();
          p.ws();
          if (p.pos >= p.in.length || p.in[p.pos] != ':') return null;
          p.pos++;
          p.ws();
          int from = p.pos;
          p.value(1);
          m.remove(name);
          m.put(name, new String(p.in, from, p.pos - from, StandardCharsets.UTF_8));
          p.ws();
          if (p.pos >= p.in.length) return null;
          if (p.in[p.pos] == ',') {
            p.pos++;
            continue;
          }
          if (p.in[p.pos] == '}') {
            p.pos++;
            break;
          }
          return null;
        }
      }
      p.ws();
      return p.pos == p.in.length ? m : null;
    } catch (IdempotencyException e) {
      return null;
    }
  }

  private IdempotencyException invalid(String why) {
    return new IdempotencyException.InvalidJson(
        IdempotencyException.INVALID_JSON, "invalid JSON at byte " + pos + ": " + why);
  }

  private void ws() {
    while (pos < in.length) {
      byte b = in[pos];
      if (b == ' ' || b == '\t' || b == '\n' || b == '\r') pos++;
      else break;
    }
  }

  private Object value(int depth) {
    if (pos >= in.length) throw invalid("unexpected end of the text");
    byte b = in[pos];
    switch (b) {
      case '{':
        return object(depth + 1);
      case '[':
        return array(depth + 1);
      case '"':
        return string();
      case 't':
        literal("true");
        return Boolean.TRUE;
      case 'f':
        literal("false");
        return Boolean.FALSE;
      case 'n':
        literal("null");
        return NULL;
      default:
        if (b == '-' || (b >= '0' && b <= '9')) return number();
        throw invalid("unexpected character");
    }
  }

  private void literal(String word) {
    for (int i = 0; i < word.length(); i++) {
      if (pos + i >= in.length || in[pos + i] != word.charAt(i)) throw invalid("bad literal");
    }
    pos += word.length();
  }

  private static void depthCheck(int depth) {
    if (depth > MAX_DEPTH) {
      throw new IdempotencyException.ProgramLimitExceeded(
          "the JSON value nests deeper than " + MAX_DEPTH + " levels");
    }
  }

  private Map<String, Object> object(int depth) {
    depthCheck(depth);
    pos++;
    Map<String, Object> m = new HashMap<>();
    ws();
    if (pos < in.length && in[pos] == '}') {
      pos++;
      return m;
    }
    while (true) {
      ws();
      if (pos >= in.length || in[pos] != '"') throw invalid("expected a member name");
      String name = string();
      ws();
      if (pos >= in.length || in[pos] != ':') throw invalid("expected ':'");
      pos++;
      ws();
      Object v = value(depth);
      m.remove(name);
      m.put(name, v); // the last of duplicate names wins
      ws();
      if (pos >= in.length) throw invalid("unexpected end of the text");
      if (in[pos] == ',') {
        pos++;
        continue;
      }
      if (in[pos] == '}') {
        pos++;
        return m;
      }
      throw invalid("expected ',' or '}'");
    }
  }

  private List<Object> array(int depth) {
    depthCheck(depth);
    pos++;
    List<Object> l = new ArrayList<>();
    ws();
    if (pos < in.length && in[pos] == ']') {
      pos++;
      return l;
    }
    while (true) {
      ws();
      l.add(value(depth));
      ws();
      if (pos >= in.length) throw invalid("unexpected end of the text");
      if (in[pos] == ',') {
        pos++;
        continue;
      }
      if (in[pos] == ']') {
        pos++;
        return l;
      }
      throw invalid("expected ',' or ']'");
    }
  }

  private int hex4() {
    if (pos + 4 > in.length) throw invalid("short \\u escape");
    int v = 0;
    for (int i = 0; i < 4; i++) {
      int c = in[pos + i], d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else throw invalid("bad \\u escape");
      v = v * 16 + d;
    }
    pos += 4;
    return v;
  }

  private String string() {
    pos++; // the opening quote
    StringBuilder sb = new StringBuilder();
    while (true) {
      if (pos >= in.length) throw invalid("unterminated string");
      int b = in[pos] & 0xff;
      if (b == '"') {
        pos++;
        return sb.toString();
      }
      if (b < 0x20) throw invalid("control character in a string");
      if (b == '\\') {
        pos++;
        if (pos >= in.length) throw invalid("unterminated escape");
        int e = in[pos++];
        switch (e) {
          case '"' -> sb.append('"');
          case '\\' -> sb.append('\\');
          case '/' -> sb.append('/');
          case 'b' -> sb.append('\b');
          case 'f' -> sb.append('\f');
          case 'n' -> sb.append('\n');
          case 'r' -> sb.append('\r');
          case 't' -> sb.append('\t');
          case 'u' -> {
            int u = hex4();
            if (u == 0) {
              throw new IdempotencyException.InvalidJson(
                  IdempotencyException.UNTRANSLATABLE_CHARACTER,
                  "\\u0000 cannot be converted to text");
            }
            if (u >= 0xD800 && u <= 0xDBFF) {
              if (pos + 2 > in.length || in[pos] != '\\' || in[pos + 1] != 'u') {
                throw invalid("unpaired high surrogate");
              }
              pos += 2;
              int lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) throw invalid("unpaired high surrogate");
              sb.append((char) u).append((char) lo);
            } else if (u >= 0xDC00 && u <= 0xDFFF) {
              throw invalid("unpaired low surrogate");
            } else {
              sb.append((char) u);
            }
          }
          default -> throw invalid("bad escape");
        }
        continue;
      }
      if (b < 0x80) {
        sb.append((char) b);
        pos++;
        continue;
      }
      // a multi-byte UTF-8 sequence: no overlong form, no surrogate, nothing above U+10FFFF
      int n, cp, min;
      if (b >= 0xC2 && b <= 0xDF) {
        n = 1;
        cp = b & 0x1f;
        min = 0x80;
      } else if (b >= 0xE0 && b <= 0xEF) {
        n = 2;
        cp = b & 0x0f;
        min = 0x800;
      } else if (b >= 0xF0 && b <= 0xF4) {
        n = 3;
        cp = b & 0x07;
        min = 0x10000;
      } else {
        throw invalid("invalid UTF-8");
      }
      if (pos + n >= in.length) throw invalid("invalid UTF-8");
      for (int i = 1; i <= n; i++) {
        int c = in[pos + i] & 0xff;
        if ((c & 0xC0) != 0x80) throw invalid("invalid UTF-8");
        cp = (cp << 6) | (c & 0x3f);
      }
      if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        throw invalid("invalid UTF-8");
      }
      sb.appendCodePoint(cp);
      pos += n + 1;
    }
  }

  private Num number() {
    int start = pos;
    boolean negative = false;
    if (in[pos] == '-') {
      negative = true;
      pos++;
    }
    int intStart = pos;
    if (pos >= in.length || !digit(in[pos])) throw invalid("bad number");
    if (in[pos] == '0') {
      pos++;
    } else {
      while (pos < in.length && digit(in[pos])) pos++;
    }
    String intDigits = ascii(intStart, pos);
    String frac = "";
    if (pos < in.length && in[pos] == '.') {
      pos++;
      int f = pos;
      while (pos < in.length && digit(in[pos])) pos++;
      if (f == pos) throw invalid("bad number");
      frac = ascii(f, pos);
    }
    long exp = 0;
    if (pos < in.length && (in[pos] == 'e' || in[pos] == 'E')) {
      pos++;
      boolean expNeg = false;
      if (pos < in.length && (in[pos] == '+' || in[pos] == '-')) {
        expNeg = in[pos] == '-';
        pos++;
      }
      int e = pos;
      while (pos < in.length && digit(in[pos])) {
        // saturate: any exponent beyond this is over the digit limit anyway
        if (exp < 1_000_000_000_000L) exp = exp * 10 + (in[pos] - '0');
        pos++;
      }
      if (e == pos) throw invalid("bad number");
      if (expNeg) exp = -exp;
    }
    if (pos - start < 0) throw invalid("bad number");
    return new Num(canonicalNumber(negative, intDigits + frac, exp - frac.length()));
  }

  /** Section 3: the digits D and exponent x written plainly, at most 1000 digits. */
  private static String canonicalNumber(boolean negative, String digits, long x) {
    int a = 0;
    while (a < digits.length() && digits.charAt(a) == '0') a++;
    if (a == digits.length()) return "0";
    int z = digits.length();
    while (digits.charAt(z - 1) == '0') {
      z--;
      x++;
    }
    String d = digits.substring(a, z);
    long n = d.length();
    long written = x >= 0 ? n + x : (n + x > 0 ? n : 1 - x);
    if (written > MAX_DIGITS) {
      throw new IdempotencyException.ProgramLimitExceeded(
          "a number's canonical form has more than " + MAX_DIGITS + " digits");
    }
    StringBuilder sb = new StringBuilder();
    if (negative) sb.append('-');
    if (x >= 0) {
      sb.append(d).append("0".repeat((int) x));
    } else if (n + x > 0) {
      sb.append(d, 0, (int) (n + x)).append('.').append(d, (int) (n + x), (int) n);
    } else {
      sb.append("0.").append("0".repeat((int) -(n + x))).append(d);
    }
    return sb.toString();
  }

  private static boolean digit(byte b) {
    return b >= '0' && b <= '9';
  }

  private String ascii(int from, int to) {
    return new String(in, from, to - from, StandardCharsets.US_ASCII);
  }

  /** A string as a JSON string literal, with exactly the escapes of section 4. */
  static void writeString(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\b' -> out.append("\\b");
        case '\f' -> out.append("\\f");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
          else out.append(c);
        }
      }
    }
    out.append('"');
  }

  /**
   * A value as a JSON text: null, strings, numbers, booleans, maps (their keys as strings),
   * collections and arrays; anything else is refused (IllegalArgumentException).
   */
  static String write(Object v) {
    StringBuilder sb = new StringBuilder();
    write(sb, v, 0);
    return sb.toString();
  }

  private static void write(StringBuilder sb, Object v, int depth) {
    if (depth > MAX_DEPTH) throw new IllegalArgumentException("a value nested too deep for JSON");
    if (v == null) {
      sb.append("null");
    } else if (v instanceof CharSequence s) {
      writeString(sb, s.toString());
    } else if (v instanceof Boolean b) {
      sb.append(b);
    } else if (v instanceof java.math.BigDecimal d) {
      sb.append(d.toPlainString());
    } else if (v instanceof Double || v instanceof Float) {
      double d = ((Number) v).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        throw new IllegalArgumentException("JSON has no " + d);
      }
      sb.append(v);
    } else if (v instanceof Number n) {
      sb.append(n);
    } else if (v instanceof Map<?, ?> m) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!first) sb.append(',');
        first = false;
        writeString(sb, String.valueOf(e.getKey()));
        sb.append(':');
        write(sb, e.getValue(), depth + 1);
      }
      sb.append('}');
    } else if (v instanceof Iterable<?> items) {
      sb.append('[');
      boolean first = true;
      for (Object item : items) {
        if (!first) sb.append(',');
        first = false;
        write(sb, item, depth + 1);
      }
      sb.append(']');
    } else if (v.getClass().isArray()) {
      sb.append('[');
      for (int i = 0; i < java.lang.reflect.Array.getLength(v); i++) {
        if (i > 0) sb.append(',');
        write(sb, java.lang.reflect.Array.get(v, i), depth + 1);
      }
      sb.append(']');
    } else {
      throw new IllegalArgumentException("a " + v.getClass().getName() + " has no JSON form");
    }
  }

  /** A string value as a JSON text. */
  static String quote(String s) {
    StringBuilder sb = new StringBuilder();
    writeString(sb, s);
    return sb.toString();
  }

  /** Whether text is one JSON value under the rules above. */
  static boolean valid(byte[] text) {
    try {
      parse(text);
      return true;
    } catch (IdempotencyException e) {
      return false;
    }
  }

  /**
   * A JSON text as JavaScript's JSON.stringify of its value writes it (the Node middleware's
   * replay): no white space between tokens, strings with only the escapes they need (", \\ and
   * the control characters), numbers and the order of members as they are.
   */
  static String stringify(String text) {
    String c = compact(text);
    StringBuilder sb = new StringBuilder(c.length());
    for (int i = 0; i < c.length(); i++) {
      char ch = c.charAt(i);
      if (ch != '"') {
        sb.append(ch);
        continue;
      }
      int end = i + 1;
      while (c.charAt(end) != '"') end += c.charAt(end) == '\\' ? 2 : 1;
      writeString(sb, (String) parse(c.substring(i, end + 1)));
      i = end;
    }
    return sb.toString();
  }

  /** A JSON text without white space between tokens (strings untouched). */
  static String compact(String text) {
    StringBuilder sb = new StringBuilder(text.length());
    boolean inString = false;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (inString) {
        sb.append(c);
        if (c == '\\') sb.append(text.charAt(++i));
        else if (c == '"') inString = false;
      } else if (c == '"') {
        inString = true;
        sb.append(c);
      } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        sb.append(c);
      }
    }
    return sb.toString();
  }
}
