// Storage of key records in idempotency.keys, through SPI with saved plans.
// Every function here expects SPI to be connected and holds no C++ objects, so PostgreSQL
// errors may pass through it.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// The columns of idempotency.keys, in the order of the saved statements' parameters.
enum KeyColumn {
    kScope,
    kKey,
    kState,
    kAttempt,
    kRequestHash,
    kStatusCode,
    kResponse,
    kRecoveryPoint,
    kLastError,
    kFirstSeenAt,
    kCompletedAt,
    kLockedUntil,
    kExpiresAt,
    kKeyColumnCount
};

// One record; values are in the memory context that was current when SPI was connected.
struct KeyRecord {
    Datum values[kKeyColumnCount];
    bool nulls[kKeyColumnCount];

    bool is_null(KeyColumn c) const { return nulls[c]; }
    void set(KeyColumn c, Datum value) { values[c] = value, nulls[c] = false; }
    void set_null(KeyColumn c) { values[c] = (Datum)0, nulls[c] = true; }
    void set_or_null(KeyColumn c, Datum value, bool is_null) {
        is_null ? set_null(c) : set(c, value);
    }
    // 'p'rocessing, 'c'ompleted or 'f'ailed; 0 for a record with no state.
    char state() const {
        return nulls[kState] ? '\0' : VARDATA_ANY(DatumGetTextPP(values[kState]))[0];
    }
    void set_state(const char *state) { set(kState, CStringGetTextDatum(state)); }
    int32 attempt() const { return DatumGetInt32(values[kAttempt]); }
    TimestampTz timestamp(KeyColumn c) const { return DatumGetTimestampTz(values[c]); }
};

// Defines idempotency.direct_storage (see key_store_direct.hpp); called from _PG_init.
void define_key_store_settings();

// Storage runs as the owner of idempotency.keys, whoever calls: switch to it and back.
struct SavedUser {
    Oid user;
    int security_context;
};
SavedUser become_key_owner() noexcept;
void restore_user(SavedUser saved) noexcept;

// SPI connected and the owner's identity in force, for the glue's table access; undone by
// close_storage (or by the transaction's abort on error). kWrite: the call may write keys, so
// its reads lock the table as its writes will (one lock per relation instead of two).
enum class Access { kRead, kWrite };
struct Storage {
    SavedUser user;
};
Storage open_storage(Access access = Access::kWrite) noexcept;
void close_storage(Storage storage) noexcept;

// The plan in *slot, prepared and kept for the session on first use.
SPIPlanPtr saved_plan(SPIPlanPtr *slot, const char *sql, int nargs, const Oid *types) noexcept;

// Whether idempotency.keys is a Citus table (its relation a shell, its rows in shards).
bool key_table_is_citus();

// Where idempotency.keys is a Citus table: raises an error unless the scope's shard is on
// this node (the key lock must be taken where the row lives). Nothing to do elsewhere.
void check_key_placement(Datum scope);
// Whether a new claim may stay in memory until complete, fail or commit (pending_claims). On
// Citus its row is written at commit straight into the local shard, which needs the direct
// path (idempotency.direct_storage): SPI would go through Citus, which refuses queries on
// its shards once the delegated call has returned.
bool claims_can_wait_for_commit();

// The live record of (scope, key) (expires_at > now), if any; fills record->values[kScope..].
// Read with a fresh snapshot in READ COMMITTED (never the statement's, which may predate a
// lock wait), or with `snapshot` when given.
bool find_live_key(Datum scope, Datum key, TimestampTz now, KeyRecord *record,
                   Snapshot snapshot = InvalidSnapshot);
void insert_key(const KeyRecord &record) noexcept;
// Rewrites the mutable columns of the row identified by (scope, key, stored_expires_at),
// expires_at included.
void update_key(const KeyRecord &record, TimestampTz stored_expires_at);
// Deletes every row of (scope, key), live or expired; returns how many.
uint64 delete_key(Datum scope, Datum key);

}  // namespace idem::pg
