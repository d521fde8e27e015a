#include "pg/stats.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace idem::pg {

namespace {

// One slot per database; a cluster with more databases than slots shares the last one.
constexpr int kSlots = 64;

struct Slot {
    Oid database;  // InvalidOid: free
    pg_atomic_uint64 counters[kStatCount];
    TimestampTz reset_at;
};

struct SharedStats {
    slock_t lock;  // guards slot allocation and reset_at
    Slot slots[kSlots];
};

SharedStats *shared = nullptr;
shmem_request_hook_type prev_request = nullptr;
shmem_startup_hook_type prev_startup = nullptr;

// Without preloading: this session's counts.
uint64 local_counters[kStatCount];
TimestampTz local_reset_at = 0;
Slot *my_slot = nullptr;

void request_shmem() {
    if (prev_request) prev_request();
    RequestAddinShmemSpace(MAXALIGN(sizeof(SharedStats)));
}

void startup_shmem() {
    if (prev_startup) prev_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found;
    shared = static_cast<SharedStats *>(
        ShmemInitStruct("idempotency stats", sizeof(SharedStats), &found));
    if (!found) {
        SpinLockInit(&shared->lock);
        for (Slot &slot : shared->slots) {
            slot.database = InvalidOid;
            slot.reset_at = 0;
            for (auto &c : slot.counters) pg_atomic_init_u64(&c, 0);
        }
    }
    LWLockRelease(AddinShmemInitLock);
}

Slot *database_slot() {
    if (my_slot != nullptr) return my_slot;
    Slot *found = nullptr;
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&shared->lock);
    for (Slot &slot : shared->slots) {
        if (slot.database == MyDatabaseId || slot.database == InvalidOid) {
            found = &slot;
            break;
        }
    }
    if (found == nullptr) found = &shared->slots[kSlots - 1];
    if (found->database == InvalidOid) found->database = MyDatabaseId;
    // 'since' of a slot: its first use after the server started (or the last reset).
    if (found->reset_at == 0) found->reset_at = now;
    SpinLockRelease(&shared->lock);
    my_slot = found;
    return found;
}

}  // namespace

void register_stats_shmem() {
    if (!process_shared_preload_libraries_in_progress) return;
    prev_request = shmem_request_hook;
    shmem_request_hook = request_shmem;
    prev_startup = shmem_startup_hook;
    shmem_startup_hook = startup_shmem;
}

void count_stat(StatCounter counter) {
    if (shared != nullptr && OidIsValid(MyDatabaseId))
        pg_atomic_fetch_add_u64(&database_slot()->counters[counter], 1);
    else
        local_counters[counter]++;
}

}  // namespace idem::pg

// idempotency.stats (one row): the counters of this database (or session), and since when.
IDEM_FUNCTION(idem_stats) {
    using namespace idem::pg;
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "idempotency.stats_counters must return a row");
    Datum values[kStatCount + 2];
    bool nulls[kStatCount + 2] = {false};
    bool in_shmem = shared != nullptr;
    Slot *slot = in_shmem ? database_slot() : nullptr;
    for (int i = 0; i < kStatCount; i++)
        values[i] = Int64GetDatum(
            int64(in_shmem ? pg_atomic_read_u64(&slot->counters[i]) : local_counters[i]));
    if (!in_shmem && local_reset_at == 0) local_reset_at = MyStartTimestamp;
    TimestampTz reset_at = in_shmem ? slot->reset_at : local_reset_at;
    nulls[kStatCount] = reset_at == 0;
    values[kStatCount] = TimestampTzGetDatum(reset_at);
    values[kStatCount + 1] = BoolGetDatum(in_shmem);
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

IDEM_FUNCTION(idem_stats_reset) {
    using namespace idem::pg;
    TimestampTz now = GetCurrentTimestamp();
    if (shared != nullptr) {
        Slot *slot = database_slot();
        for (auto &c : slot->counters) pg_atomic_write_u64(&c, 0);
        SpinLockAcquire(&shared->lock);
        slot->reset_at = now;
        SpinLockRelease(&shared->lock);
    } else {
        for (auto &c : local_counters) c = 0;
        local_reset_at = now;
    }
    PG_RETURN_VOID();
}
