package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.sql.SQLException;
import org.junit.jupiter.api.Test;

/**
 * What the work throws reaches the caller as it was thrown (an Error of the JVM, a checked
 * exception), and the server's SQLSTATEs become the classes of the client's own checks.
 */
class PropagationTest {
  @Test
  void errorsAndCheckedExceptionsOfTheWorkPropagateUnchanged() {
    AssertionError assertion = new AssertionError("the work's own assertion");
    Throwable got =
        assertThrows(Throwable.class, () -> Connections.translate(assertion));
    assertSame(assertion, got);
    OutOfMemoryError oom = new OutOfMemoryError("simulated");
    assertSame(oom, assertThrows(Throwable.class, () -> Connections.translate(oom)));
    IOException io = new IOException("the work's checked exception");
    assertSame(io, assertThrows(Throwable.class, () -> Connections.translate(io)));
    IllegalStateException runtime = new IllegalStateException("unchecked");
    assertSame(runtime, Connections.translate(runtime));
  }

  @Test
  void theWorkOfRunOnceThrowsThroughUnchanged() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    IOException io = new IOException("the work's checked exception");
    Throwable got =
        assertThrows(
            Throwable.class,
            () ->
                client.runOnce(
                    IdempotencyClient.Request.of("acct_prop", "prop-" + System.nanoTime(), "{}"),
                    (tx, r) -> {
                      throw io;
                    }));
    assertSame(io, got);
    AssertionError assertion = new AssertionError("the work's own assertion");
    assertSame(
        assertion,
        assertThrows(
            Throwable.class,
            () ->
                client.runOnce(
                    IdempotencyClient.Request.of("acct_prop", "prop-" + System.nanoTime(), "{}"),
                    (tx, r) -> {
                      throw assertion;
                    })));
  }

  @Test
  void serverSqlStatesBecomeTheClassesOfTheClientsChecks() {
    assertInstanceOf(
        IdempotencyException.ProgramLimitExceeded.class,
        IdempotencyException.from(new SQLException("too deep", "54000")));
    IdempotencyException json =
        IdempotencyException.from(new SQLException("invalid input syntax for type json", "22P02"));
    assertInstanceOf(IdempotencyException.InvalidJson.class, json);
    assertEquals("22P02", json.sqlState());
    assertInstanceOf(
        IdempotencyException.InvalidJson.class,
        IdempotencyException.from(new SQLException("\\u0000", "22P05")));
    assertInstanceOf(
        IdempotencyException.InvalidJson.class, assertThrows(
            IdempotencyException.class, () -> Fingerprint.of("{\"a\": ")));
  }
}
