package idempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.time.OffsetDateTime;
import java.util.Base64;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.Objects;
import java.util.function.Function;
import java.util.function.IntPredicate;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Pattern;
import javax.sql.DataSource;

/**
 * The Idempotency-Key header as a Jakarta servlet {@link Filter}, with the answers of the
 * Express middleware: 400 for a missing or malformed key or scope or a JSON body that is not
 * JSON; 413 for a body over the limit; what the handler answers the first time; the stored
 * answer (its status, kept headers and body as they were) with {@code Idempotent-Replayed:
 * true} on a retry; 409 + Retry-After while another request holds
 * the key; 422 when the key was used with another body or is too old; 503 + Retry-After when
 * the database cannot be reached.
 *
 * <p>The handler's writes and the stored answer commit in one transaction: the handler runs its
 * statements on {@link #transaction(ServletRequest)}, and its answer is held back until that
 * transaction has committed. Given {@link Builder#joinTransaction}, the filter instead claims
 * and completes inside the application's own transaction on the connection it returns (in a
 * savepoint), and the application commits both.
 */
public final class IdempotencyFilter implements Filter {
  private static final Logger LOG = Logger.getLogger(IdempotencyFilter.class.getName());
  /** The request attribute holding the {@link Claim}. */
  public static final String CLAIM_ATTRIBUTE = IdempotencyFilter.class.getName() + ".claim";

