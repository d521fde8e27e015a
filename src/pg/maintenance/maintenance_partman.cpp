// Hand-off of idempotency.keys to pg_partman 4.7 or 5.x: idempotency.use_partman() registers
// the table with partman (same partition width and premake, partitions named as that partman
// names them; retention that drops a partition once its upper bound has passed, dropping the
// table rather than detaching it), after which maintain() runs partman's maintenance for the
// table instead of its own. 5.x changed create_parent (no 'native' type) and the partition
// names; which one is installed decides.
// Everything runs inside enter_maintenance(): pg_partman's PL/pgSQL calls built-ins
// unqualified, so the caller's search_path must not reach it.

#include "pg/maintenance/maintenance.hpp"
#include "pg/spi.hpp"

#include "pg/guard.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/settings.hpp"

#include "core/partition_plan.hpp"

#include <cstdio>
#include <cstring>

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

// pg_partman's partition name for the slot starting at lo; pure C++.
void partman_partition_name(int64 lo, int64 width, core::PartitionNaming naming,
                            char (&name)[NAMEDATALEN]) {
    std::snprintf(name, NAMEDATALEN, "keys_p%s", core::partition_suffix(lo, width, naming).c_str());
}

// The first partition that is not one width-slot [k*width, (k+1)*width) named as pg_partman
// names it, or -1.
int first_misfit(const PartitionList &list, int64 width, core::PartitionNaming naming) {
    for (int i = 0; i < list.count; i++) {
        const PartitionInfo &p = list.items[i];
        core::TimeRange r = time_range(p);
        if (!core::is_bucket(r, width)) return i;
        char name[NAMEDATALEN];
        partman_partition_name(r.lo, width, naming, name);
        if (strcmp(name, p.name) != 0) return i;
    }
    return -1;
}

void check_partitions_fit(const PartitionList &list, int64 width, core::PartitionNaming naming,
                          const char *when, const char *hint) {
    int bad = first_misfit(list, width, naming);
    if (bad < 0) return;
    const PartitionInfo &p = list.items[bad];
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("cannot hand idempotency.keys to pg_partman: partition %s does not match "
                    "idempotency.partition_width",
                    p.name),
             errdetail("%s, every partition must span exactly one width-slot from 2000-01-01 "
                       "00:00 UTC and carry pg_partman's name for it.",
                       when),
             errhint("%s", hint)));
}

// Renames every width-slot partition to pg_partman's name for its slot (others are left for
// check_partitions_fit to refuse).
void rename_partitions(int64 width, core::PartitionNaming naming) {
    PartitionList list = read_partitions();
    for (int i = 0; i < list.count; i++) {
        const PartitionInfo &p = list.items[i];
        char name[NAMEDATALEN];
        if (!core::is_bucket(time_range(p), width)) continue;
        partman_partition_name(p.lo, width, naming, name);
        if (strcmp(name, p.name) == 0) continue;
        spi_run(
            psprintf("ALTER TABLE %s RENAME TO %s", relation_name(p.oid), quote_identifier(name)),
            SPI_OK_UTILITY);
    }
}

// pg_partman's interval text for the width, in hours, minutes or seconds: never days, whose
// length follows the session's TimeZone (DST).
char *width_interval_text(int64 width) {
    int64 secs = width / USECS_PER_SEC;
    if (secs % 3600 == 0) return psprintf("%lld hours", (long long)(secs / 3600));
    if (secs % 60 == 0) return psprintf("%lld minutes", (long long)(secs / 60));
    return psprintf("%lld seconds", (long long)secs);
}

int partman_premake(int64 width) {
    int64 cover = (max_retention_usecs() + width - 1) / width + 1;
    return int(Max(int64(Max(premake_partitions(), 1)), Min(cover, int64(1000))));
}

struct PartmanConfig {
    int64 width;  // partition_interval in microseconds; <= 0 when it has months or years
    int premake;
};

