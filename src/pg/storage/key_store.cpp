#include "pg/storage/key_store.hpp"
#include "pg/spi.hpp"
#include "pg/guard.hpp"
#include "pg/citus/citus.hpp"
#include "pg/storage/key_store_direct.hpp"

extern "C" {
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "catalog/pg_class.h"
}

namespace idem::pg {

namespace {

// Every object is schema-qualified, operators included: a caller's search_path cannot
// redirect these statements.
constexpr const char *kFindSql =
    "SELECT scope, key, state, attempt, request_hash, status_code, response, recovery_point,"
    " last_error, first_seen_at, completed_at, locked_until, expires_at"
    " FROM idempotency.keys"
    " WHERE scope OPERATOR(pg_catalog.=) $1 AND key OPERATOR(pg_catalog.=) $2"
    " AND expires_at OPERATOR(pg_catalog.>) $3 LIMIT 1";

constexpr const char *kInsertSql =
    "INSERT INTO idempotency.keys (scope, key, state, attempt, request_hash, status_code,"
    " response, recovery_point, last_error, first_seen_at, completed_at, locked_until,"
    " expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

constexpr const char *kUpdateSql =
    "UPDATE idempotency.keys SET state = $3, attempt = $4, request_hash = $5,"
    " status_code = $6, response = $7, recovery_point = $8, last_error = $9,"
    " completed_at = $11, locked_until = $12, expires_at = $13"
    " WHERE scope OPERATOR(pg_catalog.=) $1 AND key OPERATOR(pg_catalog.=) $2"
    " AND expires_at OPERATOR(pg_catalog.=) $14";

constexpr const char *kDeleteSql =
    "DELETE FROM idempotency.keys"
    " WHERE scope OPERATOR(pg_catalog.=) $1 AND key OPERATOR(pg_catalog.=) $2";

const Oid kRecordTypes[kKeyColumnCount] = {
    TEXTOID, TEXTOID,  TEXTOID,        INT4OID,        BYTEAOID,       INT4OID,        JSONBOID,
    TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
};

SPIPlanPtr find_plan, insert_plan, update_plan, delete_plan;

char null_flags(const bool *nulls, int i) noexcept {
    return nulls[i] ? 'n' : ' ';
}

void execute(SPIPlanPtr plan, const Datum *values, const bool *nulls, int nargs, bool read_only,
             int expected) noexcept {
    char flags[kKeyColumnCount + 1];
    for (int i = 0; i < nargs; i++) flags[i] = null_flags(nulls, i);
    int rc = SPI_execute_plan(plan, const_cast<Datum *>(values), flags, read_only, 0);
    spi_check(rc, expected, "SPI_execute_plan");
}

// idempotency.keys, its owner and whether Citus manages it, looked up once and again after
// any change to pg_class or pg_namespace (a drop, rename or change of owner) or to the
// table's relcache entry (Citus invalidates it when it distributes the table).
struct KeyTable {
    Oid table = InvalidOid;
    Oid owner = InvalidOid;
    bool citus = false;  // a Citus table: its relation is a shell, rows live in shards
} key_table;

void forget_key_table(Datum, int, uint32) noexcept {
    key_table = KeyTable{};
}

void forget_key_table_relation(Datum, Oid relation) noexcept {
    if (!OidIsValid(relation) || relation == key_table.table) key_table = KeyTable{};
    forget_key_shards(relation);
}

const KeyTable &current_key_table() noexcept {
    static bool registered = false;
    if (!registered) {
        CacheRegisterSyscacheCallback(RELOID, pg_callback(forget_key_table), (Datum)0);
        CacheRegisterSyscacheCallback(NAMESPACEOID, pg_callback(forget_key_table), (Datum)0);
        CacheRegisterRelcacheCallback(pg_callback(forget_key_table_relation), (Datum)0);
        registered = true;
    }
    if (!OidIsValid(key_table.table)) {
        Oid schema = get_namespace_oid("idempotency", false);
        Oid table = get_relname_relid("keys", schema);
        HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(table));
        if (!HeapTupleIsValid(tuple)) elog(ERROR, "idempotency: table idempotency.keys is missing");
        Oid owner = ((Form_pg_class)GETSTRUCT(tuple))->relowner;
        ReleaseSysCache(tuple);
        bool citus = is_citus_table(table);
        key_table.table = table;
        key_table.owner = owner;
        key_table.citus = citus;
    }
    return key_table;
}

Oid key_table_owner() noexcept {
    return current_key_table().owner;
}

bool direct_storage = true;  // idempotency.direct_storage

// The relation the direct path reads and writes for `scope`: the table itself, or on Citus
// the local shard that holds the scope (never the shell); InvalidOid: go through SPI.
Oid direct_relation(Datum scope) noexcept {
    const KeyTable &keys = current_key_table();
    if (!direct_storage) return InvalidOid;
    return keys.citus ? local_key_shard(keys.table, scope) : keys.table;
}

LOCKMODE read_lock = AccessShareLock;  // set by open_storage

}  // namespace