  private static final Pattern UUID_RE =
      Pattern.compile(
          "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  private static final Pattern TOKEN_RE = Pattern.compile("^[\\x21-\\x7e]{1,255}$");
  private static final Pattern JSON_TYPE_RE =
      Pattern.compile("(?i)^(application/json|[a-z]+/[^;\\s]+\\+json)$");

  /** What the filter gives the handler: the claim's transaction, scope, key and attempt. */
  public record Claim(Connection transaction, String scope, String key, Reservation reservation) {
    public int attempt() {
      return reservation.attempt();
    }
  }

  /** The claim of the request (null outside the filter). */
  public static Claim claim(ServletRequest request) {
    return (Claim) request.getAttribute(CLAIM_ATTRIBUTE);
  }

  /** The claim's transaction: run the handler's statements on it (null outside the filter). */
  public static Connection transaction(ServletRequest request) {
    Claim c = claim(request);
    return c == null ? null : c.transaction();
  }

  /** A scope function may throw this to answer 401 (or any status) with its code. */
  public static final class Refused extends Exception {
    private static final long serialVersionUID = 1L;
    final int status;
    final String code;

    public Refused(int status, String code, String message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** A function of the request that may refuse it. */
  @FunctionalInterface
  public interface RequestFunction<T> {
    T apply(HttpServletRequest request) throws Exception;
  }

  private final DataSource dataSource;
  private final RequestFunction<String> scope;
  private final RequestFunction<String> key;
  private final RequestFunction<Connection> join;
  private final String[] exclude;
  private final int limit;
  private final IntPredicate store;
  private final List<String> keepHeaders;
  private final Idempotency.ReserveOptions options;

  private IdempotencyFilter(Builder b) {
    this.dataSource = b.dataSource;
    this.scope = Objects.requireNonNull(b.scope, "the filter needs a scope function");
    this.key = b.key != null ? b.key : r -> parseKey(r.getHeader("Idempotency-Key"));
    this.join = b.join;
    if (dataSource == null && join == null) {
      throw new IllegalArgumentException("the filter needs a DataSource or joinTransaction");
    }
    this.exclude = b.exclude;
    this.limit = b.limit;
    this.store = b.store;
    this.keepHeaders = b.keepHeaders;
    this.options = b.options;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** The filter's settings. */
  public static final class Builder {
    private DataSource dataSource;
    private RequestFunction<String> scope;
    private RequestFunction<String> key;
    private RequestFunction<Connection> join;
    private String[] exclude = new String[0];
    private int limit = 1 << 20;
    private IntPredicate store = status -> status < 500;
    private List<String> keepHeaders = List.of();
    private Idempotency.ReserveOptions options = Idempotency.ReserveOptions.DEFAULTS;

    /** Where the filter takes a connection per request (a pool). */
    public Builder dataSource(DataSource ds) {
      this.dataSource = ds;
      return this;
    }

    /**
     * Whose keys (the account, the tenant); required. Throw {@link Refused} to refuse; null
     * (a header it reads is missing) is answered 400 idempotency_scope_missing.
     */
    public Builder scope(RequestFunction<String> f) {
      this.scope = f;
      return this;
    }

    /** The key of a request; default: {@link #parseKey} of the Idempotency-Key header. */
    public Builder key(RequestFunction<String> f) {
      this.key = f;
      return this;
    }

    /**
     * Join the application's transaction: the function returns the connection of the
     * transaction that is open for this request (auto-commit off); the filter claims and
     * completes in a savepoint on it and never commits: the application does.
     */
    public Builder joinTransaction(RequestFunction<Connection> f) {
      this.join = f;
      return this;
    }

    /** Paths left out of a JSON body's fingerprint (docs/fingerprint.md, section 6). */
    public Builder exclude(String... paths) {
      this.exclude = paths.clone();
      return this;
    }

    /** The largest body read, in bytes (413 above); default 1 MiB. */
    public Builder limit(int bytes) {
      this.limit = bytes;
      return this;
    }

    /** Which statuses are stored; default below 500 (a 5xx rolls the claim back). */
    public Builder store(IntPredicate p) {
      this.store = p;
      return this;
    }

    /**
     * Names of headers of the first answer that its replays carry besides Content-Type and
     * Location (say ETag).
     */
    public Builder keepHeaders(String... names) {
      this.keepHeaders = List.of(names);
      return this;
    }

    public Builder reserveOptions(Idempotency.ReserveOptions o) {
      this.options = o;
      return this;
    }

    public IdempotencyFilter build() {
      return new IdempotencyFilter(this);
    }
  }

  /** A missing or malformed Idempotency-Key header: 400 with {"error": code}. */
  public static final class KeyHeaderException extends IdempotencyException {
    private static final long serialVersionUID = 1L;
    final String code;

    KeyHeaderException(String code, String message) {
      super(INVALID_PARAMETER_VALUE, message);
      this.code = code;
    }

    @Override
    public int httpStatus() {
      return 400;
    }
  }

  /**
   * A key header as the key: a UUID (lower-cased) or a token of 1 to 255 visible ASCII
   * characters; the quoted form of the IETF draft ("...") is accepted too.
   */
  public static String parseKey(String raw) {
    if (raw == null || raw.isEmpty()) {
      throw new KeyHeaderException(
          "idempotency_key_missing", "the Idempotency-Key header is required");
    }
    String k = raw.strip();
    if (k.length() >= 2 && k.startsWith("\"") && k.endsWith("\"")) {
      k = k.substring(1, k.length() - 1);
    }
    if (UUID_RE.matcher(k).matches()) return k.toLowerCase(Locale.ROOT);
    if (!TOKEN_RE.matcher(k).matches()) {
      throw new KeyHeaderException(
          "idempotency_key_malformed",
          "the Idempotency-Key must be a UUID or 1 to 255 visible ASCII characters");
    }
    return k;
  }

  private static void answer(
      HttpServletResponse res, int status, String code, String message, Map<String, String> h)
      throws IOException {
    String body = "{\"error\":" + Json.quote(code) + ",\"message\":" + Json.quote(message) + "}";
    write(res, status, body.getBytes(StandardCharsets.UTF_8), h);
  }

  private static void write(HttpServletResponse res, int status, byte[] body, Map<String, String> h)
      throws IOException {
    if (!res.isCommitted()) res.reset();
    res.setStatus(status);
    res.setContentType("application/json");
    res.setContentLength(body.length);
    if (h != null) h.forEach(res::setHeader);
    res.getOutputStream().write(body);
    res.flushBuffer();
  }

  // The bodies of the filter's answers are those of the Node and Python middlewares, word for
  // word (test/vectors/http_answers.json, checked by every client's tests).
  private static final String UNAVAILABLE =
      "the database could not be reached; retry with the same Idempotency-Key";
  private static final String INVALID_JSON =
      "the request body is sent as JSON but is not JSON, or is over the limits of the fingerprint";
  private static final String SCOPE_MISSING =
      "the request does not say whose it is: the scope of its Idempotency-Key is missing";

  /** The member that marks a stored answer of the middlewares. */
  public static final String STORED_MARK = "idempotency_http";

  private static final List<String> KEPT_HEADERS = List.of("content-type", "location");

  /**
   * What complete() stores for an answer: {"idempotency_http": 1, "headers": {...}, and the
   * body as one of "body" (the JSON value of a JSON answer), "text" (any other UTF-8 text) or
   * "base64" (other bytes); none for an empty body}. The headers (lower-case names, the first
   * of a name) are Content-Type, Location and those named in keep. The Node, Python and Go
   * middlewares store the same (test/vectors/http_answers.json).
   */
  public static String storedAnswer(
      byte[] body, Map<String, String> headers, Collection<String> keep) {
    Set<String> wanted = new HashSet<>(KEPT_HEADERS);
    for (String name : keep) wanted.add(name.toLowerCase(Locale.ROOT));
    Map<String, String> kept = new LinkedHashMap<>();
    headers.forEach(
        (name, value) -> {
          String lower = name.toLowerCase(Locale.ROOT);
          if (value != null && wanted.contains(lower)) kept.putIfAbsent(lower, value);
        });
    StringBuilder sb = new StringBuilder("{\"" + STORED_MARK + "\":1,\"headers\":{");
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

  /** A stored answer as a replay sends it: its headers (lower-case names) and body. */
  public record Replay(Map<String, String> headers, byte[] body) {}

  /**
   * The replay of what complete() stored. A value stored without the mark (before it existed)
   * is a JSON body, replayed as application/json; none (SQL NULL) as an empty one.
   */
  public static Replay replayOf(String response) {
    Map<String, String> m = response == null ? null : Json.members(response);
    if (m != null && "1".equals(m.get(STORED_MARK))) {
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
      return new Replay(headers, body);
    }
    Map<String, String> json = new LinkedHashMap<>();
    json.put("content-type", "application/json");
    byte[] body =
        response == null || response.strip().equals("null")
            ? new byte[0]
            : Json.stringify(response).getBytes(StandardCharsets.UTF_8);
    return new Replay(json, body);
  }

  /** The answer of an error that has one (key header, outcomes, lost connection). */
  private static boolean answerFor(Throwable e, HttpServletResponse res) throws IOException {
    IdempotencyException ie = lost(e);
    if (ie == null && e instanceof IdempotencyException i) ie = i;
    if (ie instanceof KeyHeaderException k) {
      answer(res, 400, k.code, k.getMessage(), null);
    } else if (ie instanceof IdempotencyException.KeyInProgress p) {
      answer(
          res,
          409,
          "idempotency_key_in_use",
          "a request with this Idempotency-Key is still being processed; retry later",
          Map.of("Retry-After", Long.toString(p.retryAfterSeconds(OffsetDateTime.now()))));
    } else if (ie instanceof IdempotencyException.KeyMismatch) {
      answer(
          res,
          422,
          "idempotency_key_reused",
          "this Idempotency-Key was already used with a different request body",
          null);
    } else if (ie instanceof IdempotencyException.KeyTooOld) {
      answer(
          res,
          422,
          "idempotency_key_too_old",
          "this Idempotency-Key was created before the retention window, so the request cannot"
              + " be told apart from a new one; check whether the first request took effect,"
              + " then use a new key",
          null);
    } else if (ie instanceof IdempotencyException.ConnectionLost) {
      answer(res, 503, "database_unavailable", UNAVAILABLE, Map.of("Retry-After", "1"));
    } else if (ie != null
        && IdempotencyException.INVALID_PARAMETER_VALUE.equals(ie.sqlState())) {
      answer(res, 400, "idempotency_key_malformed", ie.getMessage(), null);
    } else {
      return false;
    }
    return true;
  }

  /** The lost connection in e's causes, if any (a handler's SQLException included). */
  private static IdempotencyException lost(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof IdempotencyException.ConnectionLost c) return c;
      if (t instanceof SQLException s && IdempotencyException.isConnectionLost(s)) {
        return IdempotencyException.from(s);
      }
    }
    return null;
  }

  @Override
  public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
      throws IOException, ServletException {
    if (!(request instanceof HttpServletRequest req)
        || !(response instanceof HttpServletResponse res)) {
      chain.doFilter(request, response);
      return;
    }
    String sc, k;
    try {
      sc = scope.apply(req);
      if (sc == null) {
        answer(res, 400, "idempotency_scope_missing", SCOPE_MISSING, null);
        return;
      }
    } catch (Refused r) {
      answer(res, r.status, r.code, r.getMessage(), null);
      return;
    } catch (Exception e) {
      if (!answerFor(e, res)) answer(res, 401, "unauthorized", String.valueOf(e.getMessage()), null);
      return;
    }
    try {
      k = key.apply(req);
      if (malformedName(res, "scope", sc) || malformedName(res, "key", k)) return;
      Idempotency.checkNames(sc, k);
    } catch (Exception e) {
      if (!answerFor(e, res)) answer(res, 400, "idempotency_key_malformed", e.getMessage(), null);
      return;
    }
    byte[] body = readBody(req);
    if (body == null) {
      answer(
          res,
          413,
          "body_too_large",
          "the request body is over the limit of the idempotency middleware",
          null);
      return;
    }
    byte[] hash;
    try {
      hash = isJsonType(req.getContentType()) ? Fingerprint.of(body, exclude) : Fingerprint.sha256(body);
    } catch (IdempotencyException e) {
      answer(res, 400, "invalid_json", INVALID_JSON, null);
      return;
    }
    HttpServletRequest bodyRequest = new BufferedRequest(req, body);
    if (join != null) {
      joined(bodyRequest, res, chain, sc, k, hash);
    } else {
      own(bodyRequest, res, chain, sc, k, hash);
    }
  }

  /** Answers 400 idempotency_{what}_malformed for a name that is not 1 to 255 bytes. */
  private static boolean malformedName(HttpServletResponse res, String what, String name)
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

  private byte[] readBody(HttpServletRequest req) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (InputStream in = req.getInputStream()) {
      byte[] buf = new byte[8192];
      int n;
      while ((n = in.read(buf)) > 0) {
        out.write(buf, 0, n);
        if (out.size() > limit) return null;
      }
    }
    return out.toByteArray();
  }

  static boolean isJsonType(String contentType) {
    if (contentType == null) return false;
    String t = contentType.split(";", 2)[0].strip();
    return JSON_TYPE_RE.matcher(t).matches();
  }

  /** The filter's own transaction: reserve, the handler, complete + COMMIT, then the answer. */
  private void own(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash)
      throws IOException, ServletException {
    Connection c;
    try {
      c = dataSource.getConnection();
    } catch (SQLException e) {
      answer(res, 503, "database_unavailable", UNAVAILABLE, Map.of("Retry-After", "1"));
      return;
    }
    try {
      Reservation r;
      try {
        c.setAutoCommit(false);
        r = Idempotency.reserve(c, sc, k, hash, options);
      } catch (SQLException | IdempotencyException e) {
        IdempotencyClient.quietRollback(c);
        if (!answerFor(e instanceof SQLException s ? IdempotencyException.from(s) : e, res)) {
          internal(res);
        }
        return;
      }
      if (!Reservation.NEW.equals(r.outcome())) {
        IdempotencyClient.quietRollback(c); // nothing was written
        replayOrRefuse(res, r, sc, k);
        return;
      }
      HeldResponse held = new HeldResponse(res);
      req.setAttribute(CLAIM_ATTRIBUTE, new Claim(c, sc, k, r));
      try {
        chain.doFilter(req, held);
      } catch (Throwable e) {
        IdempotencyClient.quietRollback(c);
        LOG.log(Level.WARNING, "the handler of key " + Json.quote(k) + " failed", e);
        if (!(lost(e) != null && answerFor(e, res))) internal(res);
        return;
      } finally {
        req.removeAttribute(CLAIM_ATTRIBUTE);
      }
      int status = held.status();
      // The answer is stored and committed even if the client has gone away meanwhile: a
      // retry then gets it.
      try {
        if (store.test(status)) {
          Idempotency.complete(c, sc, k, status, held.stored(keepHeaders), r.attempt());
          c.commit();
        } else {
          c.rollback();
        }
      } catch (SQLException | IdempotencyException e) {
        IdempotencyClient.quietRollback(c);
        LOG.log(Level.WARNING, "the answer to key " + Json.quote(k) + " was not stored", e);
        IdempotencyException t = e instanceof SQLException s ? IdempotencyException.from(s) : (IdempotencyException) e;
        // a COMMIT that broke may have committed: the retry replays or runs afresh
        if (!(t instanceof IdempotencyException.ConnectionLost && answerFor(t, res))) internal(res);
        return;
      }
      held.release(true);
    } finally {
      IdempotencyClient.quietClose(c);
    }
  }

  /** In the application's transaction: a savepoint around reserve, the handler and complete. */
  private void joined(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash)
      throws IOException, ServletException {
    Connection c;
    Savepoint sp;
    Reservation r;
    try {
      c = join.apply(req);
      sp = c.setSavepoint();
    } catch (Exception e) {
      if (!answerFor(e, res)) {
        answer(res, 503, "database_unavailable", UNAVAILABLE, Map.of("Retry-After", "1"));
      }
      return;
    }
    try {
      r = Idempotency.reserve(c, sc, k, hash, options);
    } catch (IdempotencyException e) {
      undo(c, sp);
      if (!answerFor(e, res)) internal(res);
      return;
    }
    if (!Reservation.NEW.equals(r.outcome())) {
      undo(c, sp);
      replayOrRefuse(res, r, sc, k);
      return;
    }
    HeldResponse held = new HeldResponse(res);
    req.setAttribute(CLAIM_ATTRIBUTE, new Claim(c, sc, k, r));
    try {
      chain.doFilter(req, held);
      int status = held.status();
      if (store.test(status)) {
        Idempotency.complete(c, sc, k, status, held.stored(keepHeaders), r.attempt());
        c.releaseSavepoint(sp);
      } else {
        undo(c, sp);
      }
    } catch (Throwable e) {
      undo(c, sp);
      LOG.log(Level.WARNING, "the handler of key " + Json.quote(k) + " failed", e);
      if (!(lost(e) != null && answerFor(e, res))) internal(res);
      return;
    } finally {
      req.removeAttribute(CLAIM_ATTRIBUTE);
    }
    // Not flushed: the application commits (or rolls back) its transaction after this filter
    // returns, and the container sends the answer after that.
    held.release(false);
  }

  private static void undo(Connection c, Savepoint sp) {
    try {
      c.rollback(sp);
      c.releaseSavepoint(sp);
    } catch (SQLException ignored) {
      // the connection is gone: the server rolled the transaction back
    }
  }

  private static void internal(HttpServletResponse res) throws IOException {
    answer(res, 500, "internal_error", "the request failed; retry with the same Idempotency-Key", null);
  }

  private static void replayOrRefuse(HttpServletResponse res, Reservation r, String sc, String k)
      throws IOException {
    if (Reservation.REPLAY.equals(r.outcome())) {
      Replay replay = replayOf(r.response());
      if (!res.isCommitted()) res.reset();
      res.setStatus(r.statusCode());
      // Tomcat writes a Content-Type with a charset as type;charset=x (no space)
      replay.headers().forEach(res::setHeader);
      res.setContentLength(replay.body().length);
      res.setHeader("Idempotent-Replayed", "true");
      res.getOutputStream().write(replay.body());
      res.flushBuffer();
      return;
    }
    if (!answerFor(r.error(sc, k), res)) internal(res);
  }

  /** The request with its body read once, served again from memory. */
  private static final class BufferedRequest extends HttpServletRequestWrapper {
    private final byte[] body;

    BufferedRequest(HttpServletRequest r, byte[] body) {
      super(r);
      this.body = body;
    }

    @Override
    public ServletInputStream getInputStream() {
      ByteArrayInputStream in = new ByteArrayInputStream(body);
      return new ServletInputStream() {
        @Override
        public int read() {
          return in.read();
        }

        @Override
        public int read(byte[] b, int off, int len) {
          return in.read(b, off, len);
        }

        @Override
        public boolean isFinished() {
          return in.available() == 0;
        }

        @Override
        public boolean isReady() {
          return true;
        }

        @Override
        public void setReadListener(ReadListener l) {
          throw new IllegalStateException("the body is already read");
        }
      };
    }

    @Override
    public BufferedReader getReader() {
      String enc = getCharacterEncoding();
      Charset cs = enc == null ? StandardCharsets.UTF_8 : Charset.forName(enc);
      return new BufferedReader(new InputStreamReader(getInputStream(), cs));
    }
  }

  /**
   * Holds the handler's status and body until the transaction has committed; its headers go
   * to the real response (nothing is sent before the body) and are reset on an error answer.
   */
  private static final class HeldResponse extends HttpServletResponseWrapper {
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private int status = 0;
    private PrintWriter writer;
    private ServletOutputStream stream;

    HeldResponse(HttpServletResponse r) {
      super(r);
    }

    int status() {
      return status == 0 ? 200 : status;
    }

    @Override
    public void setStatus(int sc) {
      status = sc;
    }

    @Override
    public int getStatus() {
      return status();
    }

    @Override
    public void sendError(int sc, String msg) {
      status = sc;
      if (msg != null) body.writeBytes(msg.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public void sendError(int sc) {
      status = sc;
    }

    @Override
    public void sendRedirect(String location) {
      status = 302;
      setHeader("Location", location);
    }

    @Override
    public ServletOutputStream getOutputStream() {
      if (stream == null) {
        stream =
            new ServletOutputStream() {
              @Override
              public void write(int b) {
                body.write(b);
              }

              @Override
              public void write(byte[] b, int off, int len) {
                body.write(b, off, len);
              }

              @Override
              public boolean isReady() {
                return true;
              }

              @Override
              public void setWriteListener(WriteListener l) {
                throw new IllegalStateException("the answer is held until the commit");
              }
            };
      }
      return stream;
    }

    @Override
    public PrintWriter getWriter() {
      if (writer == null) {
        String enc = getCharacterEncoding();
        Charset cs = enc == null ? StandardCharsets.UTF_8 : Charset.forName(enc);
        writer = new PrintWriter(new OutputStreamWriter(getOutputStream(), cs));
      }
      return writer;
    }

    @Override
    public void flushBuffer() {
      if (writer != null) writer.flush();
    }

    @Override
    public void setContentLength(int len) {}

    @Override
    public void setContentLengthLong(long len) {}

    @Override
    public boolean isCommitted() {
      return false;
    }

    @Override
    public void resetBuffer() {
      body.reset();
    }

    @Override
    public void reset() {
      super.reset();
      body.reset();
      status = 0;
    }

    private byte[] bytes() {
      if (writer != null) writer.flush();
      return body.toByteArray();
    }

    /** The answer as it is stored ({@link #storedAnswer}), with the headers the client gets. */
    String stored(List<String> keep) {
      HttpServletResponse res = (HttpServletResponse) getResponse();
      Map<String, String> headers = new LinkedHashMap<>();
      if (res.getContentType() != null) headers.put("content-type", res.getContentType());
      for (String name : res.getHeaderNames()) {
        if (!headers.containsKey(name.toLowerCase(Locale.ROOT))) {
          headers.put(name, String.join(", ", res.getHeaders(name)));
        }
      }
      return storedAnswer(bytes(), headers, keep);
    }

    /** Sends the held answer on the real response. */
    void release(boolean flush) throws IOException {
      byte[] b = bytes();
      HttpServletResponse res = (HttpServletResponse) getResponse();
      res.setStatus(status());
      if (!flush && res.getBufferSize() < b.length + 1) {
        // kept in the container's buffer until the application's transaction has ended
        res.setBufferSize(b.length + 1);
      }
      res.setContentLength(b.length);
      res.getOutputStream().write(b);
      if (flush) res.flushBuffer();
    }
  }
}
