package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

/** The HTTP answer each error carries (httpStatus), which the filter and callers read. */
class ErrorsTest {
  @Test
  void eachErrorHasItsHttpStatus() {
    assertEquals(409, new IdempotencyException.KeyInProgress("m", null, null).httpStatus());
    assertEquals(422, new IdempotencyException.KeyMismatch("m").httpStatus());
    assertEquals(422, new IdempotencyException.KeyTooOld("m", null).httpStatus());
    assertEquals(503, new IdempotencyException.ConnectionLost("m", null).httpStatus());
    assertEquals(400, assertThrows(IdempotencyException.class, () -> IdempotencyFilter.parseKey(""))
        .httpStatus());
    assertEquals(0, new IdempotencyException.StaleAttempt("m", null).httpStatus());
    assertEquals(0, new IdempotencyException("22023", "m").httpStatus());
  }

  @Test
  void outcomesAreTheServersWords() {
    for (Outcome o : Outcome.values()) assertEquals(o, Outcome.of(o.wire()));
    assertEquals(Outcome.IN_PROGRESS, Outcome.of("in_progress"));
    assertThrows(IllegalArgumentException.class, () -> Outcome.of("pending"));
  }
}
