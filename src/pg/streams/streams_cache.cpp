#include "pg/streams/streams_cache.hpp"
#include "pg/guard.hpp"
#include "pg/shared_memory.hpp"

#include <cstring>

extern "C" {
#include "common/hashfn.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
}

namespace idem::pg {

namespace {

struct Entry {
    StreamKey key;  // first: the hash key
    slock_t mutex;
    core::BlockCursor cursor;
};

int max_streams = 1024;
HTAB *entries = nullptr;
LWLock *table_lock = nullptr;

uint32 hash_key(const void *key, Size) noexcept {
    const StreamKey *k = static_cast<const StreamKey *>(key);
    uint32 h = hash_bytes(reinterpret_cast<const unsigned char *>(k->name), int(k->length));
    return hash_combine(hash_combine(h, k->database), k->table);
}

int match_key(const void *a, const void *b, Size) noexcept {
    const StreamKey *x = static_cast<const StreamKey *>(a);
    const StreamKey *y = static_cast<const StreamKey *>(b);
    return same_stream(*x, *y) ? 0 : 1;
}

void *copy_key(void *dest, const void *src, Size) noexcept {
    const StreamKey *k = static_cast<const StreamKey *>(src);
    std::memcpy(dest, k, offsetof(StreamKey, name) + k->length);
    static_cast<StreamKey *>(dest)->name[k->length] = '\0';
    return dest;
}

Size shmem_size() noexcept {
    return hash_estimate_size(max_streams, sizeof(Entry));
}

void request_shmem() noexcept {
    RequestAddinShmemSpace(shmem_size());
    RequestNamedLWLockTranche("idempotency_streams", 1);
}

// Under AddinShmemInitLock (shared_memory.cpp).
void startup_shmem() noexcept {
    HASHCTL info;
    std::memset(&info, 0, sizeof info);
    info.keysize = sizeof(StreamKey);
    info.entrysize = sizeof(Entry);
    info.hash = pg_callback(hash_key);
    info.match = pg_callback(match_key);
    info.keycopy = pg_callback(copy_key);
    entries = ShmemInitHash("idempotency streams", max_streams, max_streams, &info,
                            HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_KEYCOPY);
    table_lock = &GetNamedLWLockTranche("idempotency_streams")->lock;
}

// Makes room for one entry: any entry will do, since forgetting one is always safe.
void evict_one() {
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, entries);
    Entry *victim = static_cast<Entry *>(hash_seq_search(&scan));
    if (victim == nullptr) return;
    hash_seq_term(&scan);
    StreamKey key = victim->key;
    (void)hash_search(entries, &key, HASH_REMOVE, nullptr);
}

}  // namespace

void register_stream_cache() {
    // A PGC_POSTMASTER setting can only be defined while preloading.
    if (!process_shared_preload_libraries_in_progress) return;
    DefineCustomIntVariable(
        "idempotency.max_streams", "Streams whose current block next_key keeps in shared memory.",
        "Beyond it, a cached stream is forgotten to make room (it loses the rest of its block).",
        &max_streams, 1024, 16, 1000000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    add_shared_memory(request_shmem, startup_shmem);
}

bool stream_cache_available() {
    return entries != nullptr;
}

bool stream_cache_take(const StreamKey &key, int64 *value) {
    bool taken = false;
    LWLockAcquire(table_lock, LW_SHARED);
    Entry *e = static_cast<Entry *>(hash_search(entries, &key, HASH_FIND, nullptr));
    if (e != nullptr) {
        SpinLockAcquire(&e->mutex);
        if (e->cursor.has_value()) {
            *value = e->cursor.take();
            taken = true;
        }
        SpinLockRelease(&e->mutex);
    }
    LWLockRelease(table_lock);
    return taken;
}

int64 stream_cache_reserved(const StreamKey &key) {
    int64 reserved = 0;
    LWLockAcquire(table_lock, LW_SHARED);
    Entry *e = static_cast<Entry *>(hash_search(entries, &key, HASH_FIND, nullptr));
    if (e != nullptr) {
        SpinLockAcquire(&e->mutex);
        reserved = e->cursor.reserved;
        SpinLockRelease(&e->mutex);
    }
    LWLockRelease(table_lock);
    return reserved;
}

int64 stream_cache_start(const StreamKey &key, core::Block block) {
    LWLockAcquire(table_lock, LW_EXCLUSIVE);
    Entry *e = static_cast<Entry *>(hash_search(entries, &key, HASH_FIND, nullptr));
    if (e == nullptr) {
        if (hash_get_num_entries(entries) >= max_streams) evict_one();
        bool found;
        e = static_cast<Entry *>(hash_search(entries, &key, HASH_ENTER_NULL, &found));
        if (e == nullptr) {  // no shared memory left: serve the value, cache nothing
            LWLockRelease(table_lock);
            return block.first;
        }
        SpinLockInit(&e->mutex);
        e->cursor = core::BlockCursor{0, 0};
    }
    // Exclusive table lock: no one else touches the entry now.
    int64 value = e->cursor.start(block);
    LWLockRelease(table_lock);
    return value;
}

void stream_cache_forget(const StreamKey &key) noexcept {
    if (entries == nullptr) return;
    LWLockAcquire(table_lock, LW_EXCLUSIVE);
    (void)hash_search(entries, &key, HASH_REMOVE, nullptr);
    LWLockRelease(table_lock);
}

}  // namespace idem::pg
