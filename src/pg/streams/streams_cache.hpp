// The shared-memory cache of next_key: per stream, the block being handed out.
//
// An entry is only a cache of values whose bound is already durable in idempotency.streams:
// forgetting one (eviction, a dropped stream) costs the rest of its block, never a repeat.
// Lookups run under a shared lock of the whole table, each entry's values under its own
// spinlock; refills are serialised by the caller (a heavyweight lock per stream).
#pragma once

#include "pg/postgres_headers.hpp"

#include "core/block_allocator.hpp"
#include "core/key_rules.hpp"

#include <cstring>

namespace idem::pg {

struct StreamKey {
    Oid database;
    Oid table;  // idempotency.streams: a re-created extension starts afresh
    uint32 length;
    char name[core::kMaxNameBytes + 1];
};

inline bool same_stream(const StreamKey &a, const StreamKey &b) {
    return a.database == b.database && a.table == b.table && a.length == b.length &&
           std::memcmp(a.name, b.name, a.length) == 0;
}

// Defines idempotency.max_streams and, when preloading, requests the shared memory.
void register_stream_cache();

// False when the library was not preloaded (no shared memory).
bool stream_cache_available();

// Takes the next value of the stream's cached block; false if it has none.
bool stream_cache_take(const StreamKey &key, int64 *value);

// The cached bound of the stream (0 if not cached).
int64 stream_cache_reserved(const StreamKey &key);

// Installs a block whose bound is durable (creating the entry, evicting another one if the
// cache is full) and takes its first value.
int64 stream_cache_start(const StreamKey &key, core::Block block);

// Drops the stream's entry, if any.
void stream_cache_forget(const StreamKey &key) noexcept;

}  // namespace idem::pg
