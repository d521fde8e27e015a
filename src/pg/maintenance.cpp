// idempotency.maintain(): creates the upcoming partitions of idempotency.keys, moves live rows
// out of the default partition into partitions of their own, purges expired rows from the
// default partition and drops partitions whose upper bound has passed (every row in them has
// expired). Each step takes its locks with idempotency.maintenance_lock_timeout and is
// skipped (reported, retried on the next run) when it cannot get them in time, so it never
// queues behind a long transaction with every reserve queued behind it.

#include "pg/maintenance.hpp"

#include "pg/guard.hpp"
#include "pg/key_store.hpp"
#include "pg/settings.hpp"

#include "core/partition_plan.hpp"

#include <cstdio>

extern "C" {
#include "catalog/partition.h"
#include "utils/guc.h"
#include "utils/resowner.h"
}

namespace idem::pg {

namespace {

constexpr int kMaxCreatesPerRun = 100;

// Bounds come back as timestamptz; MINVALUE / MAXVALUE bounds do not match and give NULL.
constexpr const char *kPartitionsSql =
    "SELECT c.relname::pg_catalog.text,"
    " pg_catalog.substring(b.expr, 'FROM \\(''([^'']*)''\\)')::pg_catalog.timestamptz,"
    " pg_catalog.substring(b.expr, 'TO \\(''([^'']*)''\\)')::pg_catalog.timestamptz,"
    " c.reltuples::pg_catalog.float8"
    " FROM pg_catalog.pg_inherits i"
    " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid"
    " CROSS JOIN LATERAL pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS b(expr)"
    " WHERE i.inhparent OPERATOR(pg_catalog.=) $1"
    " AND b.expr OPERATOR(pg_catalog.<>) 'DEFAULT'"
    " ORDER BY 2 NULLS FIRST, 1";

// Per width-aligned bucket of the default partition: live and expired rows.
constexpr const char *kDefaultBucketsSql =
    "SELECT pg_catalog.date_bin($1, expires_at, $2),"
    " pg_catalog.count(*) FILTER (WHERE expires_at OPERATOR(pg_catalog.>) $3),"
    " pg_catalog.count(*) FILTER (WHERE expires_at OPERATOR(pg_catalog.<=) $3)"
    " FROM ONLY %s GROUP BY 1";

constexpr const char *kLockExclusiveSql =
    "LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE";

char *qualified(const char *name) {
    return quote_qualified_identifier("idempotency", name);
}

char *default_partition_name(Oid oid) {
    return quote_qualified_identifier(get_namespace_name(get_rel_namespace(oid)),
                                      get_rel_name(oid));
}

struct CreateStep {
    const PartitionInfo *target;
    const char *default_name;  // nullptr: no live rows of the range in the default partition
    uint64 moved;
};

void create_step(void *arg) {
    auto *s = static_cast<CreateStep *>(arg);
    spi_run(kLockExclusiveSql, SPI_OK_UTILITY);
    char *name = qualified(s->target->name);
    char *lo = time_literal(s->target->lo), *hi = time_literal(s->target->hi);
    spi_run(psprintf("CREATE TABLE %s (LIKE idempotency.keys INCLUDING DEFAULTS INCLUDING "
                     "CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)",
                     name),
            SPI_OK_UTILITY);
    s->moved = 0;
    if (s->default_name != nullptr) {
        // Rows of the range in the default partition would make the ATTACH fail: move them
        // first, under the exclusive lock, so no reserve sees the key missing meanwhile.
        spi_run(psprintf("WITH moved AS (DELETE FROM ONLY %s WHERE expires_at "
                         "OPERATOR(pg_catalog.>=) %s AND expires_at OPERATOR(pg_catalog.<) %s "
                         "RETURNING *) INSERT INTO %s SELECT * FROM moved",
                         s->default_name, lo, hi, name),
                SPI_OK_INSERT);
        s->moved = SPI_processed;
    }
    spi_run(
        psprintf("ALTER TABLE idempotency.keys ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)",
                 name, lo, hi),
        SPI_OK_UTILITY);
}

struct DropStep {
    const PartitionInfo *target;
};

void drop_step(void *arg) {
    auto *s = static_cast<DropStep *>(arg);
    // The parent first: the order in which every reader locks them.
    spi_run(kLockExclusiveSql, SPI_OK_UTILITY);
    spi_run(psprintf("DROP TABLE %s", qualified(s->target->name)), SPI_OK_UTILITY);
}

struct PurgeStep {
    const char *default_name;
    int64 now;
    uint64 purged;
};

void purge_step(void *arg) {
    auto *s = static_cast<PurgeStep *>(arg);
    spi_run(kLockExclusiveSql, SPI_OK_UTILITY);
    spi_run(psprintf("DELETE FROM ONLY %s WHERE expires_at OPERATOR(pg_catalog.<=) %s",
                     s->default_name, time_literal(s->now)),
            SPI_OK_DELETE);
    s->purged = SPI_processed;
}

struct DefaultContent {
    int64 *live_buckets;
    int n_live_buckets;
    int64 expired_rows;
};

DefaultContent read_default(const char *default_name, int64 width, int64 now) {
    DefaultContent content{nullptr, 0, 0};
    Interval *stride = static_cast<Interval *>(palloc0(sizeof(Interval)));
    stride->time = width;
    Oid types[] = {INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
    Datum args[] = {IntervalPGetDatum(stride), TimestampTzGetDatum(0), TimestampTzGetDatum(now)};
    int rc = SPI_execute_with_args(psprintf(kDefaultBucketsSql, default_name), 3, types, args,
                                   nullptr, true, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "idempotency: reading the default partition failed: %s",
             SPI_result_code_string(rc));
    content.live_buckets = static_cast<int64 *>(SPI_palloc(sizeof(int64) * (SPI_processed + 1)));
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[i];
        int64 bucket = DatumGetTimestampTz(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        int64 live = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
        content.expired_rows +=
            DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull));
        if (live > 0) content.live_buckets[content.n_live_buckets++] = bucket;
    }
    return content;
}

bool range_has_live_default_rows(const DefaultContent &content, int64 width,
                                 const PartitionInfo &p) {
    for (int i = 0; i < content.n_live_buckets; i++) {
        int64 b = content.live_buckets[i];
        if (b < p.hi && b + width > p.lo) return true;
    }
    return false;
}

struct PlanArrays {
    PartitionInfo *creates;  // kMaxCreatesPerRun slots
    int n_creates;
    int *drops;  // indexes into the partition list
    int n_drops;
    bool capped;
};

// Pure C++: no PostgreSQL call in here.
void make_plan(const PartitionList &parts, const DefaultContent &content, int64 now, int64 width,
               PlanArrays *out) {
    core::PlanInput in;
    in.now = now;
    in.width = width;
    in.premake = premake_partitions();
    in.max_creates = kMaxCreatesPerRun;
    for (int i = 0; i < parts.count; i++) {
        int64 lo = parts.items[i].lo == PG_INT64_MIN ? -core::kUnbounded : parts.items[i].lo;
        in.existing.push_back({lo, parts.items[i].hi});
    }
    in.default_buckets.assign(content.live_buckets, content.live_buckets + content.n_live_buckets);
    core::Plan plan = core::plan_partitions(in);
    out->n_creates = 0;
    for (const core::TimeRange &r : plan.create) {
        PartitionInfo &p = out->creates[out->n_creates++];
        std::snprintf(p.name, sizeof p.name, "keys_p%s",
                      core::partition_suffix(r.lo, width).c_str());
        p.lo = r.lo;
        p.hi = r.hi;
        p.reltuples = 0;
    }
    out->n_drops = 0;
    for (size_t i : plan.drop) out->drops[out->n_drops++] = int(i);
    out->capped = plan.capped;
}

const char *const kSkipped =
    "could not lock idempotency.keys within "
    "idempotency.maintenance_lock_timeout; retried on the next run";

void maintain_partitions(ActionSink *out) {
    int64 now = GetCurrentTimestamp();
    int64 width = partition_width_usecs();
    Oid default_oid = default_partition_oid();
    PartitionList parts = read_partitions();
    DefaultContent content{nullptr, 0, 0};
    char *default_name = nullptr;
    if (OidIsValid(default_oid)) {
        default_name = default_partition_name(default_oid);
        content = read_default(default_name, width, now);
    }
    PlanArrays plan;
    plan.creates = static_cast<PartitionInfo *>(palloc0(sizeof(PartitionInfo) * kMaxCreatesPerRun));
    plan.drops = static_cast<int *>(palloc0(sizeof(int) * (parts.count + 1)));
    make_plan(parts, content, now, width, &plan);

    for (int i = 0; i < plan.n_creates; i++) {
        const PartitionInfo &p = plan.creates[i];
        CreateStep step{&p, nullptr, 0};
        if (default_name != nullptr && range_has_live_default_rows(content, width, p))
            step.default_name = default_name;
        if (run_step(create_step, &step))
            emit_action(out, "created", p.name, p.lo, p.hi, true, int64(step.moved),
                        step.moved > 0 ? psprintf("moved %llu rows from the default partition",
                                                  (unsigned long long)step.moved)
                                       : nullptr);
        else
            emit_action(out, "skipped", p.name, p.lo, p.hi, true, -1, kSkipped);
    }
    if (plan.capped)
        emit_action(out, "deferred", nullptr, 0, 0, false, -1,
                    psprintf("more than %d partitions to create; the rest on the next run",
                             kMaxCreatesPerRun));
    if (content.expired_rows > 0) {
        PurgeStep step{default_name, now, 0};
        if (run_step(purge_step, &step))
            emit_action(out, "purged", get_rel_name(default_oid), 0, 0, false, int64(step.purged),
                        "deleted expired rows from the default partition");
        else
            emit_action(out, "skipped", get_rel_name(default_oid), 0, 0, false, -1, kSkipped);
    }
    for (int i = 0; i < plan.n_drops; i++) {
        const PartitionInfo &p = parts.items[plan.drops[i]];
        DropStep step{&p};
        int64 rows = p.reltuples >= 0 ? int64(p.reltuples) : -1;
        if (run_step(drop_step, &step))
            emit_action(out, "dropped", p.name, p.lo, p.hi, true, rows, nullptr);
        else
            emit_action(out, "skipped", p.name, p.lo, p.hi, true, rows, kSkipped);
    }
}

}  // namespace

