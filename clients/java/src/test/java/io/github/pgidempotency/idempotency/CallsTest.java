package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.sql.Connection;
import java.util.UUID;
import org.junit.jupiter.api.Test;

class CallsTest {
  // A key that would break SQL built from text: it only ever travels as a parameter.
  static final String NASTY = "k'); DROP TABLE orders; --\\ \"é😀";

  @Test
  void reserveCompleteReplayMismatch() throws Exception {
    String scope = TestDb.unique("calls"), key = NASTY + System.nanoTime();
    byte[] hash = Fingerprint.of("{\"amount\": 10}");
    try (Connection c = TestDb.db().getConnection()) {
      Reservation r = Idempotency.reserve(c, scope, key, hash, null);
      assertEquals(Outcome.NEW, r.outcome());
      assertEquals(1, r.attempt());
      assertNotNull(r.lockedUntil());
      Idempotency.complete(c, scope, key, 201, "{\"id\": 7}", r.attempt());

      Reservation again = Idempotency.reserve(c, scope, key, Fingerprint.of("{\"amount\":10.0}"), null);
      assertEquals(Outcome.REPLAY, again.outcome());
      assertEquals(201, again.statusCode());
      assertEquals("{\"id\":7}", Json.compact(again.response()));

      Reservation other = Idempotency.reserve(c, scope, key, Fingerprint.of("{\"amount\":11}"), null);
      assertEquals(Outcome.MISMATCH, other.outcome());
      assertTrue(other.error(scope, key) instanceof IdempotencyException.KeyMismatch);

      KeyRecord rec = Idempotency.lookup(c, scope, key);
      assertEquals("completed", rec.state());
      assertArrayEquals(hash, rec.requestHash());
      assertTrue(Idempotency.forget(c, scope, key));
      assertNull(Idempotency.lookup(c, scope, key));
      assertFalse(Idempotency.forget(c, scope, key));
    }
  }

  @Test
  void inProgressFailCheckpointAndTheAttemptFence() throws Exception {
    String scope = TestDb.unique("calls"), key = "k1";
    try (Connection holder = TestDb.db().getConnection();
        Connection other = TestDb.db().getConnection()) {
      Reservation r = Idempotency.reserve(holder, scope, key, null, null); // committed: a lease
      assertEquals(Outcome.NEW, r.outcome());
      Reservation busy = Idempotency.reserve(other, scope, key, null, null);
      assertEquals(Outcome.IN_PROGRESS, busy.outcome());
      IdempotencyException e = busy.error(scope, key);
      assertTrue(e instanceof IdempotencyException.KeyInProgress);
      assertEquals(409, e.httpStatus());

      Idempotency.checkpoint(holder, scope, key, "charged", r.attempt());
      Idempotency.fail(holder, scope, key, "{\"error\": \"timeout\"}", r.attempt());
      KeyRecord rec = Idempotency.lookup(other, scope, key);
      assertEquals("charged", rec.recoveryPoint());
      assertNotNull(rec.lastError());

      Reservation second = Idempotency.reserve(other, scope, key, null, null);
      assertEquals(Outcome.NEW, second.outcome());
      assertEquals(2, second.attempt());
      assertEquals("charged", second.recoveryPoint());
      // the first holder's attempt is stale now
      assertThrows(
          IdempotencyException.StaleAttempt.class,
          () -> Idempotency.complete(holder, scope, key, 200, null, r.attempt()));
      Idempotency.complete(other, scope, key, 200, null, second.attempt());
      assertThrows(
          IdempotencyException.ResultConflict.class,
          () -> Idempotency.complete(other, scope, key, 201, "{}", second.attempt()));
    }
  }

  @Test
  void namesAreCheckedBeforeSending() {
    IdempotencyException e =
        assertThrows(
            IdempotencyException.class,
            () -> Idempotency.reserve(null, "s", "x".repeat(256), null, null));
    assertEquals("22023", e.sqlState());
    assertThrows(IdempotencyException.class, () -> Idempotency.checkNames("", "k"));
  }

  @Test
  void claimOnceAcceptWatermarkNextKey() throws Exception {
    String scope = TestDb.unique("consumer");
    try (Connection c = TestDb.db().getConnection()) {
      assertTrue(Idempotency.claimOnce(c, scope, "m1", null, null));
      assertFalse(Idempotency.claimOnce(c, scope, "m1", null, null));

      assertNull(Idempotency.watermark(c, scope, "p0"));
      assertTrue(Idempotency.accept(c, scope, "p0", 5L));
      assertFalse(Idempotency.accept(c, scope, "p0", 5L));
      assertFalse(Idempotency.accept(c, scope, "p0", 3L));
      assertEquals(BigInteger.valueOf(5), Idempotency.watermark(c, scope, "p0"));

      UUID u = UUID.fromString("00000000-0000-0000-0000-0000000000ff");
      assertTrue(Idempotency.accept(c, scope, "p1", u));
      assertFalse(Idempotency.accept(c, scope, "p1", u));
      assertEquals(BigInteger.valueOf(255), Idempotency.watermark(c, scope, "p1"));

      long a = Idempotency.nextKey(c, "java_stream"), b = Idempotency.nextKey(c, "java_stream");
      assertTrue(b > a);
      IdempotencyException e =
          assertThrows(IdempotencyException.class, () -> Idempotency.nextKey(c, "no_such_stream"));
      assertNotNull(e.sqlState());
    }
  }

  @Test
  void claimOnceHeldElsewhereIsKeyInProgress() throws Exception {
    String scope = TestDb.unique("consumer");
    try (Connection a = TestDb.db().getConnection();
        Connection b = TestDb.db().getConnection()) {
      a.setAutoCommit(false);
      assertTrue(Idempotency.claimOnce(a, scope, "m", null, null));
      IdempotencyException e =
          assertThrows(
              IdempotencyException.KeyInProgress.class,
              () -> Idempotency.claimOnce(b, scope, "m", null, null));
      assertEquals("IK003", e.sqlState());
      a.rollback();
      assertTrue(Idempotency.claimOnce(b, scope, "m", null, null));
    }
  }
}
