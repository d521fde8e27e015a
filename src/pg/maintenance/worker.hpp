// Background maintenance: with the library preloaded, a launcher worker starts, every
// idempotency.maintenance_interval, one short-lived worker per database listed in
// idempotency.database (one after the other); each runs idempotency.maintain() in one
// transaction, logs what it did and exits. A failing run is logged and the next one tried.
#pragma once

namespace idem::pg {

// Registers the launcher; called from _PG_init (does nothing unless preloaded).
void register_maintenance_worker();

}  // namespace idem::pg
