package io.github.pgidempotency.idempotency;

import java.math.BigInteger;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.UUID;

/**
 * The key calls of the extension over a JDBC connection, with typed results and typed errors
 * ({@link IdempotencyException}). Each runs in the connection's current transaction (or in a
 * transaction of its own under auto-commit); every value is a bound parameter, never SQL text.
 * The calls live in Keys, Streams and Consumer; this class is their public face.
 */
public final class Idempotency {
  private Idempotency() {}

  /** reserve's lock_ttl, retention and wait; null for the server's defaults. */
  public record ReserveOptions(Duration lockTtl, Duration retention, Duration waitFor) {
    public static final ReserveOptions DEFAULTS = new ReserveOptions(null, null, null);

    String lockTtlText() {
      return lockTtl == null ? Spec.DEFAULT_LOCK_TTL : interval(lockTtl);
    }

    String retentionText() {
      return retention == null ? Spec.DEFAULT_RETENTION : interval(retention);
    }

    String waitText() {
      return waitFor == null ? Spec.DEFAULT_WAIT : interval(waitFor);
    }
  }

  /**
   * A duration as the spec's interval text: whole microseconds (PostgreSQL's resolution), so no
   * millisecond or second is rounded away.
   */
  static String interval(Duration d) {
    long micros = Math.addExact(Math.multiplyExact(d.getSeconds(), 1_000_000L), d.getNano() / 1000);
    return micros + " " + Spec.DURATION_UNIT;
  }

  /** A scope or key of 0 or over 255 bytes: 22023, before any statement is sent. */
  public static void checkNames(String scope, String key) {
    Keys.checkNames(scope, key);
  }

  /** Claims (scope, key) or tells why not. requestHash: a fingerprint, or null (no check). */
  public static Reservation reserve(
      Connection c, String scope, String key, byte[] requestHash, ReserveOptions o) {
    return Keys.reserve(c, scope, key, requestHash, o);
  }

  /** Stores the final answer; response is a JSON text or null; attempt 0: no fence. */
  public static void complete(
      Connection c, String scope, String key, int statusCode, String response, int attempt) {
    Keys.complete(c, scope, key, statusCode, response, attempt);
  }

  /** Releases the claim for a retry; errorInfo (a JSON text or null) is kept as last_error. */
  public static void fail(Connection c, String scope, String key, String errorInfo, int attempt) {
    Keys.fail(c, scope, key, errorInfo, attempt);
  }

  /** Records a recovery point of a multi-step action. */
  public static void checkpoint(
      Connection c, String scope, String key, String recoveryPoint, int attempt) {
    Keys.checkpoint(c, scope, key, recoveryPoint, attempt);
  }

  /**
   * execute_once: the claim, one statement and its answer in one statement (one round trip;
   * under auto-commit, committed together). On a new key the server runs statement with
   * params bound to $1, $2, ... (each sent as text: null, strings, numbers, booleans, java.time
   * values, UUIDs, byte[], and maps, collections and arrays as JSON), stores its one row as the
   * response (a single json / jsonb column as it is, other rows as a JSON object, no row null;
   * several rows are 21000) with statusCode (0: 201) and completes the key: the reservation is
   * new with that status and response. Other outcomes run nothing and are reserve's. An error
   * of the statement rolls the claim back with it (in c's transaction, that transaction fails).
   * A server without execute_once is an error (42883) naming it.
   */
  public static Reservation executeOnce(
      Connection c,
      String scope,
      String key,
      byte[] requestHash,
      String statement,
      List<?> params,
      int statusCode,
      ReserveOptions o) {
    return Transactions.executeOnce(c, scope, key, requestHash, statement, params, statusCode, o);
  }

  /** The stored record of a key, or null. */
  public static KeyRecord lookup(Connection c, String scope, String key) {
    return Keys.lookup(c, scope, key);
  }

  /** Deletes a key on purpose; true if it existed. */
  public static boolean forget(Connection c, String scope, String key) {
    return Keys.forget(c, scope, key);
  }

  /**
   * claim_once in the caller's transaction: true the first time (the key is now completed in
   * this transaction: apply the message in it), false for a redelivery. KeyInProgress (IK003)
   * if another holder has the key after waitFor, KeyTooOld (IK004).
   */
  public static boolean claimOnce(
      Connection c, String scope, String key, Duration retention, Duration waitFor) {
    return Consumer.claimOnce(c, scope, key, retention, waitFor);
  }

  /** accept with a bigint position (a Kafka offset): true if above the watermark. */
  public static boolean accept(Connection c, String consumer, String partition, long position) {
    return Streams.accept(c, consumer, partition, position);
  }

  /** accept with a 128-bit position written as a UUID. */
  public static boolean accept(Connection c, String consumer, String partition, UUID position) {
    return Streams.accept(c, consumer, partition, position);
  }

  /** The stored position of a partition as an unsigned number, or null. */
  public static BigInteger watermark(Connection c, String consumer, String partition) {
    return Streams.watermark(c, consumer, partition);
  }

  /** next_key: monotonic across sessions, gaps allowed. */
  public static long nextKey(Connection c, String stream) {
    return Streams.nextKey(c, stream);
  }

  /** The server's fingerprint of a JSON text (for comparisons with {@link Fingerprint}). */
  public static byte[] serverFingerprint(Connection c, String jsonText, String... exclude) {
    try (PreparedStatement ps = c.prepareStatement(Statements.FINGERPRINT)) {
      ps.setString(1, jsonText);
      ps.setArray(2, c.createArrayOf("text", exclude));
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getBytes(1);
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }
}
