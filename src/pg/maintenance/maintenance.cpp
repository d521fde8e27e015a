// idempotency.maintain(): purges expired rows from the default partition, creates the
// upcoming partitions of idempotency.keys (moving rows of their range out of the default
// partition) and drops partitions whose upper bound has passed (every row in them has
// expired). Each step takes its locks with idempotency.maintenance_lock_timeout and is
// skipped (reported, retried on the next run) when it cannot get them in time, so it never
// queues behind a long transaction with every reserve queued behind it; a step that fails
// otherwise is reported and the next one runs.

#include "pg/maintenance/maintenance.hpp"
#include "pg/fault_points.hpp"

#include "pg/guard.hpp"
#include "pg/citus/citus.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/settings.hpp"
#include "pg/spi.hpp"
#include "pg/subtransaction.hpp"

#include "core/partition_plan.hpp"

#include <cstdio>

extern "C" {
#include "access/xact.h"
#include "catalog/partition.h"
#include "commands/tablespace.h"
#include "executor/tstoreReceiver.h"
#include "utils/plancache.h"
#include "utils/queryenvironment.h"
#include "replication/syncrep.h"
#include "utils/guc.h"
#include "utils/resowner.h"
}

namespace idem::pg {

namespace {

constexpr int kMaxCreatesPerRun = 100;

// Bounds come back as timestamptz; MINVALUE / MAXVALUE bounds do not match and give NULL.
constexpr const char *kPartitionsSql =
    "SELECT c.oid, c.relname::pg_catalog.text,"
    " pg_catalog.substring(b.expr, 'FROM \\(''([^'']*)''\\)')::pg_catalog.timestamptz,"
    " pg_catalog.substring(b.expr, 'TO \\(''([^'']*)''\\)')::pg_catalog.timestamptz,"
    " idempotency.rows_estimate(c.oid)::pg_catalog.float8"
    " FROM pg_catalog.pg_inherits i"
    " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid"
    " CROSS JOIN LATERAL pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS b(expr)"
    " WHERE i.inhparent OPERATOR(pg_catalog.=) $1"
    " AND b.expr OPERATOR(pg_catalog.<>) 'DEFAULT'"
    " ORDER BY 3 NULLS FIRST, 2";

// Per width-aligned bucket of the default partition: live rows.
constexpr const char *kDefaultBucketsSql =
    "SELECT pg_catalog.date_bin($1, expires_at, $2),"
    " pg_catalog.count(*) FILTER (WHERE expires_at OPERATOR(pg_catalog.>) $3)"
    " FROM ONLY %s GROUP BY 1";

// A lock request waiting in the queue of idempotency.keys makes every key call that comes
// after it wait too, however short the DDL it is for: so maintain() never waits there longer
// than kLockAttemptMs at a time, and pauses kLockPauseMs between two attempts, in which the
// calls queued meanwhile go through.
constexpr int kLockAttemptMs = 10;
constexpr long kLockPauseMs = 10;

struct LockAttempt {
    Oid keys;
    int attempt_ms;
};

void lock_attempt(void *arg) noexcept {
    auto *a = static_cast<LockAttempt *>(arg);
    int level = NewGUCNestLevel();
    (void)set_config_option("lock_timeout", psprintf("%d", a->attempt_ms), PGC_SUSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
    LockRelationOid(a->keys, AccessExclusiveLock);
    AtEOXact_GUC(true, level);
}

void take_exclusive_lock(Oid keys) noexcept {
    if (ConditionalLockRelationOid(keys, AccessExclusiveLock)) return;
    TimestampTz deadline =
        TimestampTzPlusMilliseconds(GetCurrentTimestamp(), maintenance_lock_timeout_ms());
    for (;;) {
        long left_ms = long((deadline - GetCurrentTimestamp()) / 1000);
        LockAttempt attempt{keys, int(Max(1L, Min(long(kLockAttemptMs), left_ms)))};
        ErrorData *edata = nullptr;
        if (run_in_subtransaction(lock_attempt, &attempt, &edata)) return;
        if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE || GetCurrentTimestamp() >= deadline)
            ReThrowError(edata);
        FreeErrorData(edata);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        Min(kLockPauseMs, Max(1L, left_ms)), PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        if (ConditionalLockRelationOid(keys, AccessExclusiveLock)) return;
    }
}

const char *const kSkipped =
    "could not lock idempotency.keys within "
    "idempotency.maintenance_lock_timeout; retried on the next run";

constexpr const char *kMovedRows = "idempotency_moved_rows";

// Under the exclusive lock of idempotency.keys: attaches the (empty) table `name` as the
// partition [lo, hi) and moves the rows of that range out of the default partition into it,
// returning how many. Rows of the range in the default partition (live or expired, whenever
// committed) would make the ATTACH fail, so they are deleted first and inserted again
// afterwards, through idempotency.keys: logical replication publishing the table through its
// root (publish_via_partition_root) then carries both the delete and the insert, so a
// subscriber keeps every key. (Inserting into the table before the ATTACH, as 0.1.0 did, is
// a change to a table no publication of idempotency.keys covers yet: a subscriber saw the
// delete only.) Meanwhile the rows wait in a tuplestore, on disk beyond work_mem. A fresh
// snapshot: rows committed up to the lock are seen; no reserve sees a key missing meanwhile.
uint64 attach_moving_default_rows(const char *name, const char *lo, const char *hi) {
    const char *attach =
        psprintf("ALTER TABLE idempotency.keys ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)",
                 name, lo, hi);
    Oid def = default_partition_oid();
    if (!OidIsValid(def)) {
        spi_run(attach, SPI_OK_UTILITY);
        return 0;
    }
    // A connection of its own: its registered relation goes with it, also on error.
    spi_connect();
    SPIPlanPtr take = SPI_prepare(
        psprintf("DELETE FROM ONLY %s WHERE expires_at OPERATOR(pg_catalog.>=) %s AND expires_at "
                 "OPERATOR(pg_catalog.<) %s RETURNING *",
                 relation_name(def), lo, hi),
        0, nullptr);
    if (take == nullptr) elog(ERROR, "idempotency: preparing the move failed");
    auto *source = static_cast<CachedPlanSource *>(linitial(SPI_plan_get_plan_sources(take)));
    Tuplestorestate *rows = tuplestore_begin_heap(false, false, work_mem);
    DestReceiver *into = CreateDestReceiver(DestTuplestore);
    SetTuplestoreDestReceiverParams(into, rows, CurrentMemoryContext, false, nullptr, nullptr);
    SPIExecuteOptions options;
    memset(&options, 0, sizeof options);
    options.dest = into;
    spi_check(SPI_execute_plan_extended(take, &options), SPI_OK_DELETE_RETURNING,
              "moving rows out of the default partition");
    uint64 moved = uint64(tuplestore_tuple_count(rows));
    spi_run(attach, SPI_OK_UTILITY);
    if (moved > 0) {
        auto *enr =
            static_cast<EphemeralNamedRelation>(palloc0(sizeof(EphemeralNamedRelationData)));
        enr->md.name = const_cast<char *>(kMovedRows);
        enr->md.tupdesc = CreateTupleDescCopy(source->resultDesc);
        enr->md.enrtype = ENR_NAMED_TUPLESTORE;
        enr->md.enrtuples = double(moved);
        enr->reldata = rows;
        spi_check(SPI_register_relation(enr), SPI_OK_REL_REGISTER, "registering the moved rows");
        spi_run(psprintf("INSERT INTO idempotency.keys SELECT * FROM %s", kMovedRows),
                SPI_OK_INSERT);
        if (SPI_processed != moved)
            elog(ERROR, "idempotency: moved %llu rows out of the default partition, inserted %llu",
                 (unsigned long long)moved, (unsigned long long)SPI_processed);
    }
    tuplestore_end(rows);
    SPI_finish();
    return moved;
}

struct CreateStep {
    const PartitionInfo *target;
    uint64 moved;
};

void create_step(void *arg) noexcept {
    auto *s = static_cast<CreateStep *>(arg);
    char *name = quote_qualified_identifier("idempotency", s->target->name);
    char *lo = time_literal(s->target->lo), *hi = time_literal(s->target->hi);
    s->moved = 0;
    if (is_citus_table(key_table_oid())) {
        // Distributed keys: Citus creates the partition's shards on every worker, co-located
        // with the parent's. Rows of the range in the default partition (none, with premade
        // partitions) make it fail, reported and retried.
        spi_run(psprintf("CREATE TABLE %s PARTITION OF idempotency.keys FOR VALUES FROM (%s) TO "
                         "(%s)",
                         name, lo, hi),
                SPI_OK_UTILITY);
        return;
    }
    // The new table first: it needs only ACCESS SHARE on idempotency.keys. In the parent's
    // tablespace, as CREATE TABLE ... PARTITION OF would put it.
    Oid space = get_rel_tablespace(key_table_oid());
    char *space_name = OidIsValid(space) ? get_tablespace_name(space) : nullptr;
    // Its own primary key: the parent has none (see idempotency--0.1.0--0.2.0.sql, pg_dump).
    // On a parent that still has one (0.1.0), ATTACH adopts this index as the partition's.
    spi_run(psprintf("CREATE TABLE %s (LIKE idempotency.keys INCLUDING DEFAULTS INCLUDING "
                     "CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS, %s)%s%s",
                     name, kPartitionPrimaryKey, space_name ? " TABLESPACE " : "",
                     space_name ? quote_identifier(space_name) : ""),
            SPI_OK_UTILITY);
    lock_keys_exclusively();
    IDEM_FAULT_POINT("maintain-create");
    s->moved = attach_moving_default_rows(name, lo, hi);
}

struct DropStep {
    const PartitionInfo *target;
    bool gone;  // it no longer existed
};

void drop_step(void *arg) noexcept {
    auto *s = static_cast<DropStep *>(arg);
    lock_keys_exclusively();
    // By OID: the partition may live in any schema, or have been renamed.
    char *name = relation_name(s->target->oid);
    s->gone = name == nullptr;
    IDEM_FAULT_POINT("maintain-drop");
    if (!s->gone) spi_run(psprintf("DROP TABLE %s", name), SPI_OK_UTILITY);
}

struct PurgeStep {
    Oid def;
    int64 now;
    uint64 purged;
};

void purge_step(void *arg) noexcept {
    auto *s = static_cast<PurgeStep *>(arg);
    // ROW EXCLUSIVE on the default partition only: expired rows are invisible to every call.
    spi_run(psprintf("DELETE FROM ONLY %s WHERE expires_at OPERATOR(pg_catalog.<=) %s",
                     relation_name(s->def), time_literal(s->now)),
            SPI_OK_DELETE);
    s->purged = SPI_processed;
    IDEM_FAULT_POINT("maintain-purge");
}

struct DefaultContent {
    int64 *live_buckets;
    int n_live_buckets;
};

DefaultContent read_default(Oid def, int64 width, int64 now) {
    DefaultContent content{nullptr, 0};
    if (!OidIsValid(def)) return content;
    Interval *stride = static_cast<Interval *>(palloc0(sizeof(Interval)));
    stride->time = width;
    Oid types[] = {INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
    Datum args[] = {IntervalPGetDatum(stride), TimestampTzGetDatum(0), TimestampTzGetDatum(now)};
    int rc = SPI_execute_with_args(psprintf(kDefaultBucketsSql, relation_name(def)), 3, types, args,
                                   nullptr, false, 0);
    spi_check(rc, SPI_OK_SELECT, "reading the default partition");
    content.live_buckets = static_cast<int64 *>(SPI_palloc(sizeof(int64) * (SPI_processed + 1)));
    for (uint64 i = 0; i < SPI_processed; i++) {
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[i];
        int64 bucket = DatumGetTimestampTz(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        int64 live = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
        if (live > 0) content.live_buckets[content.n_live_buckets++] = bucket;
    }
    return content;
}

struct PlanArrays {
    PartitionInfo *creates;  // kMaxCreatesPerRun slots
    int n_creates;
    int *drops;  // indexes into the partition list
    int n_drops;
    bool capped;
};

// Pure C++: no PostgreSQL call in here. premake < 0: partitions for the default partition's
// rows only.
void make_plan(const PartitionList &parts, const DefaultContent &content, int64 now, int64 width,
               int premake, core::PartitionNaming naming, PlanArrays *out) {
    core::PlanInput in;
    IDEM_ALLOCATION_FAULT_POINT("maintain-plan");
    in.now = now;
    in.width = width;
    in.premake = premake;
    in.max_creates = kMaxCreatesPerRun;
    for (int i = 0; i < parts.count; i++) in.existing.push_back(time_range(parts.items[i]));
    in.default_buckets.assign(content.live_buckets, content.live_buckets + content.n_live_buckets);
    core::Plan plan = core::plan_partitions(in);
    out->n_creates = 0;
    for (const core::TimeRange &r : plan.create) {
        PartitionInfo &p = out->creates[out->n_creates++];
        p.oid = InvalidOid;
        std::snprintf(p.name, sizeof p.name, "keys_p%s",
                      core::partition_suffix(r.lo, width, naming).c_str());
        p.lo = r.lo;
        p.hi = r.hi;
        p.reltuples = 0;
    }
    out->n_drops = 0;
    for (size_t i : plan.drop) out->drops[out->n_drops++] = int(i);
    out->capped = plan.capped;
}

PlanArrays plan_for(const PartitionList &parts, const DefaultContent &content, int64 now,
                    int64 width, int premake,
                    core::PartitionNaming naming = core::PartitionNaming::kPartman4) {
    PlanArrays plan;
    plan.creates = static_cast<PartitionInfo *>(palloc0(sizeof(PartitionInfo) * kMaxCreatesPerRun));
    plan.drops = static_cast<int *>(palloc0(sizeof(int) * (parts.count + 1)));
    // C++ that may throw (std::bad_alloc), called inside idem_maintain's PG_TRY: its
    // exception becomes a PostgreSQL error here, before the PG_TRY block could see it.
    guarded([&] { make_plan(parts, content, now, width, premake, naming, &plan); });
    return plan;
}

void check_publications_step(void *) noexcept {
    check_publications();
}

// Creating partitions while a publication carries idempotency.keys leaf by leaf would lose
// keys on its subscribers (publications.cpp): then none is created, reported 'failed', and
// new keys stay in the default partition.
bool publications_allow_creates(ActionSink *out) {
    if (out == nullptr) {
        check_publications();
        return true;
    }
    return run_reported_step(
        check_publications_step, nullptr, out,
        StepReport{nullptr, 0, 0, false, -1, kSkipped, "no partition created"});
}

void run_creates(ActionSink *out, const PlanArrays &plan) {
    if (plan.n_creates > 0 && !publications_allow_creates(out)) return;
    for (int i = 0; i < plan.n_creates; i++) {
        const PartitionInfo &p = plan.creates[i];
        CreateStep step{&p, 0};
        if (out == nullptr) {
            create_step(&step);
            continue;
        }
        if (run_reported_step(create_step, &step, out,
                              StepReport{p.name, p.lo, p.hi, true, -1, kSkipped, nullptr}))
            emit_action(out, "created", p.name, p.lo, p.hi, true, int64(step.moved),
                        step.moved > 0 ? psprintf("moved %llu rows from the default partition",
                                                  (unsigned long long)step.moved)
                                       : nullptr);
    }
    if (plan.capped && out != nullptr)
        emit_action(out, "deferred", nullptr, 0, 0, false, -1,
                    psprintf("more than %d partitions to create; the rest on the next run",
                             kMaxCreatesPerRun));
}

void maintain_partitions(ActionSink *out) {
    int64 now = GetCurrentTimestamp();
    int64 width = partition_width_usecs();
    purge_default(out, now);
    PartitionList parts = read_partitions();
    DefaultContent content = read_default(default_partition_oid(), width, now);
    PlanArrays plan = plan_for(parts, content, now, width, premake_partitions());
    run_creates(out, plan);
    for (int i = 0; i < plan.n_drops; i++) {
        const PartitionInfo &p = parts.items[plan.drops[i]];
        DropStep step{&p, false};
        int64 rows = p.reltuples >= 0 ? int64(p.reltuples) : -1;
        if (run_reported_step(drop_step, &step, out,
                              StepReport{p.name, p.lo, p.hi, true, rows, kSkipped, nullptr}) &&
            !step.gone)
            emit_action(out, "dropped", p.name, p.lo, p.hi, true, rows, nullptr);
    }
}

// Errors run_step does not turn into a 'failed' step: cancels and shutdowns (57), resource
// exhaustion (53), system (58) and internal errors (XX).
bool must_reraise(int sqlstate) {
    int category = ERRCODE_TO_CATEGORY(sqlstate);
    return category == ERRCODE_OPERATOR_INTERVENTION ||
           category == ERRCODE_INSUFFICIENT_RESOURCES || category == ERRCODE_SYSTEM_ERROR ||
           category == ERRCODE_INTERNAL_ERROR;
}

// The maintenance transaction commits with synchronous_commit = local: it holds ACCESS
// EXCLUSIVE on idempotency.keys until its commit ends, and a commit that waits for a
// synchronous standby that is gone would keep every read of the keys waiting with it. Nothing
// it writes needs the standby (docs/replication.md, "High availability"): a standby that misses it
// has the same keys, and the next pass redoes the work. A SET LOCAL, before our GUC nest level so
// it lasts until the commit. Never raised (off stays off); kept when the transaction already wrote
// something, whose commit must wait.
void commit_without_standbys(const char *caller) {
    if (synchronous_commit <= SYNCHRONOUS_COMMIT_LOCAL_FLUSH) return;
    if (TransactionIdIsValid(GetTopTransactionIdIfAny())) {
        // Said only where it matters: synchronous standbys are configured.
        if (SyncRepStandbyNames == nullptr || SyncRepStandbyNames[0] == '\0') return;
        ereport(NOTICE,
                (errmsg("%s keeps synchronous_commit = %s: this transaction has already written",
                        caller, GetConfigOption("synchronous_commit", false, false)),
                 errdetail("Its commit waits for the synchronous standbys while holding the "
                           "maintenance locks on idempotency.keys."),
                 errhint("Call it in a transaction of its own.")));
        return;
    }
    (void)set_config_option("synchronous_commit", "local", PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_LOCAL, true, 0, false);
}

void set_pinned(const char *name, const char *value) {
    (void)set_config_option(name, value, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

}  // namespace

// --- shared helpers ---------------------------------------------------------------------------

// ACCESS EXCLUSIVE on idempotency.keys (the parent first: the order in which every reader
// locks them), held to the end of the transaction: taken at once when no call holds the
// table, else in attempts of kLockAttemptMs until idempotency.maintenance_lock_timeout has
// passed, when the last attempt's lock timeout error (55P03) ends the step as skipped.
void lock_keys_exclusively() noexcept {
    Oid keys = key_table_oid();
    take_exclusive_lock(keys);
    // Citus propagates a LOCK statement to the workers' shards: granted here already, it
    // waits only there (maintenance_lock_timeout).
    if (is_citus_table(keys))
        spi_run("LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE", SPI_OK_UTILITY);
}

Oid key_table_oid() {
    Oid schema = get_namespace_oid("idempotency", false);
    Oid rel = get_relname_relid("keys", schema);
    if (!OidIsValid(rel)) elog(ERROR, "idempotency: table idempotency.keys is missing");
    return rel;
}

Oid default_partition_oid() {
    return get_default_partition_oid(key_table_oid());
}

// Like every read here, not read-only: a fresh snapshot that sees this transaction's own
// changes (pg_partman's partitions, rows just moved) and rows committed since the call began.
char *relation_name(Oid oid) {
    char *name = OidIsValid(oid) ? get_rel_name(oid) : nullptr;
    char *schema = name != nullptr ? get_namespace_name(get_rel_namespace(oid)) : nullptr;
    return schema != nullptr ? quote_qualified_identifier(schema, name) : nullptr;
}

PartitionList read_partitions() {
    Oid types[] = {OIDOID};
    Datum args[] = {ObjectIdGetDatum(key_table_oid())};
    int rc = SPI_execute_with_args(kPartitionsSql, 1, types, args, nullptr, false, 0);
    spi_check(rc, SPI_OK_SELECT, "listing partitions");
    PartitionList list;
    list.count = int(SPI_processed);
    list.items = static_cast<PartitionInfo *>(SPI_palloc(sizeof(PartitionInfo) * (list.count + 1)));
    for (int i = 0; i < list.count; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        TupleDesc desc = SPI_tuptable->tupdesc;
        PartitionInfo &p = list.items[i];
        bool isnull;
        p.oid = DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull));
        strlcpy(p.name, TextDatumGetCString(SPI_getbinval(row, desc, 2, &isnull)), NAMEDATALEN);
        Datum lo = SPI_getbinval(row, desc, 3, &isnull);
        p.lo = isnull ? PG_INT64_MIN : DatumGetTimestampTz(lo);
        Datum hi = SPI_getbinval(row, desc, 4, &isnull);
        p.hi = isnull ? PG_INT64_MAX : DatumGetTimestampTz(hi);
        p.reltuples = DatumGetFloat8(SPI_getbinval(row, desc, 5, &isnull));
    }
    return list;
}

void spi_run(const char *sql, int expected) noexcept {
    int rc = SPI_execute(sql, false, 0);
    if (rc != expected)
        elog(ERROR, "idempotency: statement failed (%s): %s", SPI_result_code_string(rc), sql);
}

MaintenanceScope enter_maintenance(const char *caller) {
    // Under REPEATABLE READ / SERIALIZABLE the steps would not see rows committed after the
    // transaction's snapshot, and ATTACH PARTITION would then find them in the default
    // partition.
    if (IsolationUsesXactSnapshot())
        throw SqlError(ERRCODE_ACTIVE_SQL_TRANSACTION,
                       psprintf("%s must run in a READ COMMITTED transaction", caller), nullptr,
                       "Call it in a transaction of its own (autocommit).");
    MaintenanceScope scope;
    scope.user = become_key_owner();
    Oid owner;
    int context;
    GetUserIdAndSecContext(&owner, &context);
    SetUserIdAndSecContext(owner, context | SECURITY_RESTRICTED_OPERATION);
    scope.guc_level = NewGUCNestLevel();
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%d", maintenance_lock_timeout_ms());
    set_pinned("search_path", "pg_catalog, pg_temp");
    set_pinned("lock_timeout", timeout);
    set_pinned("TimeZone", "UTC");
    set_pinned("DateStyle", "ISO, YMD");
    set_pinned("IntervalStyle", "postgres");
    set_pinned("default_tablespace", "");
    set_pinned("default_table_access_method", "heap");
    return scope;
}

void leave_maintenance(MaintenanceScope scope) {
    // false: restore every setting changed at this level, whether SET LOCAL or SET.
    AtEOXact_GUC(false, scope.guc_level);
    restore_user(scope.user);
}

char *time_text(int64 t) {
    return DatumGetCString(DirectFunctionCall1(timestamptz_out, TimestampTzGetDatum(t)));
}

char *time_literal(int64 t) {
    char *text = DatumGetCString(DirectFunctionCall1(timestamptz_out, TimestampTzGetDatum(t)));
    return quote_literal_cstr(text);
}

namespace {

enum class StepResult { kDone, kSkipped, kFailed };

// The step's outcome; the message of a failed step in *error.
StepResult run_step(void (*step)(void *) noexcept, void *arg, char **error) {
    ErrorData *edata = nullptr;
    if (run_in_subtransaction(step, arg, &edata)) return StepResult::kDone;
    if (must_reraise(edata->sqlerrcode)) ReThrowError(edata);
    StepResult result = StepResult::kSkipped;
    if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE) {
        result = StepResult::kFailed;
        if (error != nullptr)
            *error = edata->detail ? psprintf("%s (%s)", edata->message, edata->detail)
                                   : pstrdup(edata->message);
    }
    FreeErrorData(edata);
    return result;
}

}  // namespace

bool run_reported_step(void (*step)(void *) noexcept, void *arg, ActionSink *out,
                       const StepReport &report) {
    char *error = nullptr;
    StepResult result = run_step(step, arg, &error);
    if (result == StepResult::kSkipped)
        emit_action(out, "skipped", report.partition, report.lo, report.hi, report.has_range,
                    report.rows, report.skipped);
    if (result == StepResult::kFailed)
        emit_action(out, "failed", report.partition, report.lo, report.hi, report.has_range,
                    report.rows,
                    report.failed_prefix ? psprintf("%s: %s", report.failed_prefix, error) : error);
    return result == StepResult::kDone;
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
    if (strcmp(action, "skipped") == 0 || strcmp(action, "failed") == 0) out->incomplete++;
    if (out->steps != nullptr)
        append_step_json(out->steps, action, partition, nulls[2] ? nullptr : time_text(lo),
                         nulls[3] ? nullptr : time_text(hi), rows, detail);
}

void purge_default(ActionSink *out, int64 now) {
    Oid def = default_partition_oid();
    if (!OidIsValid(def)) return;
    // Counted first (no lock beyond ACCESS SHARE) so a run with nothing to purge reports nothing.
    Oid types[] = {TIMESTAMPTZOID};
    Datum args[] = {TimestampTzGetDatum(now)};
    int rc = SPI_execute_with_args(
        psprintf("SELECT 1 FROM ONLY %s WHERE expires_at OPERATOR(pg_catalog.<=) $1 LIMIT 1",
                 relation_name(def)),
        1, types, args, nullptr, false, 1);
    spi_check(rc, SPI_OK_SELECT, "reading the default partition");
    if (SPI_processed == 0) return;
    char *name = get_rel_name(def);
    PurgeStep step{def, now, 0};
    StepReport report{name,
                      0,
                      0,
                      false,
                      -1,
                      "could not lock the default partition (or one of its rows) within "
                      "idempotency.maintenance_lock_timeout; retried on the next run",
                      nullptr};
    if (run_reported_step(purge_step, &step, out, report))
        emit_action(out, "purged", name, 0, 0, false, int64(step.purged),
                    "deleted expired rows from the default partition");
}

void partition_default_rows(ActionSink *out, int64 now, int64 width, core::PartitionNaming naming) {
    DefaultContent content = read_default(default_partition_oid(), width, now);
    if (content.n_live_buckets == 0) return;
    run_creates(out, plan_for(read_partitions(), content, now, width, -1, naming));
}

}  // namespace idem::pg

namespace idem::pg {
namespace {

// The steps of a run, C-style (no C++ object; C++ that may throw runs in guarded(), as
// plan_for does).
void maintain_steps(ActionSink *sink) {
    StepReport report{nullptr,
                      0,
                      0,
                      false,
                      -1,
                      "another maintain() is running, or a long lock on idempotency.keys; "
                      "retried on the next run",
                      nullptr};
    if (is_citus_worker()) {
        // The coordinator's maintain() creates and drops the partitions of every worker; DDL
        // here would change this node's metadata only.
        emit_action(sink, "skipped", nullptr, 0, 0, false, -1,
                    "this node is a Citus worker: maintain() runs on the coordinator, which "
                    "creates and drops the partitions of idempotency.keys on every worker");
        return;
    }
    auto lock_keys = [](void *) noexcept {
        spi_run("LOCK TABLE ONLY idempotency.keys IN SHARE UPDATE EXCLUSIVE MODE", SPI_OK_UTILITY);
        IDEM_FAULT_POINT("maintain-lock");
    };
    if (run_reported_step(lock_keys, nullptr, sink, report)) {
        char *partman = partman_schema();
        if (partman != nullptr && partman_manages_keys(partman))
            partman_maintain(partman, sink);
        else
            maintain_partitions(sink);
    }
    // The counters' row of this hour (idempotency.stats_hourly / stats_daily read them).
    auto snapshot_stats = [](void *) noexcept {
        spi_run("SELECT idempotency.stats_snapshot()", SPI_OK_SELECT);
    };
    (void)run_reported_step(snapshot_stats, nullptr, sink,
                            StepReport{nullptr, 0, 0, false, -1,
                                       "could not snapshot the counters into "
                                       "idempotency.stats_snapshots",
                                       "stats snapshot"});
}

// The run itself, inside idem_maintain's PG_TRY: an exception anywhere in the steps becomes a
// PostgreSQL error here, which the PG_CATCH sees (and records as a failed run); none leaves
// this function to unwind through the PG_TRY block.
void maintain_run(ActionSink *sink) noexcept {
    guarded([sink] { maintain_steps(sink); });
}

}  // namespace
}  // namespace idem::pg

IDEM_FUNCTION(idem_maintain) {
    using namespace idem::pg;
    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    InitMaterializedSRF(fcinfo, 0);
    ActionSink sink{rsinfo->setResult, rsinfo->setDesc, makeStringInfo(), 0};
    spi_connect();
    commit_without_standbys("idempotency.maintain()");
    MaintenanceScope scope = enter_maintenance("idempotency.maintain()");
    TimestampTz started = GetCurrentTimestamp();
    const char *caller = maintenance_caller();
    // Looked up now: the PG_CATCH below reads no catalog (the error may have come from one).
    const char *role = GetUserNameFromId(GetSessionUserId(), false);
    MemoryContext context = CurrentMemoryContext;
    // Only noexcept code inside PG_TRY (src/pg/guard.hpp, rule 3).
    static_assert(noexcept(record_stashed_runs()) &&noexcept(maintain_run(&sink)) &&noexcept(
        record_run(started, caller, "", "", nullptr)));
    // Failed runs kept from earlier calls first, then this run; an error on the way (the
    // run's or the record's) keeps this run's record for the next call, and re-raises.
    PG_TRY();
    {
        (void)record_stashed_runs();
        maintain_run(&sink);
        char *steps = psprintf("[%s]", sink.steps->data);
        record_run(started, caller, sink.incomplete > 0 ? "incomplete" : "ok", steps, nullptr);
    }
    PG_CATCH();
    {
        MemoryContextSwitchTo(context);
        ErrorData *edata = CopyErrorData();
        stash_failed_run(started, caller, role, edata->message);
        PG_RE_THROW();
    }
    PG_END_TRY();
    leave_maintenance(scope);
    SPI_finish();
    return (Datum)0;
}
