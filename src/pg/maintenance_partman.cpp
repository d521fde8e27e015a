// Hand-off of idempotency.keys to pg_partman 4.7: idempotency.use_partman() registers the
// table with partman (same partition width, names and premake; retention that drops a
// partition once its upper bound has passed, dropping the table rather than detaching it),
// after which maintain() runs partman's maintenance for the table instead of its own.

#include "pg/maintenance.hpp"

#include "pg/guard.hpp"
#include "pg/key_store.hpp"
#include "pg/settings.hpp"

#include "core/partition_plan.hpp"

extern "C" {
#include "commands/extension.h"
}

namespace idem::pg {

namespace {

bool listed(const PartitionList &list, const char *name) {
    for (int i = 0; i < list.count; i++)
        if (strcmp(list.items[i].name, name) == 0) return true;
    return false;
}

struct PartmanStep {
    const char *sql;
};

void partman_step(void *arg) {
    spi_run(static_cast<PartmanStep *>(arg)->sql, SPI_OK_SELECT);
}

struct EmptyDefault {
    const char *partman;
    int64 purged, moved;
};

// pg_partman's interval text for the width: whole days, hours, minutes or seconds.
int partman_premake(int64 width) {
    int64 cover = (max_retention_usecs() + width - 1) / width + 1;
    return int(Max(int64(Max(premake_partitions(), 1)), Min(cover, int64(1000))));
}

char *width_interval_text(int64 width) {
    int64 secs = width / USECS_PER_SEC;
    if (secs % 86400 == 0) return psprintf("%lld days", (long long)(secs / 86400));
    if (secs % 3600 == 0) return psprintf("%lld hours", (long long)(secs / 3600));
    if (secs % 60 == 0) return psprintf("%lld minutes", (long long)(secs / 60));
    return psprintf("%lld seconds", (long long)secs);
}

}  // namespace

char *partman_schema() {
    if (!OidIsValid(get_extension_oid("pg_partman", true))) return nullptr;
    int rc = SPI_execute(
        "SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e"
        " JOIN pg_catalog.pg_namespace n"
        " ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
        " WHERE e.extname OPERATOR(pg_catalog.=) 'pg_partman'",
        true, 1);
    if (rc != SPI_OK_SELECT || SPI_processed != 1) return nullptr;
    return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

bool partman_manages_keys(const char *schema) {
    char *sql = psprintf(
        "SELECT 1 FROM %s.part_config WHERE parent_table "
        "OPERATOR(pg_catalog.=) 'idempotency.keys'",
        quote_identifier(schema));
    int rc = SPI_execute(sql, true, 1);
    if (rc != SPI_OK_SELECT) elog(ERROR, "idempotency: reading part_config failed");
    return SPI_processed > 0;
}

// Rows in pg_partman's default partition block it from creating the partitions they belong
// to: expired ones are deleted, live ones moved into partitions of their own.
void empty_default_step(void *arg) {
    auto *s = static_cast<EmptyDefault *>(arg);
    Oid def = default_partition_oid();
    if (!OidIsValid(def)) return;
    char *name =
        quote_qualified_identifier(get_namespace_name(get_rel_namespace(def)), get_rel_name(def));
    spi_run(psprintf("DELETE FROM ONLY %s WHERE expires_at OPERATOR(pg_catalog.<=) "
                     "pg_catalog.clock_timestamp()",
                     name),
            SPI_OK_DELETE);
    s->purged = SPI_processed;
    spi_run(psprintf("SELECT 1 FROM ONLY %s LIMIT 1", name), SPI_OK_SELECT);
    if (SPI_processed == 0) return;
    spi_run(psprintf("SELECT %s.partition_data_time('idempotency.keys', p_batch_count => 1000, "
                     "p_analyze => false)",
                     s->partman),
            SPI_OK_SELECT);
    bool isnull;
    Datum moved = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    s->moved = isnull ? 0 : DatumGetInt64(moved);
}

void partman_maintain(const char *schema, ActionSink *out) {
    EmptyDefault empty{quote_identifier(schema), 0, 0};
    if (!run_step(empty_default_step, &empty)) {
        emit_action(out, "skipped", nullptr, 0, 0, false, -1,
                    "could not lock the default partition within "
                    "idempotency.maintenance_lock_timeout; retried on the next run");
        return;
    }
    if (empty.purged > 0)
        emit_action(out, "purged", "keys_default", 0, 0, false, empty.purged,
                    "deleted expired rows from the default partition");
    if (empty.moved > 0)
        emit_action(out, "moved", "keys_default", 0, 0, false, empty.moved,
                    "pg_partman moved live rows out of the default partition");
    PartitionList before = read_partitions();
    PartmanStep step{
        psprintf("SELECT %s.run_maintenance(p_parent_table => 'idempotency.keys', "
                 "p_analyze => false, p_jobmon => false)",
                 quote_identifier(schema))};
    if (!run_step(partman_step, &step)) {
        emit_action(out, "skipped", nullptr, 0, 0, false, -1,
                    "pg_partman could not lock idempotency.keys within "
                    "idempotency.maintenance_lock_timeout; retried on the next run");
        return;
    }
    PartitionList after = read_partitions();
    for (int i = 0; i < after.count; i++)
        if (!listed(before, after.items[i].name))
            emit_action(out, "created", after.items[i].name, after.items[i].lo, after.items[i].hi,
                        true, 0, "by pg_partman");
    for (int i = 0; i < before.count; i++)
        if (!listed(after, before.items[i].name))
            emit_action(out, "dropped", before.items[i].name, before.items[i].lo,
                        before.items[i].hi, true,
                        before.items[i].reltuples >= 0 ? int64(before.items[i].reltuples) : -1,
                        "by pg_partman");
    emit_action(
        out, "deferred", nullptr, 0, 0, false, -1,
        psprintf("pg_partman (schema %s) manages the partitions of idempotency.keys", schema));
}

}  // namespace idem::pg

// idempotency.use_partman(): true when the table was handed over now, false when pg_partman
// already managed it (its settings are refreshed).
IDEM_FUNCTION(idem_use_partman) {
    using namespace idem::pg;
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "idempotency: SPI_connect failed");
    SavedUser user = become_key_owner();
    int level = use_maintenance_settings();
    char *schema = partman_schema();
    if (schema == nullptr)
        throw SqlError(ERRCODE_UNDEFINED_OBJECT, "pg_partman is not installed in this database",
                       nullptr,
                       "Install it first: CREATE SCHEMA partman; CREATE EXTENSION pg_partman "
                       "SCHEMA partman;");
    const char *partman = quote_identifier(schema);
    int64 width = partition_width_usecs();
    bool newly = !partman_manages_keys(schema);
    if (newly) {
        // create_parent makes a default partition named keys_default: ours moves aside
        // first, and its live rows move into the partition set afterwards.
        spi_run("LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE", SPI_OK_UTILITY);
        Oid old_default = default_partition_oid();
        char *old_name = nullptr;
        if (OidIsValid(old_default)) {
            char *name = quote_qualified_identifier(
                get_namespace_name(get_rel_namespace(old_default)), get_rel_name(old_default));
            spi_run(psprintf("ALTER TABLE idempotency.keys DETACH PARTITION %s", name),
                    SPI_OK_UTILITY);
            spi_run(psprintf("ALTER TABLE %s RENAME TO keys_default_before_partman", name),
                    SPI_OK_UTILITY);
            old_name = quote_qualified_identifier(
                get_namespace_name(get_rel_namespace(old_default)), "keys_default_before_partman");
        }
        int64 start = idem::core::bucket_start(GetCurrentTimestamp(), width);
        spi_run(psprintf("SELECT %s.create_parent(p_parent_table => 'idempotency.keys', "
                         "p_control => 'expires_at', p_type => 'native', p_interval => %s, "
                         "p_premake => %d, p_start_partition => %s, p_jobmon => false)",
                         partman, quote_literal_cstr(width_interval_text(width)),
                         partman_premake(width), time_literal(start)),
                SPI_OK_SELECT);
        // create_parent skips its default partition when every partition already existed.
        if (!OidIsValid(default_partition_oid()))
            spi_run("CREATE TABLE idempotency.keys_default PARTITION OF idempotency.keys DEFAULT",
                    SPI_OK_UTILITY);
        if (old_name != nullptr) {
            spi_run(psprintf("INSERT INTO idempotency.keys SELECT * FROM %s WHERE expires_at "
                             "OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",
                             old_name),
                    SPI_OK_INSERT);
            EmptyDefault empty{partman, 0, 0};
            empty_default_step(&empty);
            // It was created by CREATE EXTENSION: release it from the extension to drop it.
            spi_run(psprintf("ALTER EXTENSION idempotency DROP TABLE %s", old_name),
                    SPI_OK_UTILITY);
            spi_run(psprintf("DROP TABLE %s", old_name), SPI_OK_UTILITY);
        }
    }
    // Drop (not detach: 4.7 keeps the table by default) a partition once its upper bound has
    // passed: partman drops when start + interval < now - retention. Premake covers
    // max_retention, so keys of any allowed retention find a partition ready.
    spi_run(psprintf("UPDATE %s.part_config SET retention = '0 seconds', retention_keep_table = "
                     "false, retention_keep_index = false, infinite_time_partitions = true, "
                     "premake = %d WHERE parent_table OPERATOR(pg_catalog.=) 'idempotency.keys'",
                     partman, partman_premake(width)),
            SPI_OK_UPDATE);
    restore_settings(level);
    restore_user(user);
    SPI_finish();
    PG_RETURN_BOOL(newly);
}
