package io.github.pgidempotency.idempotency;

import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import java.util.Base64;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * The answers of {@link IdempotencyFilter}: the error answers (the same bodies as the Node,
 * Python and Go middlewares), the replay of a stored answer, and the stored form of an answer.
 */
final class Answers {
  private final String documentation;
  private final boolean legacy;

  /**
   * Answers as problem details (legacy: the old {"error", "message"} body), with Link:
   * &lt;documentation&gt;; rel="describedby" when documentation is not null.
   */
  Answers(String documentation, boolean legacy) {
    this.documentation = documentation;
    this.legacy = legacy;
  }

  void answer(
      HttpServletResponse res, int status, String code, String message, Map<String, String> h)
      throws IOException {
    String body;
    if (legacy) {
      body = "{\"error\":" + Json.quote(code) + ",\"message\":" + Json.quote(message) + "}";
    } else {
      String title = Spec.PROBLEM_TITLES.getOrDefault(code, "Request failed");
      body =
          "{\"type\":" + Json.quote(Spec.PROBLEM_TYPE_BASE + code)
              + ",\"title\":" + Json.quote(title)
              + ",\"status\":" + status
              + ",\"detail\":" + Json.quote(message)
              + ",\"error\":" + Json.quote(code) + "}";
    }
    write(res, status, body.getBytes(StandardCharsets.UTF_8), h);
  }

  private void write(HttpServletResponse res, int status, byte[] body, Map<String, String> h)
      throws IOException {
    if (!res.isCommitted()) res.reset();
    res.setStatus(status);
    res.setContentType(legacy ? "application/json" : "application/problem+json");
    res.setContentLength(body.length);
    if (documentation != null) res.setHeader("Link", "<" + documentation + ">; rel=\"describedby\"");
    if (h != null) h.forEach(res::setHeader);
    res.getOutputStream().write(body);
    res.flushBuffer();
  }

  /** 503 database_unavailable, Retry-After: 1: no connection to the database. */
  void unavailable(HttpServletResponse res) throws IOException {
    fixed(res, "database_unavailable", Map.of("Retry-After", "1"));
  }

  /**
   * The answer of code as the spec gives it (Spec.PROBLEM_STATUS and PROBLEM_DETAIL, generated
   * from test/vectors/http_answers.json), with the headers h (or null).
   */
  void fixed(HttpServletResponse res, String code, Map<String, String> h) throws IOException {
    answer(res, Spec.PROBLEM_STATUS.get(code), code, Spec.PROBLEM_DETAIL.get(code), h);
  }

  private static final List<String> KEPT_HEADERS = List.of("content-type", "location");

  private static final Pattern JSON_TYPE_RE =
      Pattern.compile("(?i)^(application/json|[a-z]+/[^;\\s]+\\+json)$");

