package io.github.pgidempotency.idempotency;

import java.sql.Connection;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import javax.sql.DataSource;

/**
 * The transaction helpers over a {@link DataSource} (any pool): run once (claim, work and
 * answer in one transaction), the cross-transaction helper for an external side effect (lease,
 * attempt fence), and the consumer helpers. The connection is taken for the call and given
 * back; a broken connection is {@link IdempotencyException.ConnectionLost}, never a crash. The
 * helpers live in Transactions and Consumer; this class is their public face.
 */
public final class IdempotencyClient {
  private final DataSource dataSource;
  private final Features features = new Features();
  private volatile ClaimListener listener;
  private volatile boolean listenerSeesKeys;

  public IdempotencyClient(DataSource dataSource) {
    this.dataSource = Objects.requireNonNull(dataSource);
  }

  /**
   * What one call of runOnce, runOnceStatement, runExternal, consumeOnce or applyOnce came to:
   * the helper's name, the scope (applyOnce: the consumer), the key (null unless the listener
   * was set to see keys: they may carry customer data; applyOnce: "partition@position"), the
   * claim's outcome (new, replay, in_progress, mismatch, too_old; null when the call failed
   * before the server answered the claim; consumeOnce and applyOnce: new when applied, replay
   * for a redelivery), the attempt (0 when unknown, always for the consumers), the call's time
   * and what it threw (null for new and replay; KeyInProgress is the 409, KeyMismatch the 422).
   * The IdempotencyFilter's listener gets one per request once its key was read, helper
   * "filter", with status the HTTP status it answered (its own 409 or 422 is an answer there,
   * not an error); status is 0 for the other helpers. roundTrips is the number of statements
   * (or statements sent together in one round trip) the helper itself sent to the server: the
   * server's edition, asked once per data source, included; the work's or the handler's own
   * statements not (Node's span attribute idempotency.round_trips).
   */
  public record ClaimEvent(
      String helper, String scope, String key, String outcome, int attempt, long nanos,
      Throwable error, int status, int roundTrips) {}

  /** Gets a ClaimEvent after each helper call, on the caller's thread; keep it quick. */
  @FunctionalInterface
  public interface ClaimListener {
    void onClaim(ClaimEvent event);
  }

  /**
   * Sets the listener of this client's helper calls (null: none, which costs nothing), and
   * whether its events carry the key. A listener that throws is ignored: it never fails a call.
   */
  public void setClaimListener(ClaimListener listener, boolean withKeys) {
    this.listenerSeesKeys = withKeys;
    this.listener = listener;
  }

  private Result observed(String helper, Request req, Supplier<Result> call) {
    ClaimListener l = listener;
    if (l == null) return call.get();
    long start = System.nanoTime();
    int[] outer = RoundTrips.start();
    Result result;
    try {
      result = call.get();
    } catch (RuntimeException | Error e) {
      tell(l, helper, req, null, e, start, RoundTrips.end(outer));
      throw e;
    }
    tell(l, helper, req, result, null, start, RoundTrips.end(outer));
    return result;
  }

  private void tell(ClaimListener l, String helper, Request req, Result result, Throwable error,
      long start, int roundTrips) {
    String outcome = result != null ? (result.replayed() ? "replay" : "new") : outcomeOf(error);
    tell(l, new ClaimEvent(helper, req.scope(), listenerSeesKeys ? req.key() : null, outcome,
        result != null ? result.attempt() : 0, System.nanoTime() - start, error, 0, roundTrips));
  }

  private static String outcomeOf(Throwable error) {
    return error instanceof IdempotencyException.KeyInProgress ? "in_progress"
        : error instanceof IdempotencyException.KeyMismatch ? "mismatch"
        : error instanceof IdempotencyException.KeyTooOld ? "too_old"
        : null;
  }

  static void tell(ClaimListener l, ClaimEvent event) {
    try {
      l.onClaim(event);
    } catch (RuntimeException ignored) {
      // the listener's failure is not the call's
    }
  }

