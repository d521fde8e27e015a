// Every difference between the PostgreSQL majors the glue builds against (15, 16, 17, 18), in
// one place: the rest of src/pg calls these names and contains no PG_VERSION_NUM test.
// Tested: 15, 17, 18. 16 compiles from the same shims but is not tested (no Debian source
// package to build it from).
#pragma once

#include "pg/postgres_headers.hpp"

extern "C" {
#include "access/genam.h"
#include "common/int.h"
#include "executor/executor.h"
#include "replication/message.h"
#include "storage/proc.h"
#include "utils/relcache.h"
#if PG_VERSION_NUM >= 170000
#include "utils/injection_point.h"
#endif
}

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "idempotency builds against PostgreSQL 15, 16, 17 and 18 only"
#endif

namespace idem::pg::compat {

// 17 moved the backend's local transaction id into PGPROC.vxid.
inline LocalTransactionId local_transaction_id() {
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

// 17 added `flush`: whether to flush the WAL at once (for non-transactional messages only).
inline XLogRecPtr log_logical_message(const char *prefix, const char *message, size_t size,
                                      bool transactional) {
#if PG_VERSION_NUM >= 170000
    return LogLogicalMessage(prefix, message, size, transactional, false);
#else
    return LogLogicalMessage(prefix, message, size, transactional);
#endif
}

// 18 added `deferrable_ok`; before it a deferrable primary key was never returned.
inline Oid primary_key_index(Relation relation) {
#if PG_VERSION_NUM >= 180000
    return RelationGetPrimaryKeyIndex(relation, false);
#else
    return RelationGetPrimaryKeyIndex(relation);
#endif
}

// 18 added the instrumentation argument (EXPLAIN ANALYZE's index counters).
inline IndexScanDesc index_begin_scan(Relation heap, Relation index, Snapshot snapshot, int nkeys,
                                      int norderbys) {
#if PG_VERSION_NUM >= 180000
    return index_beginscan(heap, index, snapshot, nullptr, nkeys, norderbys);
#else
    return index_beginscan(heap, index, snapshot, nkeys, norderbys);
#endif
}

// 16 added `onlySummarizing` (HOT updates that touch only BRIN-like indexes); an insert
// updates every index.
inline List *insert_index_tuples(ResultRelInfo *info, TupleTableSlot *slot, EState *estate) {
#if PG_VERSION_NUM >= 160000
    return ExecInsertIndexTuples(info, slot, estate, false, false, nullptr, NIL, false);
#else
    return ExecInsertIndexTuples(info, slot, estate, false, false, nullptr, NIL);
#endif
}

// Whether this server runs injection points: 17 added them, in builds made with
// --enable-injection-points only (elsewhere INJECTION_POINT compiles to nothing).
#if PG_VERSION_NUM >= 170000 && defined(USE_INJECTION_POINTS)
constexpr bool kInjectionPoints = true;
#else
constexpr bool kInjectionPoints = false;
#endif

// Runs the injection point `name` (the callback attached to it, if any); 18 added an argument
// for the callback.
inline void injection_point(const char *name) noexcept {
#if PG_VERSION_NUM >= 180000
    INJECTION_POINT(name, nullptr);
#elif PG_VERSION_NUM >= 170000
    INJECTION_POINT(name);
#else
    (void)name;
#endif
}

}  // namespace idem::pg::compat
