package io.github.pgidempotency.idempotency;

import java.time.OffsetDateTime;

/** What the server knows of a key ({@code idempotency.lookup}). */
public record KeyRecord(
    String state,
    int statusCode,
    String response,
    byte[] requestHash,
    int attempt,
    String recoveryPoint,
    String lastError,
    OffsetDateTime firstSeenAt,
    OffsetDateTime completedAt,
    OffsetDateTime lockedUntil,
    OffsetDateTime expiresAt) {}
