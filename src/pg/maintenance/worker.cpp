// Written C-style: PostgreSQL calls these entry points directly, and no C++ object with a
// destructor lives in them.

#include "pg/maintenance/worker.hpp"
#include "pg/fault_points.hpp"
#include "pg/spi.hpp"

#include "pg/guard.hpp"
#include "pg/postgres_headers.hpp"
#include "pg/settings.hpp"
#include "pg/maintenance/maintenance.hpp"

#include <unistd.h>

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "access/xlog.h"
#include "commands/extension.h"
#include "access/heapam.h"
#include "access/tableam.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/varlena.h"

__attribute__((visibility("default"))) void idem_launcher_main(Datum) noexcept;
__attribute__((visibility("default"))) void idem_maintenance_main(Datum) noexcept;
}

namespace idem::pg {

namespace {

constexpr const char *kLibrary = "idempotency";

// Databases of idempotency.database the launcher found missing or unusable: it retries each
// with a back-off (the interval, doubled per failure, at most kMaxBackoffSecs or the interval
// if longer) and logs once per failure streak, so a wrong setting gives one LOG line, not a
// worker's FATAL every interval. A reload forgets them all (the list may have been fixed).
constexpr int kMaxBackoffSecs = 3600;
constexpr int kMaxTracked = 64;
struct DatabaseState {
    char name[NAMEDATALEN];
    int failures;
    TimestampTz retry_at;
};
DatabaseState tracked[kMaxTracked];
bool syntax_reported = false;
int n_tracked = 0;

DatabaseState *state_of(const char *dbname) noexcept {
    for (int i = 0; i < n_tracked; i++)
        if (strcmp(tracked[i].name, dbname) == 0) return &tracked[i];
    DatabaseState *state =
        n_tracked < kMaxTracked ? &tracked[n_tracked++] : &tracked[kMaxTracked - 1];
    strlcpy(state->name, dbname, NAMEDATALEN);
    state->failures = 0;
    state->retry_at = 0;
    return state;
}

// Why the maintenance worker could not connect to dbname, or nullptr. The launcher is
// connected to no database but reads the shared catalog pg_database.
const char *database_unusable(const char *dbname) noexcept {
    const char *why = nullptr;
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    // A heap scan, as the autovacuum launcher lists databases: with no database selected,
    // only the shared catalog's heap can be read (no syscache or index look-up).
    Relation rel = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
    bool found = false;
    HeapTuple tuple;
    while (!found && HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection))) {
        auto *db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
        if (strcmp(NameStr(db->datname), dbname) != 0) continue;
        found = true;
        if (!db->datallowconn)
            why = "it does not allow connections";
        else if (db->datconnlimit < -1)
            why = "it is invalid (an interrupted DROP DATABASE)";
    }
    if (!found) why = "it does not exist";
    table_endscan(scan);
    table_close(rel, AccessShareLock);
    PopActiveSnapshot();
    CommitTransactionCommand();
    return why;
}

// True when the database is due and usable; logs and backs off otherwise.
bool database_ready(const char *dbname) noexcept {
    DatabaseState *state = state_of(dbname);
    TimestampTz now = GetCurrentTimestamp();
    if (state->failures > 0 && now < state->retry_at) return false;
    const char *why = database_unusable(dbname);
    if (why == nullptr) {
        if (state->failures > 0)
            ereport(LOG, (errmsg("idempotency: database \"%s\" can be maintained again", dbname)));
        state->failures = 0;
        return true;
    }
    state->failures++;
    int64 delay = maintenance_interval_secs();
    for (int i = 1; i < state->failures && delay < kMaxBackoffSecs; i++) delay *= 2;
    delay = Max(Min(delay, int64(kMaxBackoffSecs)), int64(maintenance_interval_secs()));
    state->retry_at = TimestampTzPlusMilliseconds(now, delay * 1000);
    ereport(state->failures == 1 ? LOG : DEBUG1,
            (errmsg("idempotency: cannot maintain database \"%s\": %s", dbname, why),
             errdetail("The maintenance worker retries it with a back-off (next in %lld s, at "
                       "most every %d s); this is logged once until it succeeds.",
                       (long long)delay, Max(kMaxBackoffSecs, maintenance_interval_secs())),
             errhint("Set idempotency.database to databases that exist and allow connections, "
                     "or to '' to turn the worker off (e.g. when pg_cron runs maintain()), "
                     "then reload.")));
    return false;
}

void reload_if_asked() noexcept {
    if (!ConfigReloadPending) return;
    ConfigReloadPending = false;
    ProcessConfigFile(PGC_SIGHUP);
    n_tracked = 0;
    syntax_reported = false;
    ereport(LOG, (errmsg("idempotency launcher reloaded its settings (interval %d s, "
                         "databases \"%s\")",
                         maintenance_interval_secs(), maintenance_databases())));
}

