// idempotency.maintenance_runs: a record of every maintain() run, whoever called it.
//
// A run that returns writes its record itself, in its own transaction, as the table owner,
// just before maintain() returns. A run that ends with an error cannot (its transaction rolls
// back with anything it wrote), so maintain() catches the error on its way out, keeps the
// record in shared memory (this backend's memory without preloading) and re-raises; the next
// maintain() in the database writes it first, and the background worker writes its own failed
// runs at once, in a new transaction after the failed one. C-style: no C++ object lives across
// a PostgreSQL call.
//
// The history is each server's own: logical replication never writes it (keep_local_rows below,
// docs/replication.md).

#include "pg/maintenance/maintenance.hpp"
#include "pg/fault_points.hpp"

#include "pg/guard.hpp"
#include "pg/shared_memory.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
}

namespace idem::pg {

namespace {

constexpr int kKeptRuns = 100;
constexpr int kPendingRuns = 16;

struct PendingRun {
    Oid database;
    TimestampTz started, ended;
    char caller[16];
    char role[NAMEDATALEN];
    char error[1024];
};

struct PendingRuns {
    slock_t lock;
    int count;
    PendingRun runs[kPendingRuns];
};

PendingRuns *shared_pending = nullptr;
PendingRuns local_pending;  // without preloading: this backend's own failed runs

void init_pending(bool found) noexcept {
    if (!found) {
        SpinLockInit(&shared_pending->lock);
        shared_pending->count = 0;
    }
}

PendingRuns *pending() noexcept {
    return shared_pending != nullptr ? shared_pending : &local_pending;
}
void lock_pending(PendingRuns *p) noexcept {
    if (p == shared_pending) SpinLockAcquire(&p->lock);
}
void unlock_pending(PendingRuns *p) noexcept {
    if (p == shared_pending) SpinLockRelease(&p->lock);
}

// Records taken from the stash by this transaction: put back if it aborts.
PendingRun flushed[kPendingRuns];
int n_flushed = 0;
bool callback_registered = false;
// True while insert_run writes this backend's own history: keep_local_rows lets those rows
// through even in a session_replication_role = replica session. Cleared when the
// (sub)transaction that set it aborts and at transaction end too, in case an error skipped
// the reset: a rolled-back savepoint must not leave it set for the rest of the transaction.
bool writing_own_history = false;
SubTransactionId own_history_subtransaction = InvalidSubTransactionId;

void push_pending(const PendingRun &run) noexcept {
    PendingRuns *p = pending();
    lock_pending(p);
    if (p->count == kPendingRuns) {  // full: the oldest goes
        memmove(&p->runs[0], &p->runs[1], sizeof(PendingRun) * (kPendingRuns - 1));
        p->count--;
    }
    p->runs[p->count++] = run;
    unlock_pending(p);
}

void at_transaction_end(XactEvent event, void *) noexcept {
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
        for (int i = 0; i < n_flushed; i++) push_pending(flushed[i]);
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
        event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
        event == XACT_EVENT_PREPARE) {
        n_flushed = 0;
        writing_own_history = false;
    }
}

void at_subtransaction_end(SubXactEvent event, SubTransactionId subtransaction, SubTransactionId,
                           void *) noexcept {
    if (event == SUBXACT_EVENT_ABORT_SUB && subtransaction == own_history_subtransaction)
        writing_own_history = false;
}

void register_callback() noexcept {
    if (callback_registered) return;
    RegisterXactCallback(pg_callback(at_transaction_end), nullptr);
    RegisterSubXactCallback(pg_callback(at_subtransaction_end), nullptr);
    callback_registered = true;
}

bool log_table_exists() noexcept {
    Oid schema = get_namespace_oid("idempotency", true);
    return OidIsValid(schema) && OidIsValid(get_relname_relid("maintenance_log", schema));
}

constexpr const char *kInsertSql =
    "INSERT INTO idempotency.maintenance_log"
    " (started_at, ended_at, caller, role, result, steps, error)"
    " VALUES ($1, $2, $3, $4, $5, $6::pg_catalog.jsonb, $7) RETURNING run";

constexpr const char *kTrimSql =
    "DELETE FROM idempotency.maintenance_log WHERE run OPERATOR(pg_catalog.<=) $1";

void insert_run(TimestampTz started, TimestampTz ended, const char *caller, const char *role,
                const char *result, const char *steps, const char *error) noexcept {
    Oid types[] = {TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, NAMEOID, TEXTOID, TEXTOID, TEXTOID};
    NameData role_name;
    namestrcpy(&role_name, role);
    Datum args[] = {TimestampTzGetDatum(started),
                    TimestampTzGetDatum(ended),
                    CStringGetTextDatum(caller),
                    NameGetDatum(&role_name),
                    CStringGetTextDatum(result),
                    CStringGetTextDatum(steps),
                    error ? CStringGetTextDatum(error) : (Datum)0};
    char nulls[] = {' ', ' ', ' ', ' ', ' ', ' ', error ? ' ' : 'n'};
    register_callback();
    writing_own_history = true;
    own_history_subtransaction = GetCurrentSubTransactionId();
    IDEM_FAULT_POINT("maintain-record-insert");
    int rc = SPI_execute_with_args(kInsertSql, 7, types, args, nulls, false, 1);
    spi_check(rc, SPI_OK_INSERT_RETURNING, "recording the maintenance run");
    bool isnull;
    int64 run =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    Oid trim_types[] = {INT8OID};
    Datum trim_args[] = {Int64GetDatum(run - kKeptRuns)};
    rc = SPI_execute_with_args(kTrimSql, 1, trim_types, trim_args, nullptr, false, 0);
    writing_own_history = false;
    spi_check(rc, SPI_OK_DELETE, "trimming the maintenance runs");
}

}  // namespace

