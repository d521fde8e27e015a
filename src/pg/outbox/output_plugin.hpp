// The outbox's logical messages, as written by idempotency.emit and read by the output plugin
// `idempotency` (output_plugin.cpp).
//
// A message is transactional, has the prefix kOutboxPrefix, and its content is the JSON text
// of core/outbox_content.hpp, so other plugins (wal2json, pgoutput with messages) show it as
// readable JSON too. The plugin copies that text into its output without re-serialising it,
// after checking it (messages with our prefix can also be written by pg_logical_emit_message).
#pragma once

namespace idem::pg {

constexpr char kOutboxPrefix[] = "idempotency";

}  // namespace idem::pg
