package io.github.pgidempotency.idempotency;

/**
 * The round trips of the helper call being observed on this thread (a listener is set): each
 * statement, savepoint command, COMMIT or ROLLBACK the client sends counts one, the work's own
 * statements none (they do not pass through here). A call that is not observed counts nothing.
 */
final class RoundTrips {
  private static final ThreadLocal<int[]> CURRENT = new ThreadLocal<>();

  private RoundTrips() {}

  /** Counts one round trip of the call observed on this thread, if any. */
  static void note() {
    int[] count = CURRENT.get();
    if (count != null) count[0]++;
  }

  /** Starts counting an observed call; returns the count of the call around it, to restore. */
  static int[] start() {
    int[] outer = CURRENT.get();
    CURRENT.set(new int[1]);
    return outer;
  }

  /** The round trips counted since start(); the call around it (outer) counts on. */
  static int end(int[] outer) {
    int[] count = CURRENT.get();
    if (outer == null) CURRENT.remove();
    else CURRENT.set(outer);
    return count == null ? 0 : count[0];
  }
}
