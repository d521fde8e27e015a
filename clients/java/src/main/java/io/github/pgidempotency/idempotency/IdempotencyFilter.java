package io.github.pgidempotency.idempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
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
 * savepoint), and the application commits both. Its answers and the stored form of an answer
 * are in Answers; the held answer and the buffered body in HeldResponse and BufferedRequest.
 */
public final class IdempotencyFilter implements Filter {
  private static final Logger LOG = Logger.getLogger(IdempotencyFilter.class.getName());
  /** The request attribute holding the {@link Claim}. */
  public static final String CLAIM_ATTRIBUTE = IdempotencyFilter.class.getName() + ".claim";

  private static final Pattern UUID_RE =
      Pattern.compile(
          "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  private static final Pattern TOKEN_RE = Pattern.compile("^[\\x21-\\x7e]{1,255}$");

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

  /** The parameters of the filter's statement, from the request and its body. */
  @FunctionalInterface
  public interface StatementParams {
    List<?> apply(HttpServletRequest request, byte[] body) throws Exception;
  }

  private final DataSource dataSource;
  private final String statementSql;
  private final StatementParams statementParams;
  private final int statementStatus;
  private final RequestFunction<String> scope;
  private final RequestFunction<String> key;
  private final RequestFunction<Connection> join;
  private final String[] exclude;
  private final int limit;
  private final IntPredicate store;
  private final List<String> keepHeaders;
  private final Idempotency.ReserveOptions options;
  private final Features features = new Features();
  private final Answers answers;
  private final IdempotencyClient.ClaimListener listener;
  private final boolean listenerSeesKeys;

  private IdempotencyFilter(Builder b) {
    this.dataSource = b.dataSource;
    this.scope = Objects.requireNonNull(b.scope, "the filter needs a scope function");
    this.key = b.key != null ? b.key : r -> parseKey(r.getHeader("Idempotency-Key"));
    this.join = b.join;
    this.listener = b.listener;
    this.listenerSeesKeys = b.listenerSeesKeys;
    if (dataSource == null && join == null) {
      throw new IllegalArgumentException("the filter needs a DataSource or joinTransaction");
    }
    this.exclude = b.exclude;
    this.limit = b.limit;
    this.store = b.store;
    this.keepHeaders = b.keepHeaders;
    this.options = b.options;
    this.statementSql = b.statementSql;
    this.statementParams = b.statementParams;
    this.statementStatus = b.statementStatus;
    this.answers = new Answers(b.documentation, b.legacyAnswers);
    if (statementSql != null && dataSource == null) {
      throw new IllegalArgumentException("the filter's statement needs a DataSource");
    }
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
    private String statementSql;
    private StatementParams statementParams;
    private int statementStatus;
    private String documentation;
    private boolean legacyAnswers;
    private IdempotencyClient.ClaimListener listener;
    private boolean listenerSeesKeys;

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

    /**
     * Answer each new key with one statement instead of the rest of the chain (which is then
     * not called): execute_once on a connection of the DataSource under auto-commit, where the
     * claim, the statement and its answer commit together in one round trip. sql: one SELECT,
     * INSERT, UPDATE, DELETE or MERGE with $1, $2, ...; params: their values from the request
     * and its body (sent as text, see {@link Idempotency#executeOnce}; a throw is answered 400
     * invalid_request); status: the status of its answer (0: 201). A new key is answered with
     * that status and the statement's response as the JSON body (its one row as a JSON object,
     * a single json / jsonb column as it is; no row: an empty body); a retry gets the same
     * answer with Idempotent-Replayed: true; 409, 422, 400 and 503 as without it. An error of
     * the statement answers 500 and leaves the key new; a server without execute_once answers
     * 500 and logs the error naming it.
     */
    public Builder statement(String sql, StatementParams params, int status) {
      this.statementSql = Objects.requireNonNull(sql);
      this.statementParams = Objects.requireNonNull(params);
      this.statementStatus = status;
      return this;
    }

    /**
     * The address of the service's idempotency documentation: every answer of the filter then
     * carries Link: &lt;address&gt;; rel="describedby", as the IETF draft suggests.
     */
    public Builder documentation(String address) {
      this.documentation = address;
      return this;
    }

    /**
     * The filter's own answers with the body of releases before 0.4.0, {"error": code,
     * "message": ...} as application/json, instead of RFC 9457 problem details.
     */
    public Builder legacyAnswers(boolean legacy) {
      this.legacyAnswers = legacy;
      return this;
    }

    public Builder reserveOptions(Idempotency.ReserveOptions o) {
      this.options = o;
      return this;
    }

    /**
     * Tells listener of each request once its key was read (an IdempotencyClient.ClaimEvent,
     * helper "filter", with the status answered), on the request's thread; withKeys: whether
     * events carry the key. None (the default) costs nothing.
     */
    public Builder claimListener(IdempotencyClient.ClaimListener listener, boolean withKeys) {
      this.listener = listener;
      this.listenerSeesKeys = withKeys;
      return this;
    }

    public IdempotencyFilter build() {
      return new IdempotencyFilter(this);
    }
  }

  /** A missing or malformed Idempotency-Key header: 400 with code as the answer's "error". */
  public static final class KeyHeaderException extends IdempotencyException {
    private static final long serialVersionUID = 1L;
    final String code;

    KeyHeaderException(String code, String message) {
      super(INVALID_PARAMETER_VALUE, message, null, 400);
      this.code = code;
    }
  }

  /**
   * The key of an Idempotency-Key header: the IETF draft's sf-string (RFC 8941: "..." with \"
   * and \\ the only escapes; a parameter, a list or anything else after the closing quote is
   * refused) or the unquoted token Stripe-style clients send, the two spellings of one key
   * being the same key. The key is a UUID (lower-cased) or 1 to 255 visible ASCII characters
   * (test/vectors/idempotency_key.json).
   */
  public static String parseKey(String raw) {
    if (raw == null || raw.isEmpty()) {
      throw new KeyHeaderException(
          "idempotency_key_missing", Spec.PROBLEM_DETAIL.get("idempotency_key_missing"));
    }
    String k = stripOws(raw);
    if (k.startsWith("\"")) k = parseSfString(k);
    if (k != null && UUID_RE.matcher(k).matches()) return k.toLowerCase(Locale.ROOT);
    if (k == null || !TOKEN_RE.matcher(k).matches()) {
      throw new KeyHeaderException(
          "idempotency_key_malformed", Spec.PROBLEM_DETAIL.get("idempotency_key_malformed"));
    }
    return k;
  }

  /** text without the spaces and tabs around it (HTTP's OWS). */
  private static String stripOws(String text) {
    int start = 0, end = text.length();
    while (start < end && (text.charAt(start) == ' ' || text.charAt(start) == '\t')) start++;
    while (end > start && (text.charAt(end - 1) == ' ' || text.charAt(end - 1) == '\t')) end--;
    return text.substring(start, end);
  }

  /** The value of an RFC 8941 sf-string that is all of text, or null. */
  private static String parseSfString(String text) {
    StringBuilder b = new StringBuilder();
    for (int i = 1; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '\\') {
        i++;
        if (i == text.length() || (text.charAt(i) != '"' && text.charAt(i) != '\\')) return null;
        b.append(text.charAt(i));
      } else if (c == '"') {
        return i == text.length() - 1 ? b.toString() : null;
      } else if (c < 0x20 || c > 0x7e) {
        return null;
      } else {
        b.append(c);
      }
    }
    return null; // not closed
  }

