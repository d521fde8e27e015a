package io.github.pgidempotency.idempotency;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;

/**
 * The key calls: reserve, reserve_begin, complete, fail, checkpoint, lookup, forget, and the
 * names' check. Each runs in the connection's current transaction (or in one of its own under
 * auto-commit); {@link Idempotency} is their public face.
 */
final class Keys {
  private Keys() {}

  /** A scope or key of 0 or over 255 bytes: 22023, before any statement is sent. */
  static void checkNames(String scope, String key) {
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

  static Reservation reserve(
      Connection c, String scope, String key, byte[] requestHash, Idempotency.ReserveOptions o) {
    return reserveWith(Statements.RESERVE, c, scope, key, requestHash, o);
  }

  /**
   * reserve_begin, for a connection with no transaction open (auto-commit on): the outcome new
   * leaves a transaction open (the server opened it, as BEGIN would); any other leaves none.
   */
  static Reservation reserveBegin(
      Connection c, String scope, String key, byte[] requestHash, Idempotency.ReserveOptions o) {
    return reserveWith(Statements.RESERVE_BEGIN, c, scope, key, requestHash, o);
  }

  private static Reservation reserveWith(
      String sql,
      Connection c,
      String scope,
      String key,
      byte[] requestHash,
      Idempotency.ReserveOptions o) {
    checkNames(scope, key);
    if (o == null) o = Idempotency.ReserveOptions.DEFAULTS;
    return Connections.row(
        c,
        sql,
        Keys::reservation,
        scope,
        key,
        requestHash,
        o.lockTtlText(),
        o.retentionText(),
        o.waitText());
  }

  static Reservation reservation(ResultSet rs) throws SQLException {
    return new Reservation(
        Outcome.of(rs.getString(1)),
        rs.getInt(2),
        rs.getString(3),
        rs.getInt(4),
        rs.getString(5),
        time(rs, 6),
        time(rs, 7),
        time(rs, 8));
  }

  private static OffsetDateTime time(ResultSet rs, int column) throws SQLException {
    return rs.getObject(column, OffsetDateTime.class);
  }

  /**
   * Whether e is reserve_begin refused as a whole: a server before 0.3.0 (42883), a role
   * without EXECUTE on it (42501), keys distributed by Citus (0A000). BEGIN + reserve do the
   * same.
   */
  static boolean reserveBeginRefused(IdempotencyException e) {
    String code = e.sqlState();
    if (!"42883".equals(code) && !"42501".equals(code) && !"0A000".equals(code)) return false;
    String m = String.valueOf(e.getMessage());
    return m.contains("reserve_begin") || m.contains("shard");
  }

  static Integer fence(int attempt) {
    return attempt > 0 ? attempt : null;
  }

  static void complete(
      Connection c, String scope, String key, int statusCode, String response, int attempt) {
    Connections.one(c, Statements.COMPLETE, scope, key, statusCode, response, fence(attempt));
  }

  static void fail(Connection c, String scope, String key, String errorInfo, int attempt) {
    Connections.one(c, Statements.FAIL, scope, key, errorInfo, fence(attempt));
  }

  static void checkpoint(
      Connection c, String scope, String key, String recoveryPoint, int attempt) {
    Connections.one(c, Statements.CHECKPOINT, scope, key, recoveryPoint, fence(attempt));
  }

  static KeyRecord lookup(Connection c, String scope, String key) {
    return Connections.row(
        c,
        Statements.LOOKUP,
        rs ->
            new KeyRecord(
                rs.getString(1),
                rs.getInt(2),
                rs.getString(3),
                rs.getBytes(4),
                rs.getInt(5),
                rs.getString(6),
                rs.getString(7),
                time(rs, 8),
                time(rs, 9),
                time(rs, 10),
                time(rs, 11)),
        scope,
        key);
  }

  static boolean forget(Connection c, String scope, String key) {
    return (Boolean) Connections.one(c, Statements.FORGET, scope, key);
  }
}
