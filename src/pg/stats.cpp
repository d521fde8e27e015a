#include "pg/stats.hpp"

#include "pg/guard.hpp"
#include "pg/shared_memory.hpp"

extern "C" {
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
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

// Without preloading: this session's counts.
uint64 local_counters[kStatCount];
TimestampTz local_reset_at = 0;
Slot *my_slot = nullptr;

// Counters survive a clean shutdown as pg_stat_statements' do: the postmaster writes them to
// this file when it exits normally and reads (then removes) it when it creates shared memory,
// so a crash, which skips the write, starts from zero, never from stale values.
constexpr const char *kStatsFile = PGSTAT_STAT_PERMANENT_DIRECTORY "/idempotency.stat";
constexpr uint32 kStatsFileMagic = 0x49444D31;  // "IDM1"

struct SavedSlot {
    Oid database;
    TimestampTz reset_at;
    uint64 counters[kStatCount];
};

void save_stats(int code, Datum) noexcept {
    // Not after a crash (or from a process other than the postmaster): shared memory may be
    // corrupt.
    if (code != 0 || shared == nullptr) return;
    char temp[MAXPGPATH];
    snprintf(temp, sizeof temp, "%s.tmp", kStatsFile);
    FILE *file = AllocateFile(temp, PG_BINARY_W);
    if (file == nullptr) {
        ereport(LOG, (errcode_for_file_access(),
                      errmsg("idempotency: could not write file \"%s\": %m", temp)));
        return;
    }
    uint32 header[2] = {kStatsFileMagic, uint32(kStatCount)};
    bool ok = fwrite(header, sizeof header, 1, file) == 1;
    for (Slot &slot : shared->slots) {
        if (!ok) break;
        SavedSlot saved;
        memset(&saved, 0, sizeof saved);
        saved.database = slot.database;
        saved.reset_at = slot.reset_at;
        for (int i = 0; i < kStatCount; i++)
            saved.counters[i] = pg_atomic_read_u64(&slot.counters[i]);
        ok = fwrite(&saved, sizeof saved, 1, file) == 1;
    }
    if (FreeFile(file) != 0) ok = false;
    if (!ok) {
        ereport(LOG, (errcode_for_file_access(),
                      errmsg("idempotency: could not write file \"%s\": %m", temp)));
        unlink(temp);
        return;
    }
    (void)durable_rename(temp, kStatsFile, LOG);
}

// At shared-memory creation: the counters of the last clean shutdown, if any; the file is
// removed whatever it held.
void load_stats() noexcept {
    FILE *file = AllocateFile(kStatsFile, PG_BINARY_R);
    if (file == nullptr) return;  // first start, or after a crash
    uint32 header[2];
    bool ok = fread(header, sizeof header, 1, file) == 1 && header[0] == kStatsFileMagic &&
              header[1] == uint32(kStatCount);
    for (Slot &slot : shared->slots) {
        if (!ok) break;
        SavedSlot saved;
        if (fread(&saved, sizeof saved, 1, file) != 1) break;
        slot.database = saved.database;
        slot.reset_at = saved.reset_at;
        for (int i = 0; i < kStatCount; i++)
            pg_atomic_write_u64(&slot.counters[i], saved.counters[i]);
    }
    FreeFile(file);
    if (!ok) ereport(LOG, (errmsg("idempotency: ignored invalid file \"%s\"", kStatsFile)));
    unlink(kStatsFile);
}

// At shared-memory creation, under AddinShmemInitLock (shared_memory.cpp).
void init_stats(bool found) noexcept {
    if (!found) {
        SpinLockInit(&shared->lock);
        for (Slot &slot : shared->slots) {
            slot.database = InvalidOid;
            slot.reset_at = 0;
            for (auto &c : slot.counters) pg_atomic_init_u64(&c, 0);
        }
    }
    // In the postmaster (also when it re-creates shared memory after a crash).
    // (After a backend crash the postmaster runs its exit callbacks with code 1, which writes
    // nothing, empties their list and creates shared memory again: registered anew here.)
    if (!IsUnderPostmaster) {
        if (!found) load_stats();
        on_shmem_exit(pg_callback(save_stats), (Datum)0);
    }
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
    add_shared_struct("idempotency stats", sizeof(SharedStats), reinterpret_cast<void **>(&shared),
                      init_stats);
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
