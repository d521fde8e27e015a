// Monotonic keys for producers: create_stream, drop_stream, next_key.
#pragma once

namespace idem::pg {

// Called once from _PG_init: idempotency.max_streams and, when preloaded, the shared memory.
void register_streams();

}  // namespace idem::pg