PartmanConfig read_partman_config(const char *partman) {
    spi_run(
        psprintf("SELECT (pg_catalog.date_part('epoch', partition_interval::pg_catalog.interval)"
                 " OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,"
                 " pg_catalog.date_part('year', partition_interval::pg_catalog.interval)"
                 " OPERATOR(pg_catalog.<>) 0 OR pg_catalog.date_part('month',"
                 " partition_interval::pg_catalog.interval) OPERATOR(pg_catalog.<>) 0,"
                 " premake FROM %s.part_config WHERE parent_table OPERATOR(pg_catalog.=) "
                 "'idempotency.keys'",
                 partman),
        SPI_OK_SELECT);
    if (SPI_processed != 1) elog(ERROR, "idempotency: idempotency.keys is not in part_config");
    bool isnull;
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    PartmanConfig config;
    config.width = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
    if (DatumGetBool(SPI_getbinval(row, desc, 2, &isnull))) config.width = 0;
    config.premake = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
    return config;
}

struct PartmanStep {
    const char *lock_sql;  // nullptr: pg_partman is not expected to change partitions
    const char *sql;
};

void partman_step(void *arg) noexcept {
    auto *s = static_cast<PartmanStep *>(arg);
    // Our own LOCK first: pg_partman turns every error into P0001, a lock timeout included.
    // The parent's lock first, without a long wait in its queue: key calls lock the parent
    // before a partition, so the partitions' locks then wait only for sessions that opened a
    // partition directly.
    if (s->lock_sql != nullptr) {
        lock_keys_exclusively();
        spi_run(s->lock_sql, SPI_OK_UTILITY);
    }
    spi_run(s->sql, SPI_OK_SELECT);
}

// The locks pg_partman's maintenance will need, taken in readers' order (parent first): the
// parent, the default partition (ATTACH scans it) and the partitions due to drop; nullptr
// when it has nothing to create or drop.
const char *partman_lock_sql(const PartitionList &parts, const PartmanConfig &config, int64 now) {
    StringInfoData sql;
    initStringInfo(&sql);
    appendStringInfoString(&sql, "LOCK TABLE ONLY idempotency.keys");
    bool work = false;
    int64 newest = PG_INT64_MIN;
    for (int i = 0; i < parts.count; i++) {
        const PartitionInfo &p = parts.items[i];
        if (p.hi != PG_INT64_MAX) newest = Max(newest, p.hi);
        char *name = core::due_to_drop(time_range(p), now) ? relation_name(p.oid) : nullptr;
        if (name != nullptr) {
            work = true;
            appendStringInfo(&sql, ", ONLY %s", name);
        }
    }
    if (config.width <= 0 ||
        newest < idem::core::bucket_start(now, config.width) + (config.premake + 1) * config.width)
        work = true;
    if (!work) return nullptr;
    char *def = relation_name(default_partition_oid());
    if (def != nullptr) appendStringInfo(&sql, ", ONLY %s", def);
    appendStringInfoString(&sql, " IN ACCESS EXCLUSIVE MODE");
    return sql.data;
}

// Which pg_partman generation is installed: 5.x names partitions its own new way.
core::PartitionNaming partman_naming() {
    int rc = SPI_execute(
        "SELECT pg_catalog.split_part(extversion, '.', 1)::pg_catalog.int4 >= 5"
        " FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_partman'",
        true, 1);
    if (rc != SPI_OK_SELECT || SPI_processed != 1)
        elog(ERROR, "idempotency: reading pg_partman's version failed");
    bool isnull;
    bool five =
        DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    return five ? core::PartitionNaming::kPartman5 : core::PartitionNaming::kPartman4;
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
    int rc = SPI_execute(sql, false, 1);
    spi_check(rc, SPI_OK_SELECT, "reading part_config");
    return SPI_processed > 0;
}

