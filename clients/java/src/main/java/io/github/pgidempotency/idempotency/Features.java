package io.github.pgidempotency.idempotency;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What one server refused so far, so that later calls stop asking: reserve_begin (a role
 * without EXECUTE on it, Citus), after which claims are BEGIN + reserve. What the server has is
 * asked once, with its edition ({@link Versions}): the managed edition and a server before 0.3.0
 * have no reserve_begin, so it is not even tried there. One per client and per filter.
 */
final class Features {
  final AtomicBoolean noReserveBegin = new AtomicBoolean();
}