// Starts the maintenance worker for one database and waits until it has finished. Waits on
// the latch itself (not WaitForBackgroundWorkerShutdown, which swallows latch sets), so a
// SIGHUP is handled meanwhile and a SIGTERM stops the worker too.
void maintain_database(const char *dbname) noexcept {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof worker);
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
    worker.bgw_restart_time = BGW_NEVER_RESTART;
    strlcpy(worker.bgw_library_name, kLibrary, BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "idem_maintenance_main", BGW_MAXLEN);
    snprintf(worker.bgw_name, BGW_MAXLEN, "idempotency maintenance of %s", dbname);
    strlcpy(worker.bgw_type, "idempotency maintenance", BGW_MAXLEN);
    strlcpy(worker.bgw_extra, dbname, BGW_EXTRALEN);
    worker.bgw_notify_pid = MyProcPid;
    BackgroundWorkerHandle *handle;
    if (!RegisterDynamicBackgroundWorker(&worker, &handle)) {
        ereport(WARNING,
                (errmsg("idempotency: could not start maintenance of database \"%s\"", dbname),
                 errhint("Raise max_worker_processes.")));
        return;
    }
    for (;;) {
        pid_t pid;
        BgwHandleStatus status = GetBackgroundWorkerPid(handle, &pid);
        if (status == BGWH_STOPPED || status == BGWH_POSTMASTER_DIED) break;
        if (ShutdownRequestPending) {
            TerminateBackgroundWorker(handle);
            break;
        }
        reload_if_asked();
        // The postmaster sets our latch when the worker starts or stops (bgw_notify_pid).
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000L,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
    pfree(handle);
}

void maintenance_pass() noexcept {
    char *list = pstrdup(maintenance_databases());
    List *names = NIL;
    if (!SplitGUCList(list, ',', &names)) {
        // Once per reload, like an unusable database.
        if (!syntax_reported)
            ereport(WARNING, (errmsg("idempotency: invalid list syntax in idempotency.database"),
                              errhint("A comma-separated list of database names, or '' to "
                                      "turn the worker off; then reload.")));
        syntax_reported = true;
        return;
    }
    ListCell *cell;
    foreach (cell, names) {
        if (ShutdownRequestPending) break;
        const char *dbname = static_cast<const char *>(lfirst(cell));
        if (database_ready(dbname)) maintain_database(dbname);
    }
    list_free(names);
    pfree(list);
}

void log_actions(const char *dbname) noexcept {
    TupleDesc desc = SPI_tuptable->tupdesc;
    for (uint64 i = 0; i < SPI_processed; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        char *action = SPI_getvalue(row, desc, 1);
        char *partition = SPI_getvalue(row, desc, 2);
        char *rows = SPI_getvalue(row, desc, 3);
        char *detail = SPI_getvalue(row, desc, 4);
        // What changed is logged; a 'deferred' row (pg_partman manages the table, or the
        // rest of a long catch-up comes next run) is routine: DEBUG1.
        int level = strcmp(action, "failed") == 0     ? WARNING
                    : strcmp(action, "deferred") == 0 ? DEBUG1
                                                      : LOG;
        ereport(level, (errmsg("idempotency: %s partition %s in database \"%s\"%s%s%s", action,
                               partition ? partition : "-", dbname, rows ? " (rows: " : "",
                               rows ? rows : "", rows ? ")" : ""),
                        detail ? errdetail("%s", detail) : 0));
    }
}

void run_maintain(const char *dbname) noexcept {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    spi_connect();
    PushActiveSnapshot(GetTransactionSnapshot());
    if (OidIsValid(get_extension_oid("idempotency", true))) {
        const char *sql = "SELECT action, partition, rows, detail FROM idempotency.maintain()";
        pgstat_report_activity(STATE_RUNNING, sql);
        IDEM_FAULT_POINT("worker-pass");
        spi_check(SPI_execute(sql, false, 0), SPI_OK_SELECT, "idempotency.maintain()");
        log_actions(dbname);
        ereport(DEBUG1, (errmsg("idempotency: maintained database \"%s\" (%llu steps)", dbname,
                                (unsigned long long)SPI_processed)));
    } else {
        ereport(DEBUG1,
                (errmsg("idempotency: extension not installed in database \"%s\"", dbname)));
    }
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
}

// In PG_CATCH: logs the error and aborts the transaction.
void log_and_abort(MemoryContext context) noexcept {
    MemoryContextSwitchTo(context);
    HOLD_INTERRUPTS();
    EmitErrorReport();
    FlushErrorState();
    AbortCurrentTransaction();
    RESUME_INTERRUPTS();
}

