package io.github.pgidempotency.idempotency;

/** What reserve says of a key (the server's word for each: {@link #wire()}). */
public enum Outcome {
  /** The key is the caller's: do the work. */
  NEW("new"),
  /** The key was completed: its stored answer is the result. */
  REPLAY("replay"),
  /** Another holder's claim is live (409). */
  IN_PROGRESS("in_progress"),
  /** The key was used with another request (422). */
  MISMATCH("mismatch"),
  /** The key embeds a creation time older than the retention window (422). */
  TOO_OLD("too_old");

  private final String wire;

  Outcome(String wire) {
    this.wire = wire;
  }

  /** The server's word for the outcome. */
  public String wire() {
    return wire;
  }

  /** The outcome of the server's word. */
  public static Outcome of(String wire) {
    for (Outcome o : values()) {
      if (o.wire.equals(wire)) return o;
    }
    throw new IllegalArgumentException("not an outcome of reserve: " + wire);
  }
}