void partman_maintain(const char *schema, ActionSink *out) {
    const char *partman = quote_identifier(schema);
    int64 now = GetCurrentTimestamp();
    PartmanConfig config = read_partman_config(partman);
    // Rows in the default partition block pg_partman from creating the partitions they
    // belong to: expired ones are deleted, the others get their partitions (named as
    // pg_partman names them) before pg_partman runs.
    purge_default(out, now);
    if (config.width > 0) partition_default_rows(out, now, config.width, partman_naming());
    PartitionList before = read_partitions();
    PartmanStep step{partman_lock_sql(before, config, now),
                     psprintf("SELECT %s.run_maintenance(p_parent_table => 'idempotency.keys', "
                              "p_analyze => false, p_jobmon => false)",
                              partman)};
    StepReport report{nullptr,
                      0,
                      0,
                      false,
                      -1,
                      "could not lock idempotency.keys for pg_partman within "
                      "idempotency.maintenance_lock_timeout; retried on the next run",
                      "pg_partman's run_maintenance"};
    if (!run_reported_step(partman_step, &step, out, report)) return;
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
    spi_connect();
    MaintenanceScope scope = enter_maintenance("idempotency.use_partman()");
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
        // pg_partman computes a partition's end as its start plus the width: partitions of
        // another width (made before idempotency.partition_width changed) would be dropped
        // too early.
        idem::core::PartitionNaming naming = partman_naming();
        // maintain() names its partitions the way 4.x does: 5.x needs its own names.
        if (naming != idem::core::PartitionNaming::kPartman4) rename_partitions(width, naming);
        check_partitions_fit(read_partitions(), width, naming, "Before the hand-off",
                             "Drop the partition (or wait until maintain() drops it), or set "
                             "idempotency.partition_width to the width of the existing "
                             "partitions.");
        Oid old_default = default_partition_oid();
        char *old_name = nullptr;
        if (OidIsValid(old_default)) {
            char *name = relation_name(old_default);
            spi_run(psprintf("ALTER TABLE idempotency.keys DETACH PARTITION %s", name),
                    SPI_OK_UTILITY);
            spi_run(psprintf("ALTER TABLE %s RENAME TO keys_default_before_partman", name),
                    SPI_OK_UTILITY);
            old_name = quote_qualified_identifier(
                get_namespace_name(get_rel_namespace(old_default)), "keys_default_before_partman");
        }
        // pg_partman 4.x gives a partition the primary key of its template table (the parent
        // has none): create_parent uses this one, made beforehand with the key.
        spi_run(psprintf("CREATE TABLE IF NOT EXISTS %s.template_idempotency_keys (LIKE "
                         "idempotency.keys, %s)",
                         partman, kPartitionPrimaryKey),
                SPI_OK_UTILITY);
        int64 start = idem::core::bucket_start(GetCurrentTimestamp(), width);
        // 5.x has no 'native' type: its 'range' is 4.x's 'native'.
        spi_run(psprintf("SELECT %s.create_parent(p_parent_table => 'idempotency.keys', "
                         "p_control => 'expires_at', p_type => %s, p_interval => %s, "
                         "p_premake => %d, p_start_partition => %s, p_jobmon => false, "
                         "p_template_table => %s)",
                         partman,
                         naming == idem::core::PartitionNaming::kPartman4 ? "'native'" : "'range'",
                         quote_literal_cstr(width_interval_text(width)), partman_premake(width),
                         time_literal(start),
                         quote_literal_cstr(psprintf("%s.template_idempotency_keys", partman))),
                SPI_OK_SELECT);
        // pg_partman aligns and names partitions by rules of its own for some widths
        // (months, years, odd minutes): refuse those.
        check_partitions_fit(read_partitions(), width, naming, "As pg_partman made them",
                             "pg_partman aligns or names partitions of this width its own "
                             "way: choose a width below a month.");
        // create_parent skips its default partition when every partition already existed.
        if (!OidIsValid(default_partition_oid()))
            spi_run("CREATE TABLE idempotency.keys_default PARTITION OF idempotency.keys DEFAULT",
                    SPI_OK_UTILITY);
        if (old_name != nullptr) {
            // Live rows into the partition set (pg_partman's partitions or its default), then
            // ours takes the place of pg_partman's default: it belongs to the extension and its
            // rows are dumped (pg_extension_config_dump), so a dump restores it through CREATE
            // EXTENSION. pg_partman finds a default partition by its name only.
            spi_run(psprintf("WITH live AS (DELETE FROM %s RETURNING *) INSERT INTO "
                             "idempotency.keys SELECT * FROM live WHERE expires_at "
                             "OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",
                             old_name),
                    SPI_OK_INSERT);
            char *partman_default = relation_name(default_partition_oid());
            spi_run(psprintf("WITH moved AS (DELETE FROM %s RETURNING *) INSERT INTO %s SELECT * "
                             "FROM moved",
                             partman_default, old_name),
                    SPI_OK_INSERT);
            spi_run(psprintf("DROP TABLE %s", partman_default), SPI_OK_UTILITY);
            spi_run(psprintf("ALTER TABLE %s RENAME TO keys_default", old_name), SPI_OK_UTILITY);
            spi_run(
                psprintf("ALTER TABLE idempotency.keys ATTACH PARTITION %s DEFAULT",
                         quote_qualified_identifier(
                             get_namespace_name(get_rel_namespace(old_default)), "keys_default")),
                SPI_OK_UTILITY);
            partition_default_rows(nullptr, GetCurrentTimestamp(), width, naming);
        }
    } else {
        PartmanConfig config = read_partman_config(partman);
        if (config.width != width)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("idempotency.partition_width differs from the partition "
                                   "interval pg_partman uses for idempotency.keys"),
                            errhint("Set idempotency.partition_width back: pg_partman cannot "
                                    "change the width of a partition set.")));
    }
    // Drop (not detach: 4.7 keeps the table by default) a partition once its upper bound has
    // passed: partman drops when start + interval < now - retention. Premake covers
    // max_retention, so keys of any allowed retention find a partition ready. The interval
    // in hours, whatever create_parent stored.
    spi_run(
        psprintf("UPDATE %s.part_config SET retention = '0 seconds', retention_keep_table = "
                 "false, retention_keep_index = false, infinite_time_partitions = true, "
                 "partition_interval = %s, premake = %d "
                 "WHERE parent_table OPERATOR(pg_catalog.=) 'idempotency.keys'",
                 partman, quote_literal_cstr(width_interval_text(width)), partman_premake(width)),
        SPI_OK_UPDATE);
    leave_maintenance(scope);
    SPI_finish();
    PG_RETURN_BOOL(newly);
}