// --- shared helpers ---------------------------------------------------------------------------

Oid key_table_oid() {
    Oid schema = get_namespace_oid("idempotency", false);
    Oid rel = get_relname_relid("keys", schema);
    if (!OidIsValid(rel)) elog(ERROR, "idempotency: table idempotency.keys is missing");
    return rel;
}

Oid default_partition_oid() {
    return get_default_partition_oid(key_table_oid());
}

PartitionList read_partitions() {
    Oid types[] = {OIDOID};
    Datum args[] = {ObjectIdGetDatum(key_table_oid())};
    int rc = SPI_execute_with_args(kPartitionsSql, 1, types, args, nullptr, true, 0);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "idempotency: listing partitions failed: %s", SPI_result_code_string(rc));
    PartitionList list;
    list.count = int(SPI_processed);
    list.items = static_cast<PartitionInfo *>(SPI_palloc(sizeof(PartitionInfo) * (list.count + 1)));
    for (int i = 0; i < list.count; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        TupleDesc desc = SPI_tuptable->tupdesc;
        PartitionInfo &p = list.items[i];
        bool isnull;
        strlcpy(p.name, TextDatumGetCString(SPI_getbinval(row, desc, 1, &isnull)), NAMEDATALEN);
        Datum lo = SPI_getbinval(row, desc, 2, &isnull);
        p.lo = isnull ? PG_INT64_MIN : DatumGetTimestampTz(lo);
        Datum hi = SPI_getbinval(row, desc, 3, &isnull);
        p.hi = isnull ? PG_INT64_MAX : DatumGetTimestampTz(hi);
        p.reltuples = DatumGetFloat8(SPI_getbinval(row, desc, 4, &isnull));
    }
    return list;
}

