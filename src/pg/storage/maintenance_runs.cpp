// idempotency.maintenance_runs: a record of every maintain() run, whoever called it.
//
// A run that returns writes its record itself, in its own transaction, as the table owner,
// just before maintain() returns. A run that ends with an error cannot (its transaction rolls
// back with anything it wrote), so maintain() catches the error on its way out, keeps the
// record in shared memory (this backend's memory without preloading) and re-raises; the next
// maintain() in the database writes it first, and the background worker writes its own failed
// runs at once, in a new transaction after the failed one. C-style: no C++ object lives across
// a PostgreSQL call.

#include "pg/storage/maintenance.hpp"
#include "pg/fault_points.hpp"

#include "pg/guard.hpp"
#include "pg/shared_memory.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
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
        event == XACT_EVENT_PREPARE)
        n_flushed = 0;
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
    int rc = SPI_execute_with_args(kInsertSql, 7, types, args, nulls, false, 1);
    spi_check(rc, SPI_OK_INSERT_RETURNING, "recording the maintenance run");
    bool isnull;
    int64 run =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    Oid trim_types[] = {INT8OID};
    Datum trim_args[] = {Int64GetDatum(run - kKeptRuns)};
    rc = SPI_execute_with_args(kTrimSql, 1, trim_types, trim_args, nullptr, false, 0);
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
                const char *error) {
    if (!log_table_exists()) return;  // a database still at 0.1.0
    IDEM_FAULT_POINT("maintain-record");
    insert_run(started, GetCurrentTimestamp(), caller, GetUserNameFromId(GetSessionUserId(), false),
               result, steps, error);
}

void stash_failed_run(TimestampTz started, const char *caller, const char *error) noexcept {
    PendingRun run;
    run.database = MyDatabaseId;
    run.started = started;
    run.ended = GetCurrentTimestamp();
    strlcpy(run.caller, caller, sizeof run.caller);
    const char *role = GetUserNameFromId(GetSessionUserId(), true);
    strlcpy(run.role, role ? role : "?", sizeof run.role);
    strlcpy(run.error, error ? error : "(no message)", sizeof run.error);
    push_pending(run);
}

int record_stashed_runs() noexcept {
    if (!log_table_exists()) return 0;
    if (!callback_registered) {
        RegisterXactCallback(pg_callback(at_transaction_end), nullptr);
        callback_registered = true;
    }
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