  /** A consumer helper's call (true: applied, a new key; false: a redelivery), observed. */
  private boolean observedApplied(
      String helper, String scope, Supplier<String> key, BooleanSupplier call) {
    ClaimListener l = listener;
    if (l == null) return call.getAsBoolean();
    long start = System.nanoTime();
    String seenKey = listenerSeesKeys ? key.get() : null;
    int[] outer = RoundTrips.start();
    boolean applied;
    try {
      applied = call.getAsBoolean();
    } catch (RuntimeException | Error e) {
      tell(l, new ClaimEvent(helper, scope, seenKey, outcomeOf(e), 0, System.nanoTime() - start,
          e, 0, RoundTrips.end(outer)));
      throw e;
    }
    tell(l, new ClaimEvent(helper, scope, seenKey, applied ? "new" : "replay", 0,
        System.nanoTime() - start, null, 0, RoundTrips.end(outer)));
    return applied;
  }

  public DataSource dataSource() {
    return dataSource;
  }

  /** The server's edition, asked once per data source (see {@link Versions#edition}). */
  public Versions.Edition edition() {
    return Versions.edition(dataSource);
  }

  /** A key and what it guards: a JSON request text (fingerprinted with exclude), or a hash. */
  public record Request(
      String scope,
      String key,
      String request,
      String[] exclude,
      byte[] hash,
      Idempotency.ReserveOptions options) {
    public static Request of(String scope, String key, String jsonRequest) {
      return new Request(scope, key, jsonRequest, new String[0], null, null);
    }

    byte[] requestHash() {
      if (hash != null || request == null) return hash;
      return Fingerprint.of(request, exclude == null ? new String[0] : exclude);
    }
  }

  /** The answer of a key: the work's (replayed false) or the stored one. */
  public record Result(int statusCode, String response, boolean replayed, int attempt) {}

  /** The answer a work returns: an HTTP-like status and a JSON text (or null). */
  public record Answer(int statusCode, String response) {}

  /** Work guarded by a key, in the claim's transaction. A throw rolls back claim and work. */
  @FunctionalInterface
  public interface Work {
    Answer run(Connection tx, Reservation reservation) throws Exception;
  }

  /**
   * Claims the key, runs work in the claim's transaction and stores its answer with it, all
   * committed together. A replay returns the stored answer without running work; in_progress,
   * mismatch and too_old throw KeyInProgress, KeyMismatch, KeyTooOld. Round trips:
   * reserve_begin (which opens the transaction for a new key), the work's, complete + COMMIT
   * (one); a replay: reserve_begin alone. On a server that refuses reserve_begin: BEGIN +
   * reserve (one round trip), and after a replay a ROLLBACK.
   */
  public Result runOnce(Request req, Work work) {
    return observed("runOnce", req, () -> Transactions.runOnce(dataSource, features, req, work));
  }

  /**
   * runOnce inside the caller's transaction (a connection with auto-commit off), in a
   * savepoint: the work's error rolls back to it, and the claim and the answer commit with the
   * caller's transaction.
   */
  public static Result runOnceIn(Connection tx, Request req, Work work) {
    return Transactions.runOnceIn(tx, req, work);
  }

  /**
   * The work of runOnceStatement: one SELECT, INSERT, UPDATE, DELETE or MERGE with the values
   * of its $1, $2, ... (sent as text, see {@link Idempotency#executeOnce}), and the status
   * stored with its response (0: 201).
   */
  public record OneStatement(String sql, List<?> params, int statusCode) {
    /** The statement with these parameters (nulls allowed) and the status 201. */
    public static OneStatement of(String sql, Object... params) {
      return new OneStatement(sql, Arrays.asList(params), 201);
    }
  }

