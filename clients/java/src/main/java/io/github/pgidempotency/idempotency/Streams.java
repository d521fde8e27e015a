package io.github.pgidempotency.idempotency;

import java.math.BigInteger;
import java.sql.Connection;
import java.util.UUID;

/**
 * Streams: accept and watermark (a consumer's position per partition, by offset or by a
 * 128-bit key written as a UUID) and next_key. {@link Idempotency} is their public face.
 */
final class Streams {
  private Streams() {}

  static boolean accept(Connection c, String consumer, String partition, long position) {
    return (Boolean) Connections.one(c, Statements.ACCEPT_BIGINT, consumer, partition, position);
  }

  static boolean accept(Connection c, String consumer, String partition, UUID position) {
    return (Boolean)
        Connections.one(c, Statements.ACCEPT_UUID, consumer, partition, position.toString());
  }

  static BigInteger watermark(Connection c, String consumer, String partition) {
    Object v = Connections.one(c, Statements.WATERMARK, consumer, partition);
    return v == null ? null : new BigInteger((String) v);
  }

  /** next_key's bigint, read from its text. */
  static long nextKey(Connection c, String stream) {
    return Long.parseLong((String) Connections.one(c, Statements.NEXT_KEY, stream));
  }
}