void define_key_store_settings() {
    DefineCustomBoolVariable(
        "idempotency.direct_storage",
        "Reads and writes key records without SPI where the table's shape allows it.",
        "Off: every access goes through SPI, as a reference for tests and benchmarks.",
        &direct_storage, true, PGC_SUSET, GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
}

SavedUser become_key_owner() noexcept {
    SavedUser saved;
    GetUserIdAndSecContext(&saved.user, &saved.security_context);
    SetUserIdAndSecContext(key_table_owner(),
                           saved.security_context | SECURITY_LOCAL_USERID_CHANGE);
    return saved;
}

void restore_user(SavedUser saved) noexcept {
    SetUserIdAndSecContext(saved.user, saved.security_context);
}

Storage open_storage(Access access) noexcept {
    spi_connect();
    read_lock = access == Access::kWrite ? RowExclusiveLock : AccessShareLock;
    return Storage{become_key_owner()};
}

void close_storage(Storage storage) noexcept {
    restore_user(storage.user);
    SPI_finish();
}

SPIPlanPtr saved_plan(SPIPlanPtr *slot, const char *sql, int nargs, const Oid *types) noexcept {
    if (*slot == nullptr) {
        SPIPlanPtr plan = SPI_prepare(sql, nargs, const_cast<Oid *>(types));
        if (plan == nullptr)
            elog(ERROR, "idempotency: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
        SPI_keepplan(plan);
        *slot = plan;
    }
    return *slot;
}

bool key_table_is_citus() {
    return current_key_table().citus;
}

void check_key_placement(Datum scope) {
    const KeyTable &keys = current_key_table();
    if (keys.citus) check_shard_is_local(keys.table, scope);
}

bool claims_can_wait_for_commit() {
    return !current_key_table().citus || direct_storage;
}

bool find_live_key(Datum scope, Datum key, TimestampTz now, KeyRecord *record, Snapshot snapshot) {
    Oid relation = direct_relation(scope);
    Direct direct = OidIsValid(relation) ? find_live_key_direct(relation, read_lock, scope, key,
                                                                now, record, snapshot)
                                         : Direct::kUnsupported;
    if (direct != Direct::kUnsupported) return direct == Direct::kFound;
    const Oid types[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
    Datum args[] = {scope, key, TimestampTzGetDatum(now)};
    char flags[] = "   ";
    SPIPlanPtr plan = saved_plan(&find_plan, kFindSql, 3, types);
    int rc = snapshot == InvalidSnapshot ? SPI_execute_plan(plan, args, flags, false, 1)
                                         : SPI_execute_snapshot(plan, args, flags, snapshot,
                                                                InvalidSnapshot, false, false, 1);
    spi_check(rc, SPI_OK_SELECT, "SPI_execute_plan");
    if (SPI_processed == 0) return false;
    HeapTuple tuple = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    for (int i = 0; i < kKeyColumnCount; i++) {
        Form_pg_attribute attr = TupleDescAttr(desc, i);
        Datum value = SPI_getbinval(tuple, desc, i + 1, &record->nulls[i]);
        record->values[i] =
            record->nulls[i] ? (Datum)0 : SPI_datumTransfer(value, attr->attbyval, attr->attlen);
    }
    return true;
}

void insert_key(const KeyRecord &record) noexcept {
    Oid relation = direct_relation(record.values[kScope]);
    if (OidIsValid(relation) && insert_key_direct(relation, record) == Direct::kFound) return;
    execute(saved_plan(&insert_plan, kInsertSql, kKeyColumnCount, kRecordTypes), record.values,
            record.nulls, kKeyColumnCount, false, SPI_OK_INSERT);
}

void update_key(const KeyRecord &record, TimestampTz stored_expires_at) {
    // The record's columns, then the expires_at that identifies the stored row. A later
    // expires_at may move the row to a later partition (PostgreSQL moves it, Citus too inside
    // the scope's shard).
    Oid types[kKeyColumnCount + 1];
    Datum values[kKeyColumnCount + 1];
    bool nulls[kKeyColumnCount + 1];
    for (int i = 0; i < kKeyColumnCount; i++) {
        types[i] = kRecordTypes[i];
        values[i] = record.values[i];
        nulls[i] = record.nulls[i];
    }
    types[kKeyColumnCount] = TIMESTAMPTZOID;
    values[kKeyColumnCount] = TimestampTzGetDatum(stored_expires_at);
    nulls[kKeyColumnCount] = false;
    execute(saved_plan(&update_plan, kUpdateSql, kKeyColumnCount + 1, types), values, nulls,
            kKeyColumnCount + 1, false, SPI_OK_UPDATE);
    if (SPI_processed != 1) elog(ERROR, "idempotency: key record vanished during update");
}

uint64 delete_key(Datum scope, Datum key) {
    const Oid types[] = {TEXTOID, TEXTOID};
    Datum args[] = {scope, key};
    bool nulls[] = {false, false};
    execute(saved_plan(&delete_plan, kDeleteSql, 2, types), args, nulls, 2, false, SPI_OK_DELETE);
    return SPI_processed;
}

}  // namespace idem::pg
