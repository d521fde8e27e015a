// Written C-style: PostgreSQL calls these entry points directly, and no C++ object with a
// destructor lives in them.

#include "pg/storage/worker.hpp"

#include "pg/postgres_headers.hpp"
#include "pg/settings.hpp"

#include <unistd.h>

extern "C" {
#include "access/xlog.h"
#include "commands/extension.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/varlena.h"

__attribute__((visibility("default"))) void idem_launcher_main(Datum);
__attribute__((visibility("default"))) void idem_maintenance_main(Datum);
}

namespace idem::pg {

namespace {

constexpr const char *kLibrary = "idempotency";

void reload_if_asked() {
    if (!ConfigReloadPending) return;
    ConfigReloadPending = false;
    ProcessConfigFile(PGC_SIGHUP);
    ereport(LOG, (errmsg("idempotency launcher reloaded its settings (interval %d s, "
                         "databases \"%s\")",
                         maintenance_interval_secs(), maintenance_databases())));
}

// Starts the maintenance worker for one database and waits until it has finished. Waits on
// the latch itself (not WaitForBackgroundWorkerShutdown, which swallows latch sets), so a
// SIGHUP is handled meanwhile and a SIGTERM stops the worker too.
void maintain_database(const char *dbname) {
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

void maintenance_pass() {
    char *list = pstrdup(maintenance_databases());
    List *names = NIL;
    if (!SplitGUCList(list, ',', &names)) {
        ereport(WARNING, (errmsg("idempotency: invalid list syntax in idempotency.database")));
        return;
    }
    ListCell *cell;
    foreach (cell, names) {
        if (ShutdownRequestPending) break;
        maintain_database(static_cast<const char *>(lfirst(cell)));
    }
    list_free(names);
    pfree(list);
}

void log_actions(const char *dbname) {
    TupleDesc desc = SPI_tuptable->tupdesc;
    for (uint64 i = 0; i < SPI_processed; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        char *action = SPI_getvalue(row, desc, 1);
        char *partition = SPI_getvalue(row, desc, 2);
        char *rows = SPI_getvalue(row, desc, 3);
        char *detail = SPI_getvalue(row, desc, 4);
        int level = strcmp(action, "failed") == 0 ? WARNING : LOG;
        ereport(level, (errmsg("idempotency: %s partition %s in database \"%s\"%s%s%s", action,
                               partition ? partition : "-", dbname, rows ? " (rows: " : "",
                               rows ? rows : "", rows ? ")" : ""),
                        detail ? errdetail("%s", detail) : 0));
    }
}

void run_maintain(const char *dbname) {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "idempotency: SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
    if (OidIsValid(get_extension_oid("idempotency", true))) {
        const char *sql = "SELECT action, partition, rows, detail FROM idempotency.maintain()";
        pgstat_report_activity(STATE_RUNNING, sql);
        if (SPI_execute(sql, false, 0) != SPI_OK_SELECT)
            elog(ERROR, "idempotency: idempotency.maintain() failed");
        log_actions(dbname);
    } else {
        ereport(DEBUG1,
                (errmsg("idempotency: extension not installed in database \"%s\"", dbname)));
    }
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
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

}  // namespace idem::pg

void idem_launcher_main(Datum) {
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

void idem_maintenance_main(Datum) {
    using namespace idem::pg;
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    char dbname[BGW_EXTRALEN];
    strlcpy(dbname, MyBgworkerEntry->bgw_extra, BGW_EXTRALEN);
    BackgroundWorkerInitializeConnection(dbname, nullptr, 0);
    // Whatever the database or role settings say: a plain search_path (maintain() pins its
    // own too) and READ COMMITTED, which maintain() requires.
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);
    SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_SESSION);
    // Its commits never wait for synchronous standbys while holding the maintenance locks
    // (maintain() does the same for its own transaction; README, "High availability").
    SetConfigOption("synchronous_commit", "local", PGC_SUSET, PGC_S_SESSION);
    // One transaction per pass; an error is logged and the next pass starts a new worker.
    MemoryContext context = CurrentMemoryContext;
    PG_TRY();
    { run_maintain(dbname); }
    PG_CATCH();
    {
        MemoryContextSwitchTo(context);
        HOLD_INTERRUPTS();
        EmitErrorReport();
        FlushErrorState();
        AbortCurrentTransaction();
        RESUME_INTERRUPTS();
    }
    PG_END_TRY();
    proc_exit(0);
}