  /**
   * runOnce for work that is one statement, in one round trip: execute_once on a connection of
   * the pool under auto-commit, where the claim, the statement and its answer commit together.
   * A new key runs the statement and returns its response (its one row as JSON) with the
   * statement's status; a replay returns the stored answer and runs nothing; in_progress,
   * mismatch and too_old throw KeyInProgress, KeyMismatch, KeyTooOld. An error of the
   * statement leaves the key new.
   */
  public Result runOnceStatement(Request req, OneStatement statement) {
    return observed("runOnceStatement", req,
        () -> Transactions.runOnceStatement(dataSource, req, statement));
  }

  /**
   * runOnceStatement in the caller's transaction (a connection with auto-commit off): the
   * claim and the statement's writes commit with it; an error of the statement fails it.
   */
  public static Result runOnceStatementIn(Connection tx, Request req, OneStatement statement) {
    Keys.checkNames(req.scope(), req.key());
    return Transactions.runOnceStatementIn(tx, req, statement, req.requestHash());
  }

  /** One holder's attempt at an external side effect (runExternal). */
  public final class Attempt {
    private final Request req;
    private final Reservation reservation;
    private String recoveryPoint;

    Attempt(Request req, Reservation r) {
      this.req = req;
      this.reservation = r;
      this.recoveryPoint = r.recoveryPoint();
    }

    /** The fencing token. */
    public int attempt() {
      return reservation.attempt();
    }

    /** The last checkpoint, of this attempt or of one that was taken over (null: none). */
    public String recoveryPoint() {
      return recoveryPoint;
    }

    public Reservation reservation() {
      return reservation;
    }

    /** Records progress in its own transaction (StaleAttempt if another holder took over). */
    public void checkpoint(String point) {
      Connection c = Connections.connect(dataSource);
      try {
        Keys.checkpoint(c, req.scope(), req.key(), point, attempt());
        recoveryPoint = point;
      } finally {
        Connections.close(c);
      }
    }
  }

  /** The external work: runs with no transaction open. */
  @FunctionalInterface
  public interface ExternalWork {
    Answer run(Attempt attempt) throws Exception;
  }

  /** Business writes committed with the answer, in the second transaction. */
  @FunctionalInterface
  public interface Finish {
    Answer run(Connection tx, Answer answer) throws Exception;
  }

  /**
   * The cross-transaction helper: commits the claim (a lease of lockTtl), runs work with no
   * transaction open, then in a second transaction runs finish (may be null) and complete with
   * the attempt fence: StaleAttempt if the lease lapsed and another holder took over (finish's
   * writes roll back with it). If work or the second transaction fails, the claim is released
   * with fail (the next reserve gets attempt + 1) and the error is thrown.
   */
  public Result runExternal(Request req, Finish finish, ExternalWork work) {
    return observed("runExternal", req, () -> Transactions.runExternal(this, req, finish, work));
  }

  /** Work of a consumer, in the claim's transaction. */
  @FunctionalInterface
  public interface Apply {
    void run(Connection tx) throws Exception;
  }

  /**
   * Runs apply in one transaction with claim_once(scope, messageId): true if it ran, false for
   * a redelivery (nothing ran).
   */
  public boolean consumeOnce(String scope, String messageId, Apply apply) {
    return observedApplied("consumeOnce", scope, () -> messageId, () -> Consumer.inTransaction(
        dataSource, c -> Consumer.claimOnce(c, scope, messageId, null, null), apply));
  }

  /**
   * Runs apply in one transaction with accept(consumer, partition, offset): true if it ran,
   * false for a position at or below the watermark.
   */
  public boolean applyOnce(String consumer, String partition, long offset, Apply apply) {
    return observedApplied("applyOnce", consumer, () -> partition + "@" + offset,
        () -> Consumer.inTransaction(
            dataSource, c -> Streams.accept(c, consumer, partition, offset), apply));
  }

  /** applyOnce with a 128-bit position written as a UUID. */
  public boolean applyOnce(String consumer, String partition, UUID position, Apply apply) {
    return observedApplied("applyOnce", consumer, () -> partition + "@" + position,
        () -> Consumer.inTransaction(
            dataSource, c -> Streams.accept(c, consumer, partition, position), apply));
  }
}
