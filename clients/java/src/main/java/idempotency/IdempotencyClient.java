package idempotency;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Objects;
import java.util.UUID;
import javax.sql.DataSource;

/**
 * The transaction helpers over a {@link DataSource} (any pool): run once (claim, work and
 * answer in one transaction), the cross-transaction helper for an external side effect (lease,
 * attempt fence), and the consumer helpers. The connection is taken for the call and given
 * back; a broken connection is {@link IdempotencyException.ConnectionLost}, never a crash.
 */
public final class IdempotencyClient {
  private final DataSource dataSource;

  public IdempotencyClient(DataSource dataSource) {
    this.dataSource = Objects.requireNonNull(dataSource);
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

  Connection connect() {
    try {
      return dataSource.getConnection();
    } catch (SQLException e) {
      IdempotencyException t = IdempotencyException.from(e);
      if (t instanceof IdempotencyException.ConnectionLost) throw t;
      throw new IdempotencyException.ConnectionLost(
          "no connection to the server: " + e.getMessage(), e);
    }
  }

  static void quietRollback(Connection c) {
    try {
      if (!c.isClosed() && !c.getAutoCommit()) c.rollback();
    } catch (SQLException ignored) {
      // the connection is gone: the server rolled the transaction back
    }
  }

  static void quietClose(Connection c) {
    try {
      if (!c.isClosed()) {
        if (!c.getAutoCommit()) {
          c.rollback();
          c.setAutoCommit(true);
        }
        c.close();
      }
    } catch (SQLException ignored) {
      try {
        c.close();
      } catch (SQLException alsoIgnored) {
        // nothing more to release
      }
    }
  }

  static RuntimeException translate(Throwable e) {
    if (e instanceof IdempotencyException i) return i;
    if (e instanceof SQLException s) return IdempotencyException.from(s);
    if (e instanceof RuntimeException r) return r;
    return new RuntimeException(e);
  }

  /**
   * Claims the key, runs work in the claim's transaction and stores its answer with it, all
   * committed together. A replay returns the stored answer without running work; in_progress,
   * mismatch and too_old throw KeyInProgress, KeyMismatch, KeyTooOld. Round trips: BEGIN +
   * reserve (one), the work's, complete, COMMIT; a replay: one plus the rollback.
   */
  public Result runOnce(Request req, Work work) {
    byte[] hash = req.requestHash();
    Idempotency.checkNames(req.scope(), req.key());
    Connection c = connect();
    try {
      c.setAutoCommit(false);
      return runOnceOn(c, req, hash, work, true);
    } catch (SQLException e) {
      quietRollback(c);
      throw IdempotencyException.from(e);
    } finally {
      quietClose(c);
    }
  }

  private static Result runOnceOn(
      Connection c, Request req, byte[] hash, Work work, boolean commit) throws SQLException {
    Reservation r = Idempotency.reserve(c, req.scope(), req.key(), hash, req.options());
    if (!Reservation.NEW.equals(r.outcome())) {
      if (commit) c.rollback();
      if (Reservation.REPLAY.equals(r.outcome())) {
        return new Result(r.statusCode(), r.response(), true, r.attempt());
      }
      throw r.error(req.scope(), req.key());
    }
    Answer a;
    try {
      a = work.run(c, r);
    } catch (Throwable e) {
      if (commit) quietRollback(c);
      throw translate(e);
    }
    Idempotency.complete(c, req.scope(), req.key(), a.statusCode(), a.response(), r.attempt());
    if (commit) c.commit();
    return new Result(a.statusCode(), a.response(), false, r.attempt());
  }

  /**
   * runOnce inside the caller's transaction (a connection with auto-commit off), in a
   * savepoint: the work's error rolls back to it, and the claim and the answer commit with the
   * caller's transaction.
   */
  public static Result runOnceIn(Connection tx, Request req, Work work) {
    byte[] hash = req.requestHash();
    Idempotency.checkNames(req.scope(), req.key());
    java.sql.Savepoint sp;
    try {
      sp = tx.setSavepoint();
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
    try {
      Result res = runOnceOn(tx, req, hash, work, false);
      if (res.replayed()) tx.rollback(sp);
      tx.releaseSavepoint(sp);
      return res;
    } catch (Throwable e) {
      try {
        tx.rollback(sp);
        tx.releaseSavepoint(sp);
      } catch (SQLException ignored) {
        // the connection is gone, or the caller's transaction ends anyway
      }
      throw translate(e);
    }
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
      Connection c = connect();
      try {
        Idempotency.checkpoint(c, req.scope(), req.key(), point, attempt());
        recoveryPoint = point;
      } finally {
        quietClose(c);
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
    byte[] hash = req.requestHash();
    Idempotency.checkNames(req.scope(), req.key());
    Reservation r;
    Connection c = connect();
    try {
      r = Idempotency.reserve(c, req.scope(), req.key(), hash, req.options()); // auto-commit
    } finally {
      quietClose(c);
    }
    if (Reservation.REPLAY.equals(r.outcome())) {
      return new Result(r.statusCode(), r.response(), true, r.attempt());
    }
    if (!Reservation.NEW.equals(r.outcome())) throw r.error(req.scope(), req.key());
    Attempt attempt = new Attempt(req, r);
    Answer a;
    try {
      a = work.run(attempt);
    } catch (Throwable e) {
      release(req, r.attempt(), e);
      throw translate(e);
    }
    c = connect();
    try {
      c.setAutoCommit(false);
      Answer stored = finish == null ? a : finish.run(c, a);
      Idempotency.complete(
          c, req.scope(), req.key(), stored.statusCode(), stored.response(), r.attempt());
      c.commit();
      return new Result(stored.statusCode(), stored.response(), false, r.attempt());
    } catch (Throwable e) {
      quietRollback(c);
      RuntimeException t = translate(e);
      if (!(t instanceof IdempotencyException.StaleAttempt)) release(req, r.attempt(), e);
      throw t;
    } finally {
      quietClose(c);
    }
  }

  private void release(Request req, int attempt, Throwable why) {
    String info =
        "{\"error\":"
            + Json.quote(why.getClass().getSimpleName())
            + ",\"message\":"
            + Json.quote(String.valueOf(why.getMessage()))
            + "}";
    try {
      Connection c = connect();
      try {
        Idempotency.fail(c, req.scope(), req.key(), info, attempt);
      } finally {
        quietClose(c);
      }
    } catch (IdempotencyException ignored) {
      // the lease lapses by itself; the next holder gets attempt + 1
    }
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
    return inTransaction(
        c -> Idempotency.claimOnce(c, scope, messageId, null, null), apply);
  }

  /**
   * Runs apply in one transaction with accept(consumer, partition, offset): true if it ran,
   * false for a position at or below the watermark.
   */
  public boolean applyOnce(String consumer, String partition, long offset, Apply apply) {
    return inTransaction(c -> Idempotency.accept(c, consumer, partition, offset), apply);
  }

  /** applyOnce with a 128-bit position written as a UUID. */
  public boolean applyOnce(String consumer, String partition, UUID position, Apply apply) {
    return inTransaction(c -> Idempotency.accept(c, consumer, partition, position), apply);
  }

  private interface Gate {
    boolean open(Connection c);
  }

  private boolean inTransaction(Gate gate, Apply apply) {
    Connection c = connect();
    try {
      c.setAutoCommit(false);
      if (!gate.open(c)) {
        c.rollback();
        return false;
      }
      try {
        apply.run(c);
      } catch (Throwable e) {
        quietRollback(c);
        throw translate(e);
      }
      c.commit();
      return true;
    } catch (SQLException e) {
      quietRollback(c);
      throw IdempotencyException.from(e);
    } finally {
      quietClose(c);
    }
  }

  /** Runs a statement with no parameter (for tests and examples: DDL). */
  static void execute(Connection c, String sql) throws SQLException {
    try (Statement s = c.createStatement()) {
      s.execute(sql);
    }
  }
}