  /** The member that marks a stored answer of the middlewares. */
  public static final String STORED_MARK = "idempotency_http";

  /**
   * What complete() stores for an answer: {"idempotency_http": 1, "headers": {...}, and the
   * body as one of "body" (the JSON value of a JSON answer), "text" (any other UTF-8 text) or
   * "base64" (other bytes); none for an empty body}. The headers (lower-case names, the first
   * of a name) are Content-Type, Location and those named in keep. The Node, Python and Go
   * middlewares store the same (test/vectors/http_answers.json).
   */
  public static String storedAnswer(
      byte[] body, Map<String, String> headers, Collection<String> keep) {
    return Answers.storedAnswer(body, headers, keep);
  }

  /** A stored answer as a replay sends it: its headers (lower-case names) and body. */
  public record Replay(Map<String, String> headers, byte[] body) {}

  /**
   * The replay of what complete() stored. A value stored without the mark (before it existed)
   * is a JSON body, replayed as application/json; none (SQL NULL) as an empty one.
   */
  public static Replay replayOf(String response) {
    return Answers.replayOf(response);
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
        answers.fixed(res, "idempotency_scope_missing", null);
        return;
      }
    } catch (Refused r) {
      answers.answer(res, r.status, r.code, r.getMessage(), null);
      return;
    } catch (Exception e) {
      if (!answers.answerFor(e, res)) answers.answer(res, 401, "unauthorized", String.valueOf(e.getMessage()), null);
      return;
    }
    try {
      k = key.apply(req);
      if (answers.malformedName(res, "scope", sc) || answers.malformedName(res, "key", k)) return;
      Idempotency.checkNames(sc, k);
    } catch (Exception e) {
      if (!answers.answerFor(e, res)) answers.answer(res, 400, "idempotency_key_malformed", e.getMessage(), null);
      return;
    }
    byte[] body = readBody(req);
    if (body == null) {
      answers.fixed(res, "body_too_large", null);
      return;
    }
    byte[] hash;
    try {
      hash = Answers.isJsonType(req.getContentType()) ? Fingerprint.of(body, exclude) : Fingerprint.sha256(body);
    } catch (IdempotencyException e) {
      answers.fixed(res, "invalid_json", null);
      return;
    }
    HttpServletRequest bodyRequest = new BufferedRequest(req, body);
    if (listener == null) {
      claimed(bodyRequest, res, chain, sc, k, hash, body);
      return;
    }
    long start = System.nanoTime();
    int[] outer = RoundTrips.start();
    try {
      claimed(bodyRequest, res, chain, sc, k, hash, body);
    } catch (IOException | ServletException | RuntimeException | Error e) {
      tellListener(bodyRequest, sc, k, start, e, 0, RoundTrips.end(outer));
      throw e;
    }
    tellListener(bodyRequest, sc, k, start, null, res.getStatus(), RoundTrips.end(outer));
  }

  private void claimed(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash, byte[] body)
      throws IOException, ServletException {
    if (statementSql != null) {
      statement(req, res, sc, k, hash, body);
    } else if (join != null) {
      joined(req, res, chain, sc, k, hash);
    } else {
      own(req, res, chain, sc, k, hash);
    }
  }

  /** The reservation of the request, for the listener (kept only when there is one). */
  private static final String SEEN_ATTRIBUTE = IdempotencyFilter.class.getName() + ".seen";

  private void saw(HttpServletRequest req, Reservation r) {
    if (listener != null) req.setAttribute(SEEN_ATTRIBUTE, r);
  }

  private void tellListener(
      HttpServletRequest req, String sc, String k, long start, Throwable error, int status,
      int roundTrips) {
    Reservation r = (Reservation) req.getAttribute(SEEN_ATTRIBUTE);
    IdempotencyClient.tell(listener, new IdempotencyClient.ClaimEvent("filter", sc,
        listenerSeesKeys ? k : null, r == null ? null : r.outcome().wire(),
        r == null ? 0 : r.attempt(), System.nanoTime() - start, error, status, roundTrips));
  }

  /** The statement option: execute_once on a connection of the pool, then its answer. */
  private void statement(
      HttpServletRequest req, HttpServletResponse res, String sc, String k, byte[] hash,
      byte[] body)
      throws IOException {
    List<?> params;
    try {
      params = statementParams.apply(req, body);
    } catch (Exception e) {
      answers.answer(res, 400, "invalid_request", String.valueOf(e.getMessage()), null);
      return;
    }
    Reservation r;
    Connection c;
    try {
      c = Connections.connect(dataSource);
    } catch (IdempotencyException e) {
      answers.unavailable(res);
      return;
    }
    try {
      if (!c.getAutoCommit()) c.setAutoCommit(true);
      r = Transactions.executeOnce(c, sc, k, hash, statementSql, params, statementStatus, options);
      saw(req, r);
    } catch (SQLException | RuntimeException e) {
      RuntimeException x = Connections.translate(e);
      if (!(x instanceof IdempotencyException.ConnectionLost && answers.answerFor(x, res))) {
        LOG.log(Level.WARNING, "the statement of key " + Json.quote(k) + " failed", x);
        answers.internal(res);
      }
      return;
    } finally {
      Connections.close(c);
    }
    answers.statementAnswer(res, r, sc, k);
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

  /**
   * Where the filter claims and stores: its own transaction on a connection of the pool, or a
   * savepoint in the application's.
   */
  private abstract static class Claimer {
    final Connection c;
    /** Whether the answer goes out at once (the filter committed) or after the application's. */
    final boolean committed;

    Claimer(Connection c, boolean committed) {
      this.c = c;
      this.committed = committed;
    }

    abstract Reservation claim(String sc, String k, byte[] hash) throws SQLException;

    /** Stores the answer: complete, then COMMIT or the savepoint's release. */
    abstract void store(String sc, String k, int status, String stored, int attempt)
        throws SQLException;

    /** Ends without storing (an answer that is not stored). */
    abstract void discard() throws SQLException;

    /** After an error: nothing of the request stays; never throws. */
    abstract void undo();

    void close() {}
  }

  /**
   * The filter's own transaction: the claim (reserve_begin, or BEGIN + reserve on a server that
   * refuses it), the handler, complete + COMMIT in one round trip, then the answer.
   */
  private void own(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash)
      throws IOException, ServletException {
    Connection conn;
    try {
      conn = Connections.connect(dataSource);
    } catch (IdempotencyException e) {
      answers.unavailable(res);
      return;
    }
    serve(req, res, chain, sc, k, hash, new Claimer(conn, true) {
      @Override
      Reservation claim(String sc, String k, byte[] hash) throws SQLException {
        return Transactions.claim(dataSource, c, sc, k, hash, options, features);
      }

      @Override
      void store(String sc, String k, int status, String stored, int attempt) {
        Transactions.finish(c, sc, k, status, stored, attempt);
      }

      @Override
      void discard() throws SQLException {
        if (Connections.transactionOpen(c)) RoundTrips.note();
        c.rollback();
      }

      @Override
      void undo() {
        Connections.rollback(c); // after reserve_begin's replay there is nothing to roll back
      }

      @Override
      void close() {
        Connections.close(c);
      }
    });
  }

  /** In the application's transaction: a savepoint around reserve, the handler and complete. */
  private void joined(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash)
      throws IOException, ServletException {
    Connection conn;
    Savepoint sp;
    try {
      conn = join.apply(req);
      RoundTrips.note();
      sp = conn.setSavepoint();
    } catch (Exception e) {
      if (!answers.answerFor(e, res)) answers.unavailable(res);
      return;
    }
    serve(req, res, chain, sc, k, hash, new Claimer(conn, false) {
      @Override
      Reservation claim(String sc, String k, byte[] hash) {
        return Idempotency.reserve(c, sc, k, hash, options);
      }

      @Override
      void store(String sc, String k, int status, String stored, int attempt)
          throws SQLException {
        Idempotency.complete(c, sc, k, status, stored, attempt);
        RoundTrips.note();
        c.releaseSavepoint(sp);
      }

      @Override
      void discard() {
        undo();
      }

      @Override
      void undo() {
        try {
          RoundTrips.note();
          c.rollback(sp);
          RoundTrips.note();
          c.releaseSavepoint(sp);
        } catch (SQLException ignored) {
          // the connection is gone: the server rolled the transaction back
        }
      }
    });
  }

  /** The claim, the handler with its answer held, and the answer stored with its writes. */
  private void serve(
      HttpServletRequest req, HttpServletResponse res, FilterChain chain, String sc, String k,
      byte[] hash, Claimer t)
      throws IOException, ServletException {
    try {
      Reservation r;
      try {
        r = t.claim(sc, k, hash);
        saw(req, r);
      } catch (SQLException | IdempotencyException e) {
        t.undo();
        if (!answers.answerFor(Connections.translate(e), res)) answers.internal(res);
        return;
      }
      if (r.outcome() != Outcome.NEW) {
        t.undo(); // nothing was written
        answers.replayOrRefuse(res, r, sc, k);
        return;
      }
      HeldResponse held = new HeldResponse(res);
      req.setAttribute(CLAIM_ATTRIBUTE, new Claim(t.c, sc, k, r));
      try {
        chain.doFilter(req, held);
      } catch (Throwable e) {
        t.undo();
        LOG.log(Level.WARNING, "the handler of key " + Json.quote(k) + " failed", e);
        if (!(Answers.lost(e) != null && answers.answerFor(e, res))) answers.internal(res);
        return;
      } finally {
        req.removeAttribute(CLAIM_ATTRIBUTE);
      }
      int status = held.status();
      // The answer is stored even if the client has gone away meanwhile: a retry then gets it.
      try {
        if (store.test(status)) {
          t.store(sc, k, status, held.stored(keepHeaders), r.attempt());
        } else {
          t.discard();
        }
      } catch (SQLException | IdempotencyException e) {
        t.undo();
        LOG.log(Level.WARNING, "the answer to key " + Json.quote(k) + " was not stored", e);
        RuntimeException x = Connections.translate(e);
        // a COMMIT that broke may have committed: the retry replays or runs afresh
        if (!(x instanceof IdempotencyException.ConnectionLost && answers.answerFor(x, res))) {
          answers.internal(res);
        }
        return;
      }
      // Joined, the answer is not flushed: the application commits (or rolls back) its
      // transaction after this filter returns, and the container sends the answer after that.
      held.release(t.committed);
    } finally {
      t.close();
    }
  }
}