void spi_run(const char *sql, int expected) {
    int rc = SPI_execute(sql, false, 0);
    if (rc != expected)
        elog(ERROR, "idempotency: statement failed (%s): %s", SPI_result_code_string(rc), sql);
}

int use_maintenance_settings() {
    int level = NewGUCNestLevel();
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%d", maintenance_lock_timeout_ms());
    (void)set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                            true, 0, false);
    (void)set_config_option("TimeZone", "UTC", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                            false);
    (void)set_config_option("DateStyle", "ISO, YMD", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                            true, 0, false);
    return level;
}

void restore_settings(int level) {
    AtEOXact_GUC(true, level);
}

char *time_literal(int64 t) {
    char *text = DatumGetCString(DirectFunctionCall1(timestamptz_out, TimestampTzGetDatum(t)));
    return quote_literal_cstr(text);
}

bool run_step(void (*step)(void *), void *arg) {
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile bool done = false;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
    PG_TRY();
    {
        step(arg);
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
        done = true;
    }
    PG_CATCH();
    {
        MemoryContextSwitchTo(context);
        ErrorData *edata = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
        if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE) ReThrowError(edata);
        FreeErrorData(edata);
    }
    PG_END_TRY();
    return done;
}

void emit_action(ActionSink *out, const char *action, const char *partition, int64 lo, int64 hi,
                 bool has_range, int64 rows, const char *detail) {
    Datum values[6];
    bool nulls[6] = {false};
    values[0] = CStringGetTextDatum(action);
    nulls[1] = partition == nullptr;
    values[1] = nulls[1] ? (Datum)0 : CStringGetTextDatum(partition);
    nulls[2] = !has_range || lo == PG_INT64_MIN;
    values[2] = TimestampTzGetDatum(lo);
    nulls[3] = !has_range || hi == PG_INT64_MAX;
    values[3] = TimestampTzGetDatum(hi);
    nulls[4] = rows < 0;
    values[4] = Int64GetDatum(rows);
    nulls[5] = detail == nullptr;
    values[5] = nulls[5] ? (Datum)0 : CStringGetTextDatum(detail);
    tuplestore_putvalues(out->store, out->desc, values, nulls);
}

}  // namespace idem::pg

IDEM_FUNCTION(idem_maintain) {
    using namespace idem::pg;
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    InitMaterializedSRF(fcinfo, 0);
    ActionSink sink{rsinfo->setResult, rsinfo->setDesc};
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "idempotency: SPI_connect failed");
    SavedUser user = become_key_owner();
    int level = use_maintenance_settings();
    if (!run_step(
            [](void *) {
                spi_run("LOCK TABLE ONLY idempotency.keys IN SHARE UPDATE EXCLUSIVE MODE",
                        SPI_OK_UTILITY);
            },
            nullptr)) {
        emit_action(&sink, "skipped", nullptr, 0, 0, false, -1,
                    "another maintain() is running, or a long lock on idempotency.keys; "
                    "retried on the next run");
    } else {
        char *partman = partman_schema();
        if (partman != nullptr && partman_manages_keys(partman))
            partman_maintain(partman, &sink);
        else
            maintain_partitions(&sink);
    }
    restore_settings(level);
    restore_user(user);
    SPI_finish();
    return (Datum)0;
}
