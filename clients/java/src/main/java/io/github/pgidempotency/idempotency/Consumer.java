package io.github.pgidempotency.idempotency;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import javax.sql.DataSource;

/**
 * The consumer helpers: claim_once, and consume once by message id or apply once by offset,
 * each in one transaction with the consumer's work: BEGIN and the claim in one round trip, the
 * work's statements, COMMIT.
 */
final class Consumer {
  private Consumer() {}

  static boolean claimOnce(
      Connection c, String scope, String key, Duration retention, Duration waitFor) {
    Keys.checkNames(scope, key);
    Idempotency.ReserveOptions o = new Idempotency.ReserveOptions(null, retention, waitFor);
    return (Boolean)
        Connections.one(c, Statements.CLAIM_ONCE, scope, key, o.retentionText(), o.waitText());
  }

  /** The claim that opens a consumer's transaction: true lets the work run. */
  @FunctionalInterface
  interface Gate {
    boolean open(Connection c);
  }

  /** Runs gate then, if it opened, apply, in one transaction: true if apply ran. */
  static boolean inTransaction(DataSource ds, Gate gate, IdempotencyClient.Apply apply) {
    Connection c = Connections.connect(ds);
    try {
      c.setAutoCommit(false);
      if (!gate.open(c)) {
        if (Connections.transactionOpen(c)) RoundTrips.note();
        c.rollback();
        return false;
      }
      try {
        apply.run(c);
      } catch (Throwable e) {
        Connections.rollback(c);
        throw Connections.translate(e);
      }
      if (Connections.transactionOpen(c)) RoundTrips.note();
      c.commit();
      return true;
    } catch (SQLException e) {
      Connections.rollback(c);
      throw IdempotencyException.from(e);
    } finally {
      Connections.close(c);
    }
  }
}
