package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class FingerprintTest {
  static Path vectors() {
    return Path.of(TestDb.env("IDEM_VECTORS", "../../test/vectors/fingerprint.jsonl"));
  }

  @TestFactory
  Stream<DynamicTest> everyVector() throws IOException {
    List<String> lines = Files.readAllLines(vectors(), StandardCharsets.UTF_8);
    assertEquals(122, lines.size(), "the vector file has 122 lines");
    return lines.stream()
        .map(
            line -> {
              @SuppressWarnings("unchecked")
              Map<String, Object> v = (Map<String, Object>) Json.parse(line);
              String name = (String) v.get("name");
              return DynamicTest.dynamicTest(name, () -> check(v));
            });
  }

  private static void check(Map<String, Object> v) {
    String json = (String) v.get("json");
    List<String> exclude = new ArrayList<>();
    for (Object o : (List<?>) v.get("exclude")) exclude.add((String) o);
    String[] ex = exclude.toArray(new String[0]);
    if (v.containsKey("error")) {
      IdempotencyException e =
          assertThrows(IdempotencyException.class, () -> Fingerprint.of(json, ex));
      assertEquals(v.get("error"), e.sqlState());
      return;
    }
    assertEquals(v.get("canonical"), Fingerprint.canonical(json, ex));
    assertEquals(v.get("sha256"), Fingerprint.hex(Fingerprint.of(json, ex)));
  }

  @Test
  void errorsAreTyped() {
    assertThrows(IdempotencyException.InvalidJson.class, () -> Fingerprint.of("{"));
    assertThrows(IdempotencyException.InvalidJson.class, () -> Fingerprint.of("NaN"));
    assertThrows(
        IdempotencyException.ProgramLimitExceeded.class,
        () -> Fingerprint.of("[".repeat(1001) + "]".repeat(1001)));
    Fingerprint.of("[".repeat(1000) + "]".repeat(1000));
    IdempotencyException e =
        assertThrows(IdempotencyException.class, () -> Fingerprint.of("{}", "a..b"));
    assertEquals("22023", e.sqlState());
    // invalid UTF-8: an overlong '/', an encoded surrogate
    assertThrows(
        IdempotencyException.InvalidJson.class,
        () -> Fingerprint.of(new byte[] {'"', (byte) 0xC0, (byte) 0xAF, '"'}));
    assertThrows(
        IdempotencyException.InvalidJson.class,
        () -> Fingerprint.of(new byte[] {'"', (byte) 0xED, (byte) 0xA0, (byte) 0x80, '"'}));
  }

  // Random bodies: names and strings from a pool with escapes, non-ASCII, astral characters
  // and dots; numbers with exponents, fractions, signs and zeros; nesting.
  private static final String[] NAMES = {
    "a", "b", "A", "é", "\\u00e9", "😀", "\\ud83d\\ude00", "\\uffff", "a.b", "", "key", "\\n",
    "z\\u0001", "\\\"q\\\""
  };

  private static String number(Random r) {
    StringBuilder sb = new StringBuilder();
    if (r.nextBoolean()) sb.append('-');
    sb.append(r.nextInt(4) == 0 ? "0" : Integer.toString(1 + r.nextInt(99999)));
    if (r.nextBoolean()) {
      sb.append('.');
      for (int i = 0, n = 1 + r.nextInt(6); i < n; i++) sb.append(r.nextInt(10));
    }
    if (r.nextInt(3) == 0) {
      sb.append(r.nextBoolean() ? 'e' : 'E');
      int x = r.nextInt(60);
      sb.append(r.nextBoolean() ? "-" : r.nextBoolean() ? "+" : "").append(x);
    }
    return sb.toString();
  }

  private static void value(Random r, StringBuilder sb, int depth) {
    int k = depth > 4 ? r.nextInt(5) : r.nextInt(7);
    String ws = r.nextInt(4) == 0 ? " \n" : "";
    switch (k) {
      case 0 -> sb.append(number(r));
      case 1 -> sb.append('"').append(NAMES[r.nextInt(NAMES.length)]).append('"');
      case 2 -> sb.append(r.nextBoolean() ? "true" : "false");
      case 3 -> sb.append("null");
      case 4 -> sb.append('"').append("x\\t/\\u0041").append('"');
      case 5 -> {
        sb.append('[').append(ws);
        for (int i = 0, n = r.nextInt(4); i < n; i++) {
          if (i > 0) sb.append(',').append(ws);
          value(r, sb, depth + 1);
        }
        sb.append(']');
      }
      default -> {
        sb.append('{').append(ws);
        for (int i = 0, n = r.nextInt(5); i < n; i++) {
          if (i > 0) sb.append(',');
          sb.append('"').append(NAMES[r.nextInt(NAMES.length)]).append("\":").append(ws);
          value(r, sb, depth + 1);
        }
        sb.append('}');
      }
    }
  }

  @Test
  void randomBodiesMatchTheServer() throws Exception {
    long seed = Long.parseLong(TestDb.env("IDEM_SEED", Long.toString(System.nanoTime())));
    Random r = new Random(seed);
    String[][] excludes = {{}, {"a"}, {"a.b"}, {"b", "key"}, {"é.a"}};
    try (Connection c = TestDb.db().getConnection()) {
      for (int i = 0; i < 300; i++) {
        StringBuilder sb = new StringBuilder();
        value(r, sb, 0);
        String json = sb.toString();
        String[] ex = excludes[r.nextInt(excludes.length)];
        assertArrayEquals(
            Idempotency.serverFingerprint(c, json, ex),
            Fingerprint.of(json, ex),
            "seed " + seed + ": " + json);
      }
    }
  }
}
