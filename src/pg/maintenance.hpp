// Partition upkeep of idempotency.keys: maintain() and the pg_partman hand-off.
// Everything here is C-style (no C++ objects with destructors live across PostgreSQL calls)
// and runs with SPI connected, as the owner of idempotency.keys.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// One attached partition of idempotency.keys (the default partition excluded).
struct PartitionInfo {
    char name[NAMEDATALEN];
    int64 lo, hi;      // bounds; PG_INT64_MIN / PG_INT64_MAX for MINVALUE / MAXVALUE
    double reltuples;  // pg_class estimate, < 0 when unknown
};

struct PartitionList {
    PartitionInfo *items;
    int count;
};

Oid key_table_oid();
// The default partition of idempotency.keys, or InvalidOid.
Oid default_partition_oid();
PartitionList read_partitions();
// Schema of pg_partman when it is installed, else nullptr.
char *partman_schema();
// True when pg_partman's part_config lists idempotency.keys.
bool partman_manages_keys(const char *schema);

// Runs a statement; errors (elog) unless SPI returns `expected`.
void spi_run(const char *sql, int expected);

// Sets lock_timeout, TimeZone = UTC and DateStyle = ISO until restore_settings(level).
int use_maintenance_settings();
void restore_settings(int level);

// Literal of a time for SQL text: 'YYYY-MM-DD HH:MI:SS.ffffff+00' (needs TimeZone = UTC).
char *time_literal(int64 t);

// Runs step(arg) in a subtransaction. A lock_timeout (55P03) rolls it back and returns
// false; any other error is re-raised.
bool run_step(void (*step)(void *), void *arg);

// Partition upkeep when pg_partman manages the table (maintenance_partman.cpp): runs
// partman.run_maintenance for idempotency.keys and reports what changed into `out`.
struct ActionSink;
void partman_maintain(const char *schema, ActionSink *out);

// One result row of maintain(); partition may be nullptr, lo/hi/rows < 0 or NULL-ish.
struct ActionSink {
    Tuplestorestate *store;
    TupleDesc desc;
};
void emit_action(ActionSink *out, const char *action, const char *partition, int64 lo, int64 hi,
                 bool has_range, int64 rows, const char *detail);

}  // namespace idem::pg
