// Partition upkeep of idempotency.keys: maintain() and the pg_partman hand-off.
// Everything here is C-style (no C++ objects with destructors live across PostgreSQL calls)
// and runs with SPI connected, as the owner of idempotency.keys.
#pragma once

#include "pg/storage/key_store.hpp"
#include "pg/postgres_headers.hpp"

#include "core/partition_plan.hpp"

namespace idem::pg {

// One attached partition of idempotency.keys (the default partition excluded).
struct PartitionInfo {
    Oid oid;  // InvalidOid for a partition still to be created
    char name[NAMEDATALEN];
    int64 lo, hi;      // bounds; PG_INT64_MIN / PG_INT64_MAX for MINVALUE / MAXVALUE
    double reltuples;  // pg_class estimate, < 0 when unknown
};

// The partition's bounds as the core's planner takes them.
inline core::TimeRange time_range(const PartitionInfo &p) {
    return {p.lo == PG_INT64_MIN ? -core::kUnbounded : p.lo, p.hi};
}

struct PartitionList {
    PartitionInfo *items;
    int count;
};

Oid key_table_oid();
// The primary key every partition of idempotency.keys carries (the parent has none from 0.2.0
// on, so that pg_dump's output restores), as a table constraint clause.
constexpr const char *kPartitionPrimaryKey = "PRIMARY KEY (key, scope, expires_at)";
// The default partition of idempotency.keys, or InvalidOid.
Oid default_partition_oid();
PartitionList read_partitions();
// Schema-qualified, quoted name of a relation; nullptr when there is none (any more).
char *relation_name(Oid oid);
// Schema of pg_partman when it is installed, else nullptr.
char *partman_schema();
// True when pg_partman's part_config lists idempotency.keys.
bool partman_manages_keys(const char *schema);

// ACCESS EXCLUSIVE on idempotency.keys to the end of the transaction, without keeping key calls
// queued behind the request for more than a few milliseconds at a time (maintenance.cpp);
// raises the lock timeout error (55P03) after idempotency.maintenance_lock_timeout.
void lock_keys_exclusively() noexcept;
// Runs a statement; errors (elog) unless SPI returns `expected`.
void spi_run(const char *sql, int expected) noexcept;

// Maintenance runs as the owner of idempotency.keys in a security-restricted operation, with
// settings pinned whatever the caller set: search_path = pg_catalog, pg_temp (code reached
// from here, pg_partman's PL/pgSQL or an event trigger, cannot be redirected to functions
// planted in the caller's path), lock_timeout = idempotency.maintenance_lock_timeout,
// TimeZone = UTC, DateStyle = ISO, default_tablespace = '', default_table_access_method =
// heap. leave_maintenance() rolls back every setting changed meanwhile (also pg_partman's
// session-level set_config calls) and switches back to the caller; an error does the same
// through the transaction's abort.
struct MaintenanceScope {
    SavedUser user;
    int guc_level;
};
// Refuses (25001) a transaction that does not use READ COMMITTED; caller names the function.
MaintenanceScope enter_maintenance(const char *caller);
void leave_maintenance(MaintenanceScope scope);

// Literal of a time for SQL text: 'YYYY-MM-DD HH:MI:SS.ffffff+00' (needs TimeZone = UTC).
char *time_literal(int64 t);
// The same time as text, unquoted.
char *time_text(int64 t);

// One result row of maintain(); partition may be nullptr, lo/hi/rows < 0 or NULL-ish.
struct ActionSink {
    Tuplestorestate *store;
    TupleDesc desc;
    StringInfo steps;  // the rows as a JSON array's elements, for maintenance_runs
    int incomplete;    // skipped and failed rows
};
void emit_action(ActionSink *out, const char *action, const char *partition, int64 lo, int64 hi,
                 bool has_range, int64 rows, const char *detail);

// How run_reported_step reports a step that did not run to the end.
struct StepReport {
    const char *partition;  // may be nullptr
    int64 lo, hi;
    bool has_range;
    int64 rows;                 // < 0: NULL
    const char *skipped;        // detail of the 'skipped' row
    const char *failed_prefix;  // nullptr, or put before the error in the 'failed' row
};
// Runs step(arg) in a subtransaction; true when it ran to the end (the caller then reports
// what it did). A lock_timeout (55P03) rolls it back and reports it 'skipped'; any other
// error rolls it back too and reports it 'failed' with its message, except cancels,
// shutdowns, resource exhaustion and internal errors, which are re-raised.
bool run_reported_step(void (*step)(void *) noexcept, void *arg, ActionSink *out,
                       const StepReport &report);

// Deletes expired rows from the default partition, without the exclusive lock (no call sees
// them); reports 'purged' (or 'skipped' / 'failed').
void purge_default(ActionSink *out, int64 now);
// Gives every width-slot of rows left in the default partition a partition of its own,
// moving the rows under the exclusive lock, named the way `naming` says. With out == nullptr
// errors propagate.
void partition_default_rows(ActionSink *out, int64 now, int64 width, core::PartitionNaming naming);

// Raises 55000 (with a hint) when a publication would lose keys on its subscribers: one that
// publishes partitions of idempotency.keys on their own (not through the root), or the
// extension's tables without every operation or column (publications.cpp).
void check_publications();

// Partition upkeep when pg_partman manages the table (maintenance_partman.cpp): runs
// partman.run_maintenance for idempotency.keys and reports what changed into `out`.
void partman_maintain(const char *schema, ActionSink *out);

// --- maintenance_runs (maintenance_runs.cpp) ---
// Shared memory for failed runs not yet written; called from _PG_init.
void register_maintenance_runs_shmem();
// 'worker' (our background worker), 'pg_cron' (its worker or its libpq connection), or 'sql'.
const char *maintenance_caller();
// Appends one step to a JSON array's text (without the brackets); NULLs for absent values.
void append_step_json(StringInfo steps, const char *action, const char *partition,
                      const char *range_start, const char *range_end, int64 rows,
                      const char *detail);
// Writes a run that returned into idempotency.maintenance_log (SPI connected, as the table
// owner) and keeps the last 100; nothing on a database without the table (0.1.0).
void record_run(TimestampTz started, const char *caller, const char *result, const char *steps,
                const char *error) noexcept;
// Keeps a run that ended with an error for later: callable in PG_CATCH (no elog, no catalog
// access, no allocation: the texts are copied into shared memory).
void stash_failed_run(TimestampTz started, const char *caller, const char *role,
                      const char *error) noexcept;
// Writes the kept failed runs of this database (SPI connected, as the table owner); they go
// back to the stash if this transaction aborts. Returns how many.
int record_stashed_runs() noexcept;

}  // namespace idem::pg