void register_maintenance_runs_shmem() {
    add_shared_struct("idempotency pending maintenance runs", sizeof(PendingRuns),
                      reinterpret_cast<void **>(&shared_pending), init_pending);
}

const char *maintenance_caller() {
    if (MyBgworkerEntry != nullptr) {
        if (strcmp(MyBgworkerEntry->bgw_library_name, "idempotency") == 0) return "worker";
        // pg_cron with cron.use_background_workers = on
        if (strcmp(MyBgworkerEntry->bgw_library_name, "pg_cron") == 0) return "pg_cron";
    }
    // pg_cron's libpq connections set fallback_application_name = 'pg_cron'.
    if (application_name != nullptr && strcmp(application_name, "pg_cron") == 0) return "pg_cron";
    return "sql";
}

void append_step_json(StringInfo steps, const char *action, const char *partition,
                      const char *range_start, const char *range_end, int64 rows,
                      const char *detail) {
    appendStringInfoString(steps, steps->len > 1 ? ", {\"action\": " : "{\"action\": ");
    escape_json(steps, action);
    appendStringInfoString(steps, ", \"partition\": ");
    partition ? escape_json(steps, partition) : appendStringInfoString(steps, "null");
    appendStringInfoString(steps, ", \"range_start\": ");
    range_start ? escape_json(steps, range_start) : appendStringInfoString(steps, "null");
    appendStringInfoString(steps, ", \"range_end\": ");
    range_end ? escape_json(steps, range_end) : appendStringInfoString(steps, "null");
    if (rows >= 0)
        appendStringInfo(steps, ", \"rows\": %lld", (long long)rows);
    else
        appendStringInfoString(steps, ", \"rows\": null");
    appendStringInfoString(steps, ", \"detail\": ");
    detail ? escape_json(steps, detail) : appendStringInfoString(steps, "null");
    appendStringInfoChar(steps, '}');
}

void record_run(TimestampTz started, const char *caller, const char *result, const char *steps,
                const char *error) noexcept {
    if (!log_table_exists()) return;  // a database still at 0.1.0
    IDEM_FAULT_POINT("maintain-record");
    insert_run(started, GetCurrentTimestamp(), caller, GetUserNameFromId(GetSessionUserId(), false),
               result, steps, error);
}

void stash_failed_run(TimestampTz started, const char *caller, const char *role,
                      const char *error) noexcept {
    PendingRun run;
    run.database = MyDatabaseId;
    run.started = started;
    run.ended = GetCurrentTimestamp();
    strlcpy(run.caller, caller, sizeof run.caller);
    strlcpy(run.role, role ? role : "?", sizeof run.role);
    strlcpy(run.error, error ? error : "(no message)", sizeof run.error);
    push_pending(run);
}

int record_stashed_runs() noexcept {
    if (!log_table_exists()) return 0;
    register_callback();
    PendingRun *mine = flushed + n_flushed;
    int n = 0;
    PendingRuns *p = pending();
    lock_pending(p);
    int kept = 0;
    for (int i = 0; i < p->count; i++) {
        if (p->runs[i].database == MyDatabaseId && n_flushed + n < kPendingRuns)
            mine[n++] = p->runs[i];
        else
            p->runs[kept++] = p->runs[i];
    }
    p->count = kept;
    n_flushed += n;
    unlock_pending(p);
    // If this transaction rolls back, these records go back to the stash (at_transaction_end).
    for (int i = 0; i < n; i++)
        insert_run(mine[i].started, mine[i].ended, mine[i].caller, mine[i].role, "failed", "[]",
                   mine[i].error);
    return n;
}

}  // namespace idem::pg

// idempotency.keep_local_rows(): a BEFORE INSERT OR UPDATE OR DELETE row trigger of
// idempotency.maintenance_log, enabled as a REPLICA trigger: it fires only where
// session_replication_role = replica, that is in logical replication's apply and table-sync
// workers (and other tools that write as a replica). There it skips the row (returns NULL)
// unless this backend's own maintain() is writing its history: a publisher's runs and trims
// never reach a subscriber's history, whose run numbers are its own. Not an IDEM_FUNCTION: it
// reads nothing, so it skips the schema version check, which would stop a subscription while
// the library and the SQL objects are of different versions.
extern "C" {
PG_FUNCTION_INFO_V1(idem_keep_local_rows);
}
static Datum keep_local_rows(FunctionCallInfo fcinfo) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("idempotency.keep_local_rows() must be called as a trigger")));
    auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
    if (!TRIGGER_FIRED_BEFORE(trigger->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigger->tg_event))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("idempotency.keep_local_rows() must be a BEFORE ... FOR EACH ROW "
                               "trigger")));
    if (!idem::pg::writing_own_history) return PointerGetDatum(nullptr);
    return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(trigger->tg_event) ? trigger->tg_newtuple
                                                                      : trigger->tg_trigtuple);
}
extern "C" Datum idem_keep_local_rows(PG_FUNCTION_ARGS) {
    return idem::pg::guarded([fcinfo]() { return keep_local_rows(fcinfo); });
}
