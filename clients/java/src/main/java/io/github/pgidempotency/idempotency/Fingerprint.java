package io.github.pgidempotency.idempotency;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;

/**
 * The request fingerprint of docs/fingerprint.md: the SHA-256 of a JSON text's canonical form,
 * byte for byte what the server's {@code idempotency.fingerprint(jsonb, text[])} computes.
 */
public final class Fingerprint {
  private Fingerprint() {}

  /** The fingerprint of a JSON text given as UTF-8 bytes, minus the exclude paths. */
  public static byte[] of(byte[] jsonText, String... exclude) {
    return sha256(canonical(jsonText, exclude));
  }

  /** The fingerprint of a JSON text. */
  public static byte[] of(String jsonText, String... exclude) {
    return of(jsonText.getBytes(StandardCharsets.UTF_8), exclude);
  }

  /** The fingerprint with a list of exclude paths. */
  public static byte[] of(String jsonText, Collection<String> exclude) {
    return of(jsonText, exclude.toArray(new String[0]));
  }

  /** The canonical form (UTF-8 bytes) of a JSON text minus the exclude paths. */
  public static byte[] canonical(byte[] jsonText, String... exclude) {
    List<String[]> paths = paths(exclude);
    Object v = Json.parse(jsonText);
    if (v instanceof Map<?, ?> m) {
      for (String[] p : paths) remove(m, p);
    }
    StringBuilder sb = new StringBuilder();
    write(sb, v);
    return sb.toString().getBytes(StandardCharsets.UTF_8);
  }

  /** The canonical form of a JSON text as a string. */
  public static String canonical(String jsonText, String... exclude) {
    return new String(
        canonical(jsonText.getBytes(StandardCharsets.UTF_8), exclude), StandardCharsets.UTF_8);
  }

  /** SHA-256 of bytes: the fingerprint of a body that is not JSON (fingerprint(bytea)). */
  public static byte[] sha256(byte[] bytes) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(bytes);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this Java runtime", e);
    }
  }

  /** Lower-case hex of bytes. */
  public static String hex(byte[] bytes) {
    StringBuilder sb = new StringBuilder(bytes.length * 2);
    for (byte b : bytes) sb.append(String.format("%02x", b & 0xff));
    return sb.toString();
  }

  private static List<String[]> paths(String[] exclude) {
    List<String[]> out = new ArrayList<>();
    if (exclude == null) return out;
    for (String e : exclude) {
      if (e == null
          || e.isEmpty()
          || e.startsWith(".")
          || e.endsWith(".")
          || e.contains("..")) {
        throw new IdempotencyException(
            IdempotencyException.INVALID_PARAMETER_VALUE,
            "malformed exclude path: " + (e == null ? "null" : Json.quote(e)));
      }
      out.add(e.split("\\.", -1));
    }
    return out;
  }

  // Segments never contain '.', so a member whose name does is never matched, nor anything below.
  private static void remove(Map<?, ?> top, String[] path) {
    Map<?, ?> cur = top;
    for (int i = 0; i < path.length - 1; i++) {
      if (!(cur.get(path[i]) instanceof Map<?, ?> next)) return;
      cur = next;
    }
    cur.remove(path[path.length - 1]);
  }

  private static int compareUtf8(String a, String b) {
    return Arrays.compareUnsigned(
        a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
  }

  private static void write(StringBuilder sb, Object v) {
    if (v instanceof Map<?, ?> m) {
      List<String> names = new ArrayList<>();
      for (Object k : m.keySet()) names.add((String) k);
      names.sort(Fingerprint::compareUtf8);
      sb.append('{');
      for (int i = 0; i < names.size(); i++) {
        if (i > 0) sb.append(',');
        Json.writeString(sb, names.get(i));
        sb.append(':');
        write(sb, m.get(names.get(i)));
      }
      sb.append('}');
    } else if (v instanceof List<?> l) {
      sb.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) sb.append(',');
        write(sb, l.get(i));
      }
      sb.append(']');
    } else if (v instanceof String s) {
      Json.writeString(sb, s);
    } else if (v instanceof Json.Num n) {
      sb.append(n.canonical());
    } else {
      sb.append(v); // Boolean or Json.NULL
    }
  }
}
