package idempotency;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.UUID;

/**
 * The key calls of the extension over a JDBC connection, with typed results and typed errors
 * ({@link IdempotencyException}). Each runs in the connection's current transaction (or in a
 * transaction of its own under auto-commit); every value is a bound parameter, never SQL text.
 */
public final class Idempotency {
  private Idempotency() {}

  /** reserve's lock_ttl, retention and wait; null for the server's defaults. */
  public record ReserveOptions(Duration lockTtl, Duration retention, Duration waitFor) {
    public static final ReserveOptions DEFAULTS = new ReserveOptions(null, null, null);

    String lockTtlText() {
      return lockTtl == null ? "5 minutes" : interval(lockTtl);
    }

    String retentionText() {
      return retention == null ? "24 hours" : interval(retention);
    }

    String waitText() {
      return waitFor == null ? "0" : interval(waitFor);
    }
  }

  static String interval(Duration d) {
    return d.toMillis() + " milliseconds";
  }

  // The statements, one list: every value is a parameter.
  static final String RESERVE =
      "SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, r.recovery_point,"
          + " r.first_seen_at, r.locked_until, r.expires_at"
          + " FROM idempotency.reserve(?, ?, ?::bytea, ?::interval, ?::interval, ?::interval) AS r";
  static final String COMPLETE = "SELECT idempotency.complete(?, ?, ?::integer, ?::jsonb, ?::integer)";
  static final String FAIL = "SELECT idempotency.fail(?, ?, ?::jsonb, ?::integer)";
  static final String CHECKPOINT = "SELECT idempotency.checkpoint(?, ?, ?, ?::integer)";
  static final String LOOKUP =
      "SELECT state::text, status_code, response::text, request_hash, attempt, recovery_point,"
          + " last_error::text, first_seen_at, completed_at, locked_until, expires_at"
          + " FROM idempotency.lookup(?, ?)";
  static final String FORGET = "SELECT idempotency.forget(?, ?)";
  static final String CLAIM_ONCE = "SELECT idempotency.claim_once(?, ?, ?::interval, ?::interval)";
  static final String ACCEPT_BIGINT = "SELECT idempotency.accept(?, ?, ?::bigint)";
  static final String ACCEPT_UUID = "SELECT idempotency.accept(?, ?, ?::uuid)";
  static final String WATERMARK = "SELECT idempotency.watermark(?, ?)::text";
  static final String NEXT_KEY = "SELECT idempotency.next_key(?)";
  static final String FINGERPRINT = "SELECT idempotency.fingerprint(?::jsonb, ?::text[])";

  /** A scope or key of 0 or over 255 bytes: 22023, before any statement is sent. */
  public static void checkNames(String scope, String key) {
    checkName("scope", scope);
    checkName("key", key);
  }

  private static void checkName(String what, String v) {
    int n = v == null ? 0 : v.getBytes(StandardCharsets.UTF_8).length;
    if (n == 0 || n > 255) {
      throw new IdempotencyException(
          IdempotencyException.INVALID_PARAMETER_VALUE,
          "the " + what + " must be 1 to 255 bytes (it is " + n + ")");
    }
  }