// After a failed run: writes its record (kept by maintain() on its way out) in a transaction
// of its own, so the worker's failures show in maintenance_runs at once.
void record_failed_run() noexcept {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    spi_connect();
    PushActiveSnapshot(GetTransactionSnapshot());
    if (OidIsValid(get_extension_oid("idempotency", true))) {
        SavedUser user = become_key_owner();
        (void)record_stashed_runs();
        restore_user(user);
    }
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
}

}  // namespace

void register_maintenance_worker() {
    if (!process_shared_preload_libraries_in_progress) return;
    BackgroundWorker worker;
    memset(&worker, 0, sizeof worker);
    // A database connection (to no database): the postmaster notifies only backends it
    // lists, and this also shows the launcher in pg_stat_activity.
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
    worker.bgw_restart_time = 10;
    strlcpy(worker.bgw_library_name, kLibrary, BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "idem_launcher_main", BGW_MAXLEN);
    strlcpy(worker.bgw_name, "idempotency launcher", BGW_MAXLEN);
    strlcpy(worker.bgw_type, "idempotency launcher", BGW_MAXLEN);
    RegisterBackgroundWorker(&worker);
    // On a standby the postmaster starts the launcher only at promotion
    // (BgWorkerStart_RecoveryFinished): nothing runs, nothing fails. Said once per start.
    if (maintenance_databases()[0] != '\0' && access(STANDBY_SIGNAL_FILE, F_OK) == 0)
        ereport(LOG, (errmsg("idempotency: this server is a standby; maintenance of \"%s\" "
                             "starts when it is promoted",
                             maintenance_databases())));
}

// SIGTERM of the maintenance worker: a shutdown request, seen between its steps
// (ShutdownRequestPending), that also cancels the statement in progress (a lock wait, a long
// step) at its next interrupt check, so the pass ends with its transaction rolled back and
// the worker exits cleanly instead of dying with FATAL mid-step.
void request_shutdown(SIGNAL_ARGS) noexcept {
    int saved_errno = errno;
    ShutdownRequestPending = true;
    QueryCancelPending = true;
    InterruptPending = true;
    SetLatch(MyLatch);
    errno = saved_errno;
}

}  // namespace idem::pg

void idem_launcher_main(Datum) noexcept {
    using namespace idem::pg;
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
    ereport(LOG, (errmsg("idempotency launcher started (interval %d s, databases \"%s\")",
                         maintenance_interval_secs(), maintenance_databases())));
    // Deadline-based: a latch set (a SIGHUP, a worker's start or stop) is handled at once
    // and does not start a pass early; the next pass is due an interval after the last one
    // ended (with the interval in force then, reloads included).
    TimestampTz last_end = 0;
    bool ran = false;
    while (!ShutdownRequestPending) {
        reload_if_asked();
        TimestampTz now = GetCurrentTimestamp();
        TimestampTz next =
            ran ? TimestampTzPlusMilliseconds(last_end, int64(maintenance_interval_secs()) * 1000)
                : now;
        if (now >= next) {
            maintenance_pass();
            last_end = GetCurrentTimestamp();
            ran = true;
            continue;
        }
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        TimestampDifferenceMilliseconds(now, next), PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
    ereport(LOG, (errmsg("idempotency launcher shutting down")));
    proc_exit(0);
}

void idem_maintenance_main(Datum) noexcept {
    using namespace idem::pg;
    pqsignal(SIGTERM, pg_callback(request_shutdown));
    BackgroundWorkerUnblockSignals();
    char dbname[BGW_EXTRALEN];
    strlcpy(dbname, MyBgworkerEntry->bgw_extra, BGW_EXTRALEN);
    BackgroundWorkerInitializeConnection(dbname, nullptr, 0);
    // Whatever the database or role settings say: a plain search_path (maintain() pins its
    // own too) and READ COMMITTED, which maintain() requires.
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);
    SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_SESSION);
    // Its commits never wait for synchronous standbys while holding the maintenance locks
    // (maintain() does the same for its own transaction; docs/replication.md, "High availability").
    SetConfigOption("synchronous_commit", "local", PGC_SUSET, PGC_S_SESSION);
    // One transaction per pass; an error is logged and the next pass starts a new worker.
    MemoryContext context = CurrentMemoryContext;
    volatile bool failed = false;
    PG_TRY();
    { run_maintain(dbname); }
    PG_CATCH();
    {
        log_and_abort(context);
        failed = true;
    }
    PG_END_TRY();
    if (ShutdownRequestPending) {
        // The failed run stays stashed: the next maintain() in the database records it.
        ereport(LOG,
                (errmsg("idempotency: maintenance of database \"%s\" stopped on request", dbname)));
    } else if (failed) {
        PG_TRY();
        { record_failed_run(); }
        PG_CATCH();
        { log_and_abort(context); }
        PG_END_TRY();
    }
    proc_exit(0);
}
