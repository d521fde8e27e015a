// GUCs of the storage and maintenance feature (idempotency.*).
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// The storage feature's one call from _PG_init: its GUCs, and when preloaded the shared
// counters of idempotency.stats and the maintenance worker.
void register_storage_maintenance();

void define_storage_settings();

// Width of a key partition (idempotency.partition_width), in microseconds.
int64 partition_width_usecs();
// Future partitions kept ready beyond the current one (idempotency.premake).
int premake_partitions();
// The longest retention a reserve may ask for (idempotency.max_retention), in microseconds.
int64 max_retention_usecs();
// lock_timeout of maintain()'s DDL (idempotency.maintenance_lock_timeout), in milliseconds.
int maintenance_lock_timeout_ms();
// Seconds between two maintenance passes of the background worker.
int maintenance_interval_secs();
// Comma-separated databases the worker maintains (idempotency.database); may be empty.
const char *maintenance_databases();

// Refuses a reserve whose retention exceeds idempotency.max_retention (22023).
void check_retention(int64 retention_usecs);

}  // namespace idem::pg