  /** Claims (scope, key) or tells why not. requestHash: a fingerprint, or null (no check). */
  public static Reservation reserve(
      Connection c, String scope, String key, byte[] requestHash, ReserveOptions o) {
    checkNames(scope, key);
    if (o == null) o = ReserveOptions.DEFAULTS;
    try (PreparedStatement ps = c.prepareStatement(RESERVE)) {
      ps.setString(1, scope);
      ps.setString(2, key);
      ps.setBytes(3, requestHash);
      ps.setString(4, o.lockTtlText());
      ps.setString(5, o.retentionText());
      ps.setString(6, o.waitText());
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return new Reservation(
            rs.getString(1),
            rs.getInt(2),
            rs.getString(3),
            rs.getInt(4),
            rs.getString(5),
            rs.getObject(6, OffsetDateTime.class),
            rs.getObject(7, OffsetDateTime.class),
            rs.getObject(8, OffsetDateTime.class));
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }

  /** Stores the final answer; response is a JSON text or null; attempt 0: no fence. */
  public static void complete(
      Connection c, String scope, String key, int statusCode, String response, int attempt) {
    exec(c, COMPLETE, scope, key, statusCode, response, attempt > 0 ? attempt : null);
  }

  /** Releases the claim for a retry; errorInfo (a JSON text or null) is kept as last_error. */
  public static void fail(Connection c, String scope, String key, String errorInfo, int attempt) {
    exec(c, FAIL, scope, key, errorInfo, attempt > 0 ? attempt : null);
  }

  /** Records a recovery point of a multi-step action. */
  public static void checkpoint(
      Connection c, String scope, String key, String recoveryPoint, int attempt) {
    exec(c, CHECKPOINT, scope, key, recoveryPoint, attempt > 0 ? attempt : null);
  }

  /** The stored record of a key, or null. */
  public static KeyRecord lookup(Connection c, String scope, String key) {
    try (PreparedStatement ps = c.prepareStatement(LOOKUP)) {
      ps.setString(1, scope);
      ps.setString(2, key);
      try (ResultSet rs = ps.executeQuery()) {
        if (!rs.next()) return null;
        return new KeyRecord(
            rs.getString(1),
            rs.getInt(2),
            rs.getString(3),
            rs.getBytes(4),
            rs.getInt(5),
            rs.getString(6),
            rs.getString(7),
            rs.getObject(8, OffsetDateTime.class),
            rs.getObject(9, OffsetDateTime.class),
            rs.getObject(10, OffsetDateTime.class),
            rs.getObject(11, OffsetDateTime.class));
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }

  /** Deletes a key on purpose; true if it existed. */
  public static boolean forget(Connection c, String scope, String key) {
    return (Boolean) one(c, FORGET, scope, key);
  }

  /**
   * claim_once in the caller's transaction: true the first time (the key is now completed in
   * this transaction: apply the message in it), false for a redelivery. KeyInProgress (IK003)
   * if another holder has the key after waitFor, KeyTooOld (IK004).
   */
  public static boolean claimOnce(
      Connection c, String scope, String key, Duration retention, Duration waitFor) {
    checkNames(scope, key);
    ReserveOptions o = new ReserveOptions(null, retention, waitFor);
    return (Boolean) one(c, CLAIM_ONCE, scope, key, o.retentionText(), o.waitText());
  }

  /** accept with a bigint position (a Kafka offset): true if above the watermark. */
  public static boolean accept(Connection c, String consumer, String partition, long position) {
    return (Boolean) one(c, ACCEPT_BIGINT, consumer, partition, position);
  }

  /** accept with a 128-bit position written as a UUID. */
  public static boolean accept(Connection c, String consumer, String partition, UUID position) {
    return (Boolean) one(c, ACCEPT_UUID, consumer, partition, position.toString());
  }

  /** The stored position of a partition as an unsigned number, or null. */
  public static BigInteger watermark(Connection c, String consumer, String partition) {
    Object v = one(c, WATERMARK, consumer, partition);
    return v == null ? null : new BigInteger((String) v);
  }

  /** next_key: monotonic across sessions, gaps allowed. */
  public static long nextKey(Connection c, String stream) {
    return ((Number) one(c, NEXT_KEY, stream)).longValue();
  }

  /** The server's fingerprint of a JSON text (for comparisons with {@link Fingerprint}). */
  public static byte[] serverFingerprint(Connection c, String jsonText, String... exclude) {
    try (PreparedStatement ps = c.prepareStatement(FINGERPRINT)) {
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

  static void bind(PreparedStatement ps, Object... args) throws SQLException {
    for (int i = 0; i < args.length; i++) {
      Object a = args[i];
      if (a == null) ps.setNull(i + 1, Types.VARCHAR);
      else if (a instanceof Integer n) ps.setInt(i + 1, n);
      else if (a instanceof Long n) ps.setLong(i + 1, n);
      else ps.setString(i + 1, a.toString());
    }
  }

  static void exec(Connection c, String sql, Object... args) {
    one(c, sql, args);
  }

  static Object one(Connection c, String sql, Object... args) {
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      bind(ps, args);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getObject(1);
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }
}
