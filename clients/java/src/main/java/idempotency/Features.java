package idempotency;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What one server refused so far, so that later calls stop asking: reserve_begin (a server
 * before 0.3.0, a role without EXECUTE on it, Citus), after which claims are BEGIN + reserve.
 * One per client and per filter.
 */
final class Features {
  final AtomicBoolean noReserveBegin = new AtomicBoolean();
}
