package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The filter's answers and what it stores, against test/vectors/http_answers.json, which the
 * Node, Python and Go middlewares' tests check too: the same bodies, word for word.
 */
class AnswersTest {
  @SuppressWarnings("unchecked")
  static Map<String, Object> vectors() throws Exception {
    byte[] text = Files.readAllBytes(Path.of("../../test/vectors/http_answers.json"));
    return (Map<String, Object>) Json.parse(text);
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> map(Object o) {
    return (Map<String, Object>) o;
  }

  @SuppressWarnings("unchecked")
  static List<Object> list(Object o) {
    return (List<Object>) o;
  }

  static byte[] bytes(Map<String, Object> message) {
    Object b64 = message.get("body_base64");
    if (b64 != null) return Base64.getDecoder().decode((String) b64);
    return ((String) message.get("body")).getBytes(StandardCharsets.UTF_8);
  }

  static Map<String, String> strings(Object headers) {
    Map<String, String> m = new LinkedHashMap<>();
    map(headers).forEach((k, v) -> m.put(k, (String) v));
    return m;
  }

  /** Tomcat writes a Content-Type with a charset as type;charset=x: the same type. */
  static String sameType(String value) {
    return value == null ? null : value.replace("; ", ";").toLowerCase(Locale.ROOT);
  }

  /** How the filter under test answers: its documentation address (or null), legacy bodies. */
  record Style(String documentation, boolean legacy) {}

  static final List<Style> STYLES =
      List.of(
          new Style(null, false),
          new Style("https://api.example.com/docs/idempotency", false),
          new Style(null, true));

  /** The answer name of the vectors: problem details, or with style.legacy the old body. */
  static void expect(Map<String, Object> v, Style style, String name, HttpResponse<String> res) {
    Map<String, Object> want = map(map(v.get(style.legacy() ? "answers" : "problems")).get(name));
    assertNotNull(want, name);
    assertEquals(
        style.legacy() ? "application/json" : "application/problem+json",
        res.headers().firstValue("Content-Type").orElse(null),
        name);
    assertEquals(
        style.documentation() == null ? null : "<" + style.documentation() + ">; rel=\"describedby\"",
        res.headers().firstValue("Link").orElse(null),
        name);
    assertEquals(((Json.Num) want.get("status")).canonical(), "" + res.statusCode(), name);
    assertEquals(want.get("body"), Json.parse(res.body()), name);
    strings(want.get("headers"))
        .forEach((h, value) -> assertEquals(value, res.headers().firstValue(h).orElse(null), name));
  }

  /** Answers before the claim, and those of a scope function's exceptions. */
  static final class NotRun extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) {
      throw new IllegalStateException("the handler ran");
    }
  }

  static HttpResponse<String> send(Server s, Map<String, String> headers, String body)
      throws Exception {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port + "/orders"))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body));
    headers.forEach(b::header);
    return s.http().send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void answers() throws Exception {
    for (Style style : STYLES) answers(style);
  }

  @Test
  void titles() throws Exception {
    Map<String, Object> want = map(vectors().get("titles"));
    assertEquals(want, new LinkedHashMap<String, Object>(Spec.PROBLEM_TITLES));
  }

  private void answers(Style style) throws Exception {
    Map<String, Object> v = vectors();
    IdempotencyFilter f =
        IdempotencyFilter.builder()
            .dataSource(TestDb.unreachable())
            .scope(
                r -> {
                  String a = r.getHeader("X-Account");
                  String outcome = r.getHeader("X-Outcome");
                  if ("in_progress".equals(outcome)) {
                    throw new IdempotencyException.KeyInProgress("held", null, null);
                  } else if ("mismatch".equals(outcome)) {
                    throw new IdempotencyException.KeyMismatch("reused");
                  } else if ("too_old".equals(outcome)) {
                    throw new IdempotencyException.KeyTooOld("too old", null);
                  }
                  return "none".equals(a) ? null : "empty".equals(a) ? "" : a;
                })
            .limit(64)
            .documentation(style.documentation())
            .legacyAnswers(style.legacy())
            .build();
    try (Server s = new Server(new NotRun(), f)) {
      String item = "{\"item\": \"widget\"}";
      expect(v, style, "idempotency_key_missing", send(s, Map.of("X-Account", "acct_1"), item));
      Map<String, String> key = Map.of("Idempotency-Key", "k-1", "X-Account", "acct_1");
      expect(
          v,
          style,
          "idempotency_key_malformed",
          send(s, Map.of("Idempotency-Key", "has space", "X-Account", "acct_1"), item));
      expect(
          v,
          style,
          "idempotency_scope_missing",
          send(s, Map.of("Idempotency-Key", "k-1", "X-Account", "none"), item));
      expect(
          v,
          style,
          "idempotency_scope_empty",
          send(s, Map.of("Idempotency-Key", "k-1", "X-Account", "empty"), item));
      expect(
          v,
          style,
          "idempotency_scope_too_long",
          send(s, Map.of("Idempotency-Key", "k-1", "X-Account", "a".repeat(256)), item));
      expect(v, style, "invalid_json", send(s, key, "{\"item\": "));
      expect(v, style, "body_too_large", send(s, key, "{\"item\": \"" + "x".repeat(100) + "\"}"));
      expect(v, style, "database_unavailable", send(s, key, item));
      for (String[] o :
          new String[][] {
            {"in_progress", "idempotency_key_in_use"},
            {"mismatch", "idempotency_key_reused"},
            {"too_old", "idempotency_key_too_old"}
          }) {
        expect(v, style, o[1], send(s, Map.of("Idempotency-Key", "k-1", "X-Outcome", o[0]), item));
      }
    }
  }

  @Test
  void storedAndReplayed() throws Exception {
    Map<String, Object> v = vectors();
    List<Object> cases = list(v.get("stored"));
    assertFalse(cases.isEmpty());
    for (Object o : cases) {
      Map<String, Object> c = map(o);
      Map<String, Object> answer = map(c.get("answer"));
      String stored =
          IdempotencyFilter.storedAnswer(
              bytes(answer), strings(answer.get("headers")), List.of("ETag"));
      assertEquals(c.get("stored"), Json.parse(stored), stored);
      Map<String, Object> replay = map(c.get("replay"));
      IdempotencyFilter.Replay r = IdempotencyFilter.replayOf(storedText(c.get("stored")));
      assertEquals(strings(replay.get("headers")), r.headers());
      assertArrayEquals(bytes(replay), r.body());
    }
    Map<String, Object> legacy = map(v.get("legacy"));
    IdempotencyFilter.Replay r = IdempotencyFilter.replayOf(storedText(legacy.get("stored")));
    Map<String, Object> replay = map(legacy.get("replay"));
    assertEquals(strings(replay.get("headers")), r.headers());
    assertArrayEquals(bytes(replay), r.body());
    // strings with the escapes JSON.stringify writes, and no others
    IdempotencyFilter.Replay escaped =
        IdempotencyFilter.replayOf(
            "{\"idempotency_http\": 1, \"headers\": {}, \"body\": {\"s\": \"a\\u00e9\\n\\u001F\\\"<\\/\"}}");
    assertEquals(
        "{\"s\":\"a\u00e9\\n\\u001f\\\"</\"}", new String(escaped.body(), StandardCharsets.UTF_8));
  }

  /** A vector's stored value as a JSON text, as the database gives it back. */
  static String storedText(Object value) throws Exception {
    try (Connection c = TestDb.db().getConnection();
        PreparedStatement st = c.prepareStatement("SELECT ?::jsonb::text")) {
      st.setString(1, toJson(value));
      try (ResultSet rs = st.executeQuery()) {
        rs.next();
        return rs.getString(1);
      }
    }
  }

  static String toJson(Object value) {
    StringBuilder sb = new StringBuilder();
    write(sb, value);
    return sb.toString();
  }

  private static void write(StringBuilder sb, Object value) {
    if (value instanceof String s) {
      Json.writeString(sb, s);
    } else if (value instanceof Json.Num n) {
      sb.append(n.canonical());
    } else if (value instanceof Map<?, ?> m) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!first) sb.append(',');
        first = false;
        Json.writeString(sb, (String) e.getKey());
        sb.append(':');
        write(sb, e.getValue());
      }
      sb.append('}');
    } else if (value instanceof List<?> l) {
      sb.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) sb.append(',');
        write(sb, l.get(i));
      }
      sb.append(']');
    } else {
      sb.append(value); // true, false, null
    }
  }

  /**
   * An answer stored by SQL in the stored form (as any client's middleware writes it) replays
   * through this filter with the vectors' status, headers and body.
   */
  @Test
  void replayOfStoredRows() throws Exception {
    Map<String, Object> v = vectors();
    List<Map<String, Object>> rows = new ArrayList<>();
    rows.add(map(v.get("legacy")));
    for (Object o : list(v.get("stored"))) rows.add(map(o));
    DataSource db = TestDb.db();
    String request = "{\"item\": \"widget\"}";
    byte[] hash = Fingerprint.of(request.getBytes(StandardCharsets.UTF_8));
    IdempotencyFilter f =
        IdempotencyFilter.builder().dataSource(db).scope(r -> r.getHeader("X-Account")).build();
    try (Server s = new Server(new NotRun(), f)) {
      for (Map<String, Object> row : rows) {
        String key = TestDb.unique("stored-row");
        Map<String, Object> replay = map(row.get("replay"));
        int status = Integer.parseInt(((Json.Num) replay.get("status")).canonical());
        try (Connection c = db.getConnection()) {
          c.setAutoCommit(false);
          Reservation r = Idempotency.reserve(c, "acct-1", key, hash, Idempotency.ReserveOptions.DEFAULTS);
          Idempotency.complete(c, "acct-1", key, status, toJson(row.get("stored")), r.attempt());
          c.commit();
        }
        HttpResponse<byte[]> res =
            s.http()
                .send(
                    HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port + "/orders"))
                        .header("Content-Type", "application/json")
                        .header("X-Account", "acct-1")
                        .header("Idempotency-Key", key)
                        .POST(HttpRequest.BodyPublishers.ofString(request))
                        .build(),
                    HttpResponse.BodyHandlers.ofByteArray());
        assertEquals(status, res.statusCode(), key);
        assertEquals("true", res.headers().firstValue("Idempotent-Replayed").orElse(""), key);
        Map<String, String> want = strings(replay.get("headers"));
        want.forEach(
            (h, value) ->
                assertEquals(
                    h.equals("content-type") ? sameType(value) : value,
                    h.equals("content-type")
                        ? sameType(res.headers().firstValue(h).orElse(null))
                        : res.headers().firstValue(h).orElse(null),
                    key + ": " + h));
        if (!want.containsKey("content-type")) {
          assertTrue(res.headers().firstValue("Content-Type").isEmpty(), key);
        }
        assertArrayEquals(bytes(replay), res.body(), key);
      }
    }
  }
}