// idempotency.stop_partman(): pg_partman stops managing idempotency.keys (its part_config
// row and the template table go; the partitions stay, and maintain() manages them again).
// Run before DROP EXTENSION idempotency, which would otherwise leave pg_partman a
// configuration row for a table that no longer exists, and every run_maintenance() failing.
// True when pg_partman managed the table.
IDEM_FUNCTION(idem_stop_partman) {
    using namespace idem::pg;
    spi_connect();
    MaintenanceScope scope = enter_maintenance("idempotency.stop_partman()");
    char *schema = partman_schema();
    bool managed = schema != nullptr && partman_manages_keys(schema);
    if (managed) {
        const char *partman = quote_identifier(schema);
        spi_run("LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE", SPI_OK_UTILITY);
        int rc = SPI_execute(psprintf("DELETE FROM %s.part_config WHERE parent_table "
                                      "OPERATOR(pg_catalog.=) 'idempotency.keys' RETURNING "
                                      "template_table",
                                      partman),
                             false, 0);
        spi_check(rc, SPI_OK_DELETE_RETURNING, "deleting from part_config");
        char *template_table = SPI_processed > 0
                                   ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)
                                   : nullptr;
        if (template_table != nullptr) {
            // Through regclass: the name may need quoting, and may be gone already.
            rc = SPI_execute(psprintf("SELECT pg_catalog.to_regclass(%s)::pg_catalog.text",
                                      quote_literal_cstr(template_table)),
                             false, 1);
            spi_check(rc, SPI_OK_SELECT, "finding the template");
            char *found = SPI_processed > 0
                              ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)
                              : nullptr;
            if (found != nullptr) spi_run(psprintf("DROP TABLE %s", found), SPI_OK_UTILITY);
        }
    }
    leave_maintenance(scope);
    SPI_finish();
    PG_RETURN_BOOL(managed);
}