  /** IdempotencyFilter.storedAnswer. */
  static String storedAnswer(
      byte[] body, Map<String, String> headers, Collection<String> keep) {
    Set<String> wanted = new HashSet<>(KEPT_HEADERS);
    for (String name : keep) wanted.add(name.toLowerCase(Locale.ROOT));
    Map<String, String> kept = new LinkedHashMap<>();
    headers.forEach(
        (name, value) -> {
          String lower = name.toLowerCase(Locale.ROOT);
          if (value != null && wanted.contains(lower)) kept.putIfAbsent(lower, value);
        });
    StringBuilder sb = new StringBuilder("{\"" + IdempotencyFilter.STORED_MARK + "\":1,\"headers\":{");
    boolean first = true;
    for (Map.Entry<String, String> h : kept.entrySet()) {
      if (!first) sb.append(',');
      first = false;
      Json.writeString(sb, h.getKey());
      sb.append(':');
      Json.writeString(sb, h.getValue());
    }
    sb.append('}');
    if (body.length > 0) {
      String text;
      try {
        text = StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(body)).toString();
      } catch (CharacterCodingException e) {
        text = null;
      }
      if (text == null) {
        sb.append(",\"base64\":");
        Json.writeString(sb, Base64.getEncoder().encodeToString(body));
      } else if (isJsonType(kept.get("content-type")) && Json.valid(body)) {
        sb.append(",\"body\":").append(text);
      } else { // not JSON, or sent as JSON but not JSON: kept as its text
        sb.append(",\"text\":");
        Json.writeString(sb, text);
      }
    }
    return sb.append('}').toString();
  }

  /** IdempotencyFilter.replayOf. */
  static IdempotencyFilter.Replay replayOf(String response) {
    Map<String, String> m = response == null ? null : Json.members(response);
    if (m != null && "1".equals(m.get(IdempotencyFilter.STORED_MARK))) {
      Map<String, String> headers = new LinkedHashMap<>();
      Map<String, String> stored = m.containsKey("headers") ? Json.members(m.get("headers")) : null;
      if (stored != null) {
        stored.forEach(
            (name, value) -> {
              if (Json.parse(value) instanceof String v) headers.put(name, v);
            });
      }
      byte[] body = new byte[0];
      if (m.containsKey("body")) {
        body = Json.stringify(m.get("body")).getBytes(StandardCharsets.UTF_8);
      } else if (m.containsKey("text") && Json.parse(m.get("text")) instanceof String t) {
        body = t.getBytes(StandardCharsets.UTF_8);
      } else if (m.containsKey("base64") && Json.parse(m.get("base64")) instanceof String b) {
        body = Base64.getDecoder().decode(b);
      }
      return new IdempotencyFilter.Replay(headers, body);
    }
    Map<String, String> json = new LinkedHashMap<>();
    json.put("content-type", "application/json");
    byte[] body =
        response == null || response.strip().equals("null")
            ? new byte[0]
            : Json.stringify(response).getBytes(StandardCharsets.UTF_8);
    return new IdempotencyFilter.Replay(json, body);
  }

  /** The answer of an error that has one (key header, outcomes, lost connection). */
  boolean answerFor(Throwable e, HttpServletResponse res) throws IOException {
    IdempotencyException ie = lost(e);
    if (ie == null && e instanceof IdempotencyException i) ie = i;
    if (ie instanceof IdempotencyFilter.KeyHeaderException k) {
      answer(res, 400, k.code, k.getMessage(), null);
    } else if (ie instanceof IdempotencyException.KeyInProgress p) {
      fixed(
          res,
          "idempotency_key_in_use",
          Map.of("Retry-After", Long.toString(p.retryAfterSeconds(OffsetDateTime.now()))));
    } else if (ie instanceof IdempotencyException.KeyMismatch) {
      fixed(res, "idempotency_key_reused", null);
    } else if (ie instanceof IdempotencyException.KeyTooOld) {
      fixed(res, "idempotency_key_too_old", null);
    } else if (ie instanceof IdempotencyException.ConnectionLost) {
      unavailable(res);
    } else if (ie != null
        && IdempotencyException.INVALID_PARAMETER_VALUE.equals(ie.sqlState())) {
      answer(res, 400, "idempotency_key_malformed", ie.getMessage(), null);
    } else {
      return false;
    }
    return true;
  }

  /** The lost connection in e's causes, if any (a handler's SQLException included). */
  static IdempotencyException lost(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof IdempotencyException.ConnectionLost c) return c;
      if (t instanceof SQLException s && IdempotencyException.isConnectionLost(s)) {
        return IdempotencyException.from(s);
      }
    }
    return null;
  }

  /** Answers 400 idempotency_{what}_malformed for a name that is not 1 to 255 bytes. */
  boolean malformedName(HttpServletResponse res, String what, String name)
      throws IOException {
    int n = name == null ? 0 : name.getBytes(StandardCharsets.UTF_8).length;
    if (n > 0 && n <= 255) return false;
    String message =
        n == 0
            ? "the idempotency " + what + " must not be empty"
            : "the idempotency " + what + " is " + n + " bytes, over the limit of 255";
    answer(res, 400, "idempotency_" + what + "_malformed", message, null);
    return true;
  }

  static boolean isJsonType(String contentType) {
    if (contentType == null) return false;
    String t = contentType.split(";", 2)[0].strip();
    return JSON_TYPE_RE.matcher(t).matches();
  }

  void internal(HttpServletResponse res) throws IOException {
    fixed(res, "internal_error", null);
  }

  void replayOrRefuse(HttpServletResponse res, Reservation r, String sc, String k)
      throws IOException {
    if (r.outcome() == Outcome.REPLAY) {
      writeStored(res, r, true);
      return;
    }
    if (!answerFor(r.error(sc, k), res)) internal(res);
  }

  /**
   * The answer of execute_once's reservation: new, the answer it stored just now (as its
   * replays send it, without Idempotent-Replayed); replay; or the outcome's refusal.
   */
  void statementAnswer(HttpServletResponse res, Reservation r, String sc, String k)
      throws IOException {
    if (r.outcome() == Outcome.NEW) {
      writeStored(res, r, false);
    } else {
      replayOrRefuse(res, r, sc, k);
    }
  }

  /** A stored answer: its status, kept headers and body; replayed adds Idempotent-Replayed. */
  private static void writeStored(HttpServletResponse res, Reservation r, boolean replayed)
      throws IOException {
    IdempotencyFilter.Replay replay = replayOf(r.response());
    if (!res.isCommitted()) res.reset();
    res.setStatus(r.statusCode());
    // Tomcat writes a Content-Type with a charset as type;charset=x (no space)
    replay.headers().forEach(res::setHeader);
    res.setContentLength(replay.body().length);
    if (replayed) res.setHeader("Idempotent-Replayed", "true");
    res.getOutputStream().write(replay.body());
    res.flushBuffer();
  }
}
