package io.github.pgidempotency.idempotency;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import javax.sql.DataSource;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

/**
 * The connection layer: the only class that uses pgjdbc beyond JDBC's interfaces (the server's
 * transaction status, several statements in one round trip) and the one place where the
 * client's statements are run: one statement with its values bound, a statement and COMMIT in
 * one round trip, a connection taken from a pool and given back with no transaction open, and
 * a lost connection as {@link IdempotencyException.ConnectionLost}.
 */
final class Connections {
  private Connections() {}

  /** A connection of ds; none to be had is ConnectionLost (never a crash). */
  static Connection connect(DataSource ds) {
    try {
      return ds.getConnection();
    } catch (SQLException e) {
      IdempotencyException t = IdempotencyException.from(e);
      if (t instanceof IdempotencyException.ConnectionLost) throw t;
      throw new IdempotencyException.ConnectionLost(
          "no connection to the server: " + e.getMessage(), e);
    }
  }

  /** pgjdbc's connection under c (a pool's proxy unwraps to it), or null for another driver. */
  static BaseConnection pgjdbc(Connection c) {
    try {
      return c.isWrapperFor(BaseConnection.class) ? c.unwrap(BaseConnection.class) : null;
    } catch (SQLException e) {
      return null;
    }
  }

  /**
   * Whether the server has a transaction open on c (running or failed), as its last answer
   * said (pgjdbc keeps it); with another driver, whether auto-commit is off.
   */
  static boolean transactionOpen(Connection c) throws SQLException {
    BaseConnection pg = pgjdbc(c);
    if (pg != null) return pg.getTransactionState() != TransactionState.IDLE;
    return !c.getAutoCommit();
  }

  /** Ends the transaction open on c, if any; a broken connection is left as it is. */
  static void rollback(Connection c) {
    try {
      if (c.isClosed()) return;
      if (!c.getAutoCommit()) {
        if (transactionOpen(c)) RoundTrips.note();
        c.rollback(); // pgjdbc sends nothing when no transaction is open
      } else if (transactionOpen(c)) {
        execute(c, Statements.ROLLBACK);
      }
    } catch (SQLException ignored) {
      // the connection is gone: the server rolled the transaction back
    }
  }

  /** Gives c back (to its pool) with no transaction open and auto-commit on. */
  static void close(Connection c) {
    try {
      if (!c.isClosed()) {
        rollback(c);
        if (!c.getAutoCommit()) c.setAutoCommit(true);
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

  /**
   * The error e as the caller sees it: a JDBC error as the typed error of its SQLSTATE, a
   * RuntimeException as it is, and anything else (an Error, a checked exception of the work)
   * thrown on unchanged.
   */
  static RuntimeException translate(Throwable e) {
    if (e instanceof IdempotencyException i) return i;
    if (e instanceof SQLException s) return IdempotencyException.from(s);
    if (e instanceof RuntimeException r) return r;
    // An Error of the JVM (OutOfMemoryError, AssertionError, ...) or a checked exception of
    // the caller's work goes on unchanged, not wrapped: thrown from here, unchecked.
    throw Connections.<RuntimeException>rethrow(e);
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> T rethrow(Throwable e) throws T {
    throw (T) e;
  }

  static void bind(PreparedStatement ps, Object... args) throws SQLException {
    for (int i = 0; i < args.length; i++) {
      Object a = args[i];
      if (a == null) ps.setNull(i + 1, Types.VARCHAR);
      else if (a instanceof Integer n) ps.setInt(i + 1, n);
      else if (a instanceof Long n) ps.setLong(i + 1, n);
      else if (a instanceof byte[] b) ps.setBytes(i + 1, b);
      else ps.setString(i + 1, a.toString());
    }
  }

  /** The first column of the first row of sql, its values bound; errors typed. */
  static Object one(Connection c, String sql, Object... args) {
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      bind(ps, args);
      RoundTrips.note();
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getObject(1);
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }

  /** A row of sql, its values bound, read by read (null for no row); errors typed. */
  static <T> T row(Connection c, String sql, RowReader<T> read, Object... args) {
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      bind(ps, args);
      RoundTrips.note();
      try (ResultSet rs = ps.executeQuery()) {
        return rs.next() ? read.read(rs) : null;
      }
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }

  /** Reads one row of a result. */
  @FunctionalInterface
  interface RowReader<T> {
    T read(ResultSet rs) throws SQLException;
  }

  /**
   * sql (its values bound), then COMMIT, in one round trip on pgjdbc (two with another
   * driver). An error of sql leaves the transaction failed (the server skipped the COMMIT):
   * the caller rolls back.
   */
  static void thenCommit(Connection c, String sql, Object... args) throws SQLException {
    if (pgjdbc(c) == null) {
      one(c, sql, args);
      if (c.getAutoCommit()) {
        execute(c, Statements.COMMIT);
      } else {
        RoundTrips.note();
        c.commit();
      }
      return;
    }
    try (PreparedStatement ps = c.prepareStatement(Statements.thenCommit(sql))) {
      bind(ps, args);
      RoundTrips.note();
      ps.execute();
    }
  }

  /** Runs a statement with no parameter. */
  static void execute(Connection c, String sql) throws SQLException {
    try (Statement s = c.createStatement()) {
      RoundTrips.note();
      s.execute(sql);
    }
  }
}
