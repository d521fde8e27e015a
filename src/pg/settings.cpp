#include "pg/settings.hpp"

#include "pg/sql_errors.hpp"
#include "pg/stats.hpp"
#include "pg/maintenance/maintenance.hpp"
#include "pg/maintenance/worker.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace idem::pg {

namespace {

int width_secs = 86400;
int premake = 3;
int max_retention_secs = 30 * 86400;
int lock_timeout_ms = 100;
int interval_secs = 60;
char *databases = nullptr;

}  // namespace

void define_storage_settings() {
    // SUSET, not SIGHUP: a superuser may try other widths in a session (tests do); the
    // worker uses the server's value.
    DefineCustomIntVariable(
        "idempotency.partition_width", "Time span of one partition of idempotency.keys.",
        "Partitions are aligned to multiples of it from 2000-01-01 00:00 UTC.", &width_secs, 86400,
        1, 366 * 86400, PGC_SUSET, GUC_UNIT_S, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("idempotency.premake",
                            "Future partitions maintain() keeps ready beyond the current one.",
                            nullptr, &premake, 3, 0, 1000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("idempotency.max_retention", "Longest retention a reserve may ask for.",
                            "A reserve asking for more is refused.", &max_retention_secs,
                            30 * 86400, 1, INT_MAX, PGC_SUSET, GUC_UNIT_S, nullptr, nullptr,
                            nullptr);
    DefineCustomIntVariable("idempotency.maintenance_lock_timeout",
                            "How long a step of maintain()'s partition DDL tries for its lock; "
                            "then it is retried later.",
                            nullptr, &lock_timeout_ms, 100, 1, 60000, PGC_SUSET, GUC_UNIT_MS,
                            nullptr, nullptr, nullptr);
    DefineCustomIntVariable("idempotency.maintenance_interval",
                            "Time between two maintenance passes of the background worker.",
                            nullptr, &interval_secs, 60, 1, 86400, PGC_SIGHUP, GUC_UNIT_S, nullptr,
                            nullptr, nullptr);
    DefineCustomStringVariable("idempotency.database",
                               "Databases the background worker runs maintain() in.",
                               "Comma-separated list; empty: the worker idles.", &databases, "",
                               PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
}

void register_storage_maintenance() {
    define_storage_settings();
    register_stats_shmem();
    register_maintenance_runs_shmem();
    register_maintenance_worker();
}

int64 partition_width_usecs() {
    return int64(width_secs) * USECS_PER_SEC;
}
int premake_partitions() {
    return premake;
}
int64 max_retention_usecs() {
    return int64(max_retention_secs) * USECS_PER_SEC;
}
int maintenance_lock_timeout_ms() {
    return lock_timeout_ms;
}
int maintenance_interval_secs() {
    return interval_secs;
}
const char *maintenance_databases() {
    return databases ? databases : "";
}

void check_retention(int64 retention_usecs) {
    if (retention_usecs <= max_retention_usecs()) return;
    throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "retention exceeds idempotency.max_retention",
                   psprintf("The reserve asked for %lld seconds; the longest allowed is %d "
                            "seconds.",
                            (long long)((retention_usecs + USECS_PER_SEC - 1) / USECS_PER_SEC),
                            max_retention_secs),
                   "Ask for a shorter retention, or have a superuser raise "
                   "idempotency.max_retention.");
}

}  // namespace idem::pg
