package io.github.pgidempotency.idempotency;

import java.time.OffsetDateTime;

/**
 * The row of {@code idempotency.reserve}: the outcome (new, replay, in_progress, mismatch,
 * too_old), the stored answer of a replay (status 0 and response null if none), the attempt
 * (fencing token), the last checkpoint of an attempt that was taken over, and the key's times.
 */
public record Reservation(
    Outcome outcome,
    int statusCode,
    String response,
    int attempt,
    String recoveryPoint,
    OffsetDateTime firstSeenAt,
    OffsetDateTime lockedUntil,
    OffsetDateTime expiresAt) {
  /** The error for an outcome other than new and replay (null for those two). */
  public IdempotencyException error(String scope, String key) {
    String which = "key " + Json.quote(key) + " of scope " + Json.quote(scope);
    return switch (outcome) {
      case IN_PROGRESS -> new IdempotencyException.KeyInProgress(
          which + " is held by another request", lockedUntil, null);
      case MISMATCH -> new IdempotencyException.KeyMismatch(
          which + " was used with a different request");
      case TOO_OLD -> new IdempotencyException.KeyTooOld(
          which + " is older than the retention window", null);
      default -> null;
    };
  }
}
