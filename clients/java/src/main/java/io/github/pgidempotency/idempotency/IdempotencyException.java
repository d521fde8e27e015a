package io.github.pgidempotency.idempotency;

import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;

/**
 * An error of the server with its SQLSTATE (the error table of docs/reference.md), or one the
 * client raises with the same meaning. The subclasses are the errors a caller handles on their
 * own: a key held by another request, a key reused with another body, a key too old, a stale
 * attempt, a result conflict, a lost connection. {@link #sqlState()} is always set; the
 * SQLSTATEs are the constants of {@link SqlStates} (generated from test/vectors/client.json).
 */
public class IdempotencyException extends RuntimeException implements SqlStates {
  private static final long serialVersionUID = 1L;

  /** The client's code for reserve's outcome mismatch (the server answers it as a row). */
  public static final String KEY_MISMATCH = "mismatch";

  private final String sqlState;
  private final int httpStatus;

  public IdempotencyException(String sqlState, String message) {
    this(sqlState, message, null);
  }

  public IdempotencyException(String sqlState, String message, Throwable cause) {
    this(sqlState, message, cause, 0);
  }

  /** An error that the filter answers with httpStatus of its own (0: none). */
  IdempotencyException(String sqlState, String message, Throwable cause, int httpStatus) {
    super(message, cause);
    this.sqlState = sqlState;
    this.httpStatus = httpStatus;
  }

  /** The SQLSTATE (or, for the reserve outcome mismatch, the word "mismatch"). */
  public String sqlState() {
    return sqlState;
  }

  /** The HTTP answer the filter gives for this error, 0 for none of its own. */
  public int httpStatus() {
    return httpStatus;
  }

  /** Not JSON, NaN or Infinity, invalid UTF-8, an unpaired surrogate (22P02), \u0000 (22P05). */
  public static class InvalidJson extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public InvalidJson(String sqlState, String message) {
      super(sqlState, message);
    }

    InvalidJson(String sqlState, String message, Throwable cause) {
      super(sqlState, message, cause);
    }
  }

  /** Nesting over 1000 levels, a number over 1000 digits (54000). */
  public static class ProgramLimitExceeded extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public ProgramLimitExceeded(String message) {
      super(PROGRAM_LIMIT_EXCEEDED, message);
    }

    ProgramLimitExceeded(String message, Throwable cause) {
      super(PROGRAM_LIMIT_EXCEEDED, message, cause);
    }
  }

  /** IK001: another holder took the key over; this attempt's writes must not commit. */
  public static class StaleAttempt extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public StaleAttempt(String message, Throwable cause) {
      super(STALE_ATTEMPT, message, cause);
    }
  }

  /** IK002: the key was completed with another result. */
  public static class ResultConflict extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public ResultConflict(String message, Throwable cause) {
      super(RESULT_CONFLICT, message, cause);
    }
  }

  /**
   * Another request holds the key (reserve's outcome in_progress, or claim_once's IK003): HTTP
   * 409 with Retry-After.
   */
  public static class KeyInProgress extends IdempotencyException {
    private static final long serialVersionUID = 1L;
    private final OffsetDateTime lockedUntil;

    public KeyInProgress(String message, OffsetDateTime lockedUntil, Throwable cause) {
      super(KEY_IN_PROGRESS, message, cause, 409);
      this.lockedUntil = lockedUntil;
    }

    /** The holder's lease end, or null (the holder is inside its transaction). */
    public OffsetDateTime lockedUntil() {
      return lockedUntil;
    }

    /** Seconds until the holder's lease ends, at least 1. */
    public long retryAfterSeconds(OffsetDateTime now) {
      if (lockedUntil == null) return 1;
      long ms = Duration.between(now, lockedUntil).toMillis();
      return Math.max(1, (ms + 999) / 1000);
    }
  }

  /** The key was used with another request body (reserve's outcome mismatch): HTTP 422. */
  public static class KeyMismatch extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public KeyMismatch(String message) {
      super(KEY_MISMATCH, message, null, 422);
    }
  }

  /** The key is older than the retention window (outcome too_old, or IK004): HTTP 422. */
  public static class KeyTooOld extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public KeyTooOld(String message, Throwable cause) {
      super(KEY_TOO_OLD, message, cause, 422);
    }
  }

  /**
   * The connection broke (the server restarted, the backend was terminated, the network cut
   * it, or none could be made). The transaction in flight was rolled back by the server, unless
   * the break came during COMMIT: then a retry with the same key tells (it replays). HTTP 503.
   */
  public static class ConnectionLost extends IdempotencyException {
    private static final long serialVersionUID = 1L;

    public ConnectionLost(String message, Throwable cause) {
      super(CONNECTION_LOST, message, cause, 503);
    }
  }

  /** Whether a JDBC error means the connection is gone: class 08, or 57P01-57P03. */
  public static boolean isConnectionLost(SQLException e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof SQLException s && s.getSQLState() != null) {
        String c = s.getSQLState();
        if (c.startsWith("08") || c.equals("57P01") || c.equals("57P02") || c.equals("57P03")) {
          return true;
        }
      }
      if (t instanceof java.io.IOException) return true;
    }
    return false;
  }

  /**
   * A JDBC error as the typed error of its SQLSTATE: the same class as the client's own check
   * of the same fault (54000 ProgramLimitExceeded, 22P02 and 22P05 InvalidJson).
   */
  public static IdempotencyException from(SQLException e) {
    if (isConnectionLost(e)) {
      return new ConnectionLost("the connection to the server was lost: " + e.getMessage(), e);
    }
    String c = e.getSQLState() == null ? "" : e.getSQLState();
    String m = e.getMessage();
    return switch (Spec.SQLSTATE_ALIASES.getOrDefault(c, c)) {
      case STALE_ATTEMPT -> new StaleAttempt(m, e);
      case RESULT_CONFLICT -> new ResultConflict(m, e);
      case KEY_IN_PROGRESS -> new KeyInProgress(m, null, e);
      case KEY_TOO_OLD -> new KeyTooOld(m, e);
      // the server's refusals of a body: the classes the client's own checks throw
      case PROGRAM_LIMIT_EXCEEDED -> new ProgramLimitExceeded(m, e);
      case INVALID_JSON -> new InvalidJson(c, m, e); // 22P05 and 22021 too (aliases)
      default -> new IdempotencyException(c, m, e);
    };
  }
}
