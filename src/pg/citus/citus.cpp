// Citus awareness (see citus.hpp) and idempotency.distribute().

#include "pg/citus/citus.hpp"

#include "pg/compat.hpp"
#include "pg/spi.hpp"

#include "pg/guard.hpp"
#include "pg/sql_errors.hpp"
#include "pg/storage/key_store.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_namespace_d.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

namespace idem::pg {

namespace {

// The first row of Citus catalog `name` (in pg_catalog) whose first column equals `first`
// (or any row when first is InvalidOid), as attribute `column` (int4 or oid); false when the
// catalog or the row does not exist.
bool citus_catalog_value(const char *name, Oid first, int column, Datum *value) noexcept {
    Oid catalog = get_relname_relid(name, PG_CATALOG_NAMESPACE);
    if (!OidIsValid(catalog)) return false;
    Relation rel = table_open(catalog, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(first));
    SysScanDesc scan =
        systable_beginscan(rel, InvalidOid, false, nullptr, OidIsValid(first) ? 1 : 0, &key);
    HeapTuple tuple = systable_getnext(scan);
    bool found = HeapTupleIsValid(tuple);
    if (found) {
        bool isnull;
        *value = heap_getattr(tuple, column, RelationGetDescr(rel), &isnull);
        found = !isnull;
    }
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
    return found;
}

// Citus's get_shard_id_for_distribution_column(regclass, "any"), called through fmgr
// with an expression that gives its second argument the type text (it reads the type from
// there). Looked up again after any change to pg_proc (Citus dropped and created again).
// The FmgrInfo and its expression live in a memory context of their own under
// TopMemoryContext, reset before each lookup: pg_proc changes often (every CREATE FUNCTION),
// and each lookup would otherwise leave the last one's allocations behind for the session.
struct ShardFunction {
    bool ready = false;
    MemoryContext memory = nullptr;
    FmgrInfo call;
} shard_function;

void forget_shard_function(Datum, int, uint32) noexcept {
    shard_function.ready = false;
}

int64 shard_of(Oid table, Datum scope) noexcept {
    static bool registered = false;
    if (!registered) {
        CacheRegisterSyscacheCallback(PROCOID, pg_callback(forget_shard_function), (Datum)0);
        registered = true;
    }
    if (!shard_function.ready) {
        const Oid types[] = {REGCLASSOID, ANYOID};
        List *name = list_make2(makeString(pstrdup("pg_catalog")),
                                makeString(pstrdup("get_shard_id_for_distribution_column")));
        Oid function = LookupFuncName(name, 2, types, false);
        if (shard_function.memory == nullptr)
            shard_function.memory = AllocSetContextCreate(
                TopMemoryContext, "idempotency Citus shard lookup", ALLOCSET_SMALL_SIZES);
        else
            MemoryContextReset(shard_function.memory);
        MemoryContext old = MemoryContextSwitchTo(shard_function.memory);
        fmgr_info_cxt(function, &shard_function.call, shard_function.memory);
        List *args = list_make2(makeNullConst(REGCLASSOID, -1, InvalidOid),
                                makeNullConst(TEXTOID, -1, DEFAULT_COLLATION_OID));
        fmgr_info_set_expr(
            reinterpret_cast<Node *>(makeFuncExpr(function, INT8OID, args, InvalidOid, InvalidOid,
                                                  COERCE_EXPLICIT_CALL)),
            &shard_function.call);
        MemoryContextSwitchTo(old);
        shard_function.ready = true;
    }
    return DatumGetInt64(FunctionCall2(&shard_function.call, ObjectIdGetDatum(table), scope));
}

// This node's group id (pg_dist_local_group), read again after any change to pg_class
// (citus_add_node sets it on the worker along with Citus's metadata, which creates the
// shells). A syscache callback: PostgreSQL has only 10 relcache callback slots, and Citus
// takes most of them.
struct LocalGroup {
    bool known = false;
    bool found = false;
    Datum group = 0;
} local_group;

void forget_placements() noexcept;

void forget_local_group(Datum, int, uint32) noexcept {
    local_group.known = false;
    forget_placements();  // they are relative to the group
}

bool local_group_id(Datum *group) noexcept {
    static bool registered = false;
    if (!registered) {
        CacheRegisterSyscacheCallback(RELOID, pg_callback(forget_local_group), (Datum)0);
        registered = true;
    }
    if (!local_group.known) {
        local_group.found =
            citus_catalog_value("pg_dist_local_group", InvalidOid, 1, &local_group.group);
        local_group.known = true;
    }
    *group = local_group.group;
    return local_group.found;
}

// Whether pg_dist_placement places shard `shard` in this node's group (a catalog scan).
bool placed_here(int64 shard) noexcept {
    Datum group;
    if (!local_group_id(&group)) return false;
    Oid catalog = get_relname_relid("pg_dist_placement", PG_CATALOG_NAMESPACE);
    Oid index = get_relname_relid("pg_dist_placement_shardid_index", PG_CATALOG_NAMESPACE);
    if (!OidIsValid(catalog) || !OidIsValid(index)) return false;
    constexpr int kShardColumn = 2, kGroupColumn = 5;  // pg_dist_placement.shardid, .groupid
    Relation rel = table_open(catalog, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, kShardColumn, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(shard));
    SysScanDesc scan = systable_beginscan(rel, index, true, nullptr, 1, &key);
    bool here = false;
    for (HeapTuple tuple; !here && HeapTupleIsValid(tuple = systable_getnext(scan));) {
        bool isnull;
        Datum placed = heap_getattr(tuple, kGroupColumn, RelationGetDescr(rel), &isnull);
        here = !isnull && DatumGetInt32(placed) == DatumGetInt32(group);
    }
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
    return here;
}

// The shards of the key table looked up in this backend: shard id and the local relation of
// that shard, or InvalidOid when it is placed on another node. What pg_dist_placement said,
// until an invalidation that may change it: one of the key table's relcache entry (Citus's
// triggers on pg_dist_placement and pg_dist_shard send it for every placement or shard of
// the table), of a remembered shard relation or of all relations (forget_key_shards, called
// by key_store.cpp's relcache callback: the few relcache callback slots are shared with
// Citus), or a change of this node's group. local_key_shard accepts pending invalidation
// messages before it reads this, as Citus's own metadata cache does before it routes a
// query, so a placement change committed before the call is always seen.
struct Placement {
    int64 shard;
    Oid relation;
    LOCKTAG metadata_lock;  // Citus's lock on the shard's placement metadata (when local)
};
constexpr int kPlacementSlots = 64;  // Citus's default is 32 shards per table
struct Placements {
    Oid table = InvalidOid;
    int count = 0;
    Placement entries[kPlacementSlots];
} placements;

void forget_placements() noexcept {
    placements.count = 0;
}

// The index of shard `shard` among the shards of `table` in Citus's order (its metadata cache
// sorts a hash-distributed table's shards by the low end of their hash range), from
// pg_dist_shard; -1 when the shard is not there.
int shard_index(Oid table, int64 shard) noexcept {
    Oid catalog = get_relname_relid("pg_dist_shard", PG_CATALOG_NAMESPACE);
    Oid index = get_relname_relid("pg_dist_shard_logical_relid_index", PG_CATALOG_NAMESPACE);
    if (!OidIsValid(catalog) || !OidIsValid(index)) return -1;
    constexpr int kTableColumn = 1, kShardColumn = 2, kMinColumn = 5;  // pg_dist_shard's
    Relation rel = table_open(catalog, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, kTableColumn, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(table));
    SysScanDesc scan = systable_beginscan(rel, index, true, nullptr, 1, &key);
    int32 mins[kPlacementSlots * 4];
    int n = 0;
    bool found = false;
    int32 own_min = 0;
    for (HeapTuple tuple; HeapTupleIsValid(tuple = systable_getnext(scan));) {
        bool id_null, min_null;
        Datum id = heap_getattr(tuple, kShardColumn, RelationGetDescr(rel), &id_null);
        Datum min = heap_getattr(tuple, kMinColumn, RelationGetDescr(rel), &min_null);
        if (id_null || min_null) continue;
        int32 low = pg_strtoint32(TextDatumGetCString(min));
        if (DatumGetInt64(id) == shard) {
            found = true;
            own_min = low;
        } else if (n < int(lengthof(mins))) {
            mins[n++] = low;
        }
    }
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
    if (!found) return -1;
    int position = 0;
    for (int i = 0; i < n; i++)
        if (mins[i] < own_min) position++;
    return position;
}

// The lock Citus takes on the placement metadata of shard `shard` of `table` (Citus 12.1,
// resource_lock.h, LockShardDistributionMetadata; see UsedShards below). For a table in a
// co-location group it is the group's lock for the shard's index, shared by the co-located
// shards.
void citus_metadata_lock_tag(Oid table, int64 shard, LOCKTAG *tag) noexcept {
    constexpr uint16 kShardMetadata = 4, kColocatedShardsMetadata = 8;  // Citus's lock classes
    Datum colocation;
    if (citus_catalog_value("pg_dist_partition", table, 4, &colocation) &&
        DatumGetUInt32(colocation) != 0) {
        int index = shard_index(table, shard);
        if (index < 0)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("shard " INT64_FORMAT " of idempotency.keys is not in Citus's "
                                   "pg_dist_shard",
                                   shard)));
        SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, uint32(index), DatumGetUInt32(colocation),
                             kColocatedShardsMetadata);
    } else {
        SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, uint32(uint64(shard) >> 32), uint32(shard),
                             kShardMetadata);
    }
}

// Shard `shard` of `table` as this node has it (relation InvalidOid: on another node), from
// the cache or from the catalogs.
const Placement &placement_of(Oid table, int64 shard) noexcept {
    if (placements.table != table) placements = Placements{table, 0, {}};
    for (int i = 0; i < placements.count; i++)
        if (placements.entries[i].shard == shard) return placements.entries[i];
    Oid relation = InvalidOid;
    LOCKTAG tag{};
    if (placed_here(shard)) {
        // Citus names a shard after its table and shard id, in the table's schema. The table
        // may have been dropped since the caller looked it up (no lock is held on it yet).
        const char *table_name = get_rel_name(table);
        if (table_name == nullptr)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                            errmsg("idempotency.keys was dropped while a key call looked up its "
                                   "shard"),
                            errdetail("Relation %u no longer exists.", table)));
        char name[NAMEDATALEN];
        snprintf(name, sizeof(name), "%s_" INT64_FORMAT, table_name, shard);
        relation = get_relname_relid(name, get_rel_namespace(table));
        if (OidIsValid(relation)) citus_metadata_lock_tag(table, shard, &tag);
    }
    if (placements.count == kPlacementSlots) placements.count = 0;
    placements.entries[placements.count] = Placement{shard, relation, tag};
    return placements.entries[placements.count++];
}

// The last lookup, kept for the rest of the statement that made it (a call looks its scope
// up several times; a shard move commits between statements, never within one).
struct LastShard {
    LocalTransactionId transaction = InvalidLocalTransactionId;
    TimestampTz statement = 0;
    char scope[64];
    size_t scope_length = 0;
    Oid relation = InvalidOid;
} last_shard;

bool is_last_lookup(const text *scope) noexcept {
    size_t length = VARSIZE_ANY_EXHDR(scope);
    return last_shard.transaction == compat::local_transaction_id() &&
           last_shard.statement == GetCurrentStatementStartTimestamp() &&
           last_shard.scope_length == length && length <= sizeof(last_shard.scope) &&
           memcmp(last_shard.scope, VARDATA_ANY(scope), length) == 0;
}

// The shards this transaction reads and writes directly, outside Citus's executor, checked at
// its commit. Citus's executor holds its lock on a shard's placement metadata (ShareLock) from
// a write until the commit; a shard move takes it exclusively on every node before its last
// catch-up and the switch of the placement, so that no write commits into the old placement
// after that point. Held from the call on, here it would make a deadlock across nodes: the
// call's transaction holds it on the worker and waits on the coordinator (its next statement,
// for Citus's lock there), where the move holds it and waits for the worker's. So it is
// taken at the commit (or PREPARE), when the transaction waits for nothing else: a commit
// before the move's lock precedes its last catch-up and is carried over; a commit after the
// switch finds the placement gone and fails with 40001 (retry: the call then runs where the
// shard is). Past kUsedShards shards in one transaction, the lock is taken at the call.
struct UsedShard {
    Oid table;
    int64 shard;
    Oid relation;
    LOCKTAG metadata_lock;
};
constexpr int kUsedShards = 16;
struct UsedShards {
    LocalTransactionId transaction = InvalidLocalTransactionId;
    int count = 0;
    UsedShard entries[kUsedShards];
} used_shards;

void check_shards_at_commit(XactEvent event, void *) noexcept {
    if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
        event == XACT_EVENT_PRE_PREPARE) {
        if (used_shards.transaction != compat::local_transaction_id()) return;
        for (int i = 0; i < used_shards.count; i++)
            (void)LockAcquire(&used_shards.entries[i].metadata_lock, ShareLock, false, false);
        AcceptInvalidationMessages();  // a move that committed while this waited
        for (int i = 0; i < used_shards.count; i++) {
            const UsedShard &used = used_shards.entries[i];
            if (placement_of(used.table, used.shard).relation == used.relation) continue;
            used_shards.count = 0;
            ereport(ERROR,
                    (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                     errmsg("a shard of idempotency.keys moved to another node while this "
                            "transaction used it"),
                     errdetail("Shard " INT64_FORMAT " was moved by Citus before this transaction "
                               "committed; its key calls are rolled back.",
                               used.shard),
                     errhint("Retry the transaction: its key calls then run on the shard's new "
                             "node.")));
        }
        return;
    }
    used_shards.count = 0;  // the transaction ended (commit, abort or prepare)
}

void check_at_commit(Oid table, const Placement &placement) noexcept {
    static bool registered = false;
    if (!registered) {
        RegisterXactCallback(pg_callback(check_shards_at_commit), nullptr);
        registered = true;
    }
    if (used_shards.transaction != compat::local_transaction_id()) {
        used_shards.transaction = compat::local_transaction_id();
        used_shards.count = 0;
    }
    for (int i = 0; i < used_shards.count; i++)
        if (used_shards.entries[i].shard == placement.shard &&
            used_shards.entries[i].table == table)
            return;
    if (used_shards.count == kUsedShards) {
        LOCKTAG tag = placement.metadata_lock;
        (void)LockAcquire(&tag, ShareLock, false, false);
        return;
    }
    used_shards.entries[used_shards.count++] =
        UsedShard{table, placement.shard, placement.relation, placement.metadata_lock};
}

}  // namespace

bool is_citus_table(Oid relation) noexcept {
    Datum value;
    return citus_catalog_value("pg_dist_partition", relation, 1, &value);
}

bool is_citus_worker() {
    Datum group;
    return citus_catalog_value("pg_dist_local_group", InvalidOid, 1, &group) &&
           DatumGetInt32(group) != 0;
}

Oid local_key_shard(Oid table, Datum scope) noexcept {
    const text *scope_text = DatumGetTextPP(scope);
    if (is_last_lookup(scope_text)) return last_shard.relation;
    AcceptInvalidationMessages();  // placement changes committed by now
    int64 shard = shard_of(table, scope);
    const Placement &placement = placement_of(table, shard);
    Oid relation = placement.relation;
    if (OidIsValid(relation)) check_at_commit(table, placement);
    size_t length = VARSIZE_ANY_EXHDR(scope_text);
    if (length <= sizeof(last_shard.scope)) {
        last_shard.transaction = compat::local_transaction_id();
        last_shard.statement = GetCurrentStatementStartTimestamp();
        memcpy(last_shard.scope, VARDATA_ANY(scope_text), length);
        last_shard.scope_length = length;
        last_shard.relation = relation;
    }
    return relation;
}

void forget_key_shards(Oid relation) noexcept {
    bool known = !OidIsValid(relation) || relation == placements.table;
    for (int i = 0; i < placements.count && !known; i++)
        known = placements.entries[i].relation == relation;
    if (known) {
        forget_placements();
        last_shard.transaction = InvalidLocalTransactionId;
    }
}

void check_shard_is_local(Oid table, Datum scope) {
    if (OidIsValid(local_key_shard(table, scope))) return;
    throw SqlError(
        ERRCODE_FEATURE_NOT_SUPPORTED,
        "idempotency key calls must run on the node that holds the scope's shard",
        psprintf("idempotency.keys is distributed by Citus and the shard of scope \"%s\" is on "
                 "another node; the key lock is taken where the key's row lives.",
                 TextDatumGetCString(scope)),
        "Call the function on its own with a constant scope (SELECT idempotency.reserve('tenant', "
        "...) or SELECT * FROM ..., not in a CTE, subquery or PL/pgSQL expression), so that Citus "
        "delegates it to that node.");
}

}  // namespace idem::pg

namespace {

using idem::pg::SqlError;

// One row of one column of a query run with SPI, or nullptr when it returns no row.
char *query_value(const char *sql, int nargs, const Oid *types, const Datum *args) {
    int rc = SPI_execute_with_args(sql, nargs, const_cast<Oid *>(types), const_cast<Datum *>(args),
                                   nullptr, false, 1);
    if (rc < 0) elog(ERROR, "idempotency: query failed (%s): %s", SPI_result_code_string(rc), sql);
    if (SPI_processed == 0) return nullptr;
    return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

// The key functions that run on the shard's node: each distributed by its first argument
// (scope), co-located with idempotency.keys, delegated even inside a transaction block.
const char *const kKeyFunctions[] = {
    "idempotency.reserve(text, text, bytea, interval, interval, interval)",
    "idempotency.complete(text, text, integer, jsonb, integer)",
    "idempotency.fail(text, text, jsonb, integer)",
    "idempotency.checkpoint(text, text, text, integer)",
    "idempotency.lookup(text, text)",
    "idempotency.forget(text, text)",
    "idempotency.claim_once(text, text, interval, interval)",
};

const char *const kCitusHint =
    "Install Citus from Citus's own packages, put citus first in shared_preload_libraries, "
    "CREATE EXTENSION citus and add the workers with citus_add_node(); see docs/citus.md.";

}  // namespace

// idempotency.distribute(colocate_with regclass): shards idempotency.keys by scope with Citus,
// co-located with a table distributed by a text tenant column, and delegates the key
// functions to the node of the scope's shard.
IDEM_FUNCTION(idem_distribute) {
    using namespace idem::pg;
    Oid table = DatumGetObjectId(required_arg(fcinfo, 0, "colocate_with"));
    spi_connect();
    if (query_value("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus'", 0,
                    nullptr, nullptr) == nullptr)
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "extension \"citus\" is not installed in this database",
                       "idempotency.distribute() shards idempotency.keys with Citus.", kCitusHint);
    if (is_citus_worker())
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "idempotency.distribute() must run on the Citus coordinator",
                       "This node is a Citus worker.", "Connect to the coordinator.");
    Oid keys = get_relname_relid("keys", get_namespace_oid("idempotency", false));
    const Oid oid_type[] = {REGCLASSOID};
    Datum keys_arg[] = {ObjectIdGetDatum(keys)};
    if (char *with = query_value(
            "SELECT coalesce((SELECT pg_catalog.string_agg(c.logicalrelid::pg_catalog.text, ', ')"
            " FROM pg_catalog.pg_dist_partition c WHERE c.colocationid OPERATOR(pg_catalog.=)"
            " p.colocationid AND pg_catalog.starts_with(c.logicalrelid::pg_catalog.text,"
            " 'idempotency.') IS NOT TRUE), 'no other table')"
            " FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1",
            1, oid_type, keys_arg))
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "idempotency.keys is already distributed",
                       psprintf("It is co-located with %s.", with),
                       "distribute() runs once. To move the keys next to another table, use "
                       "Citus's update_distributed_table_colocation().");
    Datum table_arg[] = {ObjectIdGetDatum(table)};
    char *name = query_value("SELECT $1::pg_catalog.text", 1, oid_type, table_arg);
    char *method = query_value(
        "SELECT partmethod FROM pg_catalog.pg_dist_partition WHERE logicalrelid "
        "OPERATOR(pg_catalog.=) $1",
        1, oid_type, table_arg);
    if (method == nullptr)
        throw SqlError(ERRCODE_WRONG_OBJECT_TYPE, psprintf("table %s is not distributed", name),
                       "idempotency.keys is co-located with a table that Citus distributes by "
                       "its tenant column.",
                       psprintf("Distribute it first: SELECT create_distributed_table('%s', "
                                "'<tenant column>');",
                                name));
    if (strcmp(method, "h") != 0)
        throw SqlError(ERRCODE_WRONG_OBJECT_TYPE,
                       psprintf("table %s is not hash-distributed by a column", name),
                       "Reference tables and single-shard tables have no tenant column to "
                       "co-locate the keys with.",
                       "Pick a table created with create_distributed_table(table, column).");
    char *column_type = query_value(
        "SELECT pg_catalog.format('%I %s', a.attname, a.atttypid::pg_catalog.regtype)"
        " FROM pg_catalog.pg_dist_partition p JOIN pg_catalog.pg_attribute a"
        " ON a.attrelid OPERATOR(pg_catalog.=) p.logicalrelid AND a.attname OPERATOR(pg_catalog.=)"
        " pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)::pg_catalog.name"
        " WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1 AND a.atttypid <> "
        "'pg_catalog.text'::pg_catalog.regtype",
        1, oid_type, table_arg);
    if (column_type != nullptr)
        throw SqlError(ERRCODE_DATATYPE_MISMATCH,
                       psprintf("distribution column of %s is not text", name),
                       psprintf("Its distribution column is %s; idempotency.keys is distributed "
                                "by scope, of type text, and co-location needs the same type.",
                                column_type),
                       "Co-locate the keys with a table distributed by a text tenant column.");
    char *missing = query_value(
        "SELECT pg_catalog.string_agg(pg_catalog.format('%s:%s (%s)', nodename, nodeport, result),"
        " ', ') FROM pg_catalog.run_command_on_workers($$SELECT coalesce((SELECT extversion FROM "
        "pg_catalog.pg_extension WHERE extname = 'idempotency'), 'not installed')$$)"
        " WHERE NOT success OR result OPERATOR(pg_catalog.<>)"
        " (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency')",
        0, nullptr, nullptr);
    if (missing != nullptr)
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "extension \"idempotency\" is missing on a worker, or at another version",
                       psprintf("Workers: %s.", missing),
                       "On every worker: put idempotency in shared_preload_libraries (after "
                       "citus) and CREATE EXTENSION idempotency at this node's version.");
    // As the caller, who must own idempotency.keys and the functions (Citus checks).
    query_value(
        "SELECT pg_catalog.create_distributed_table('idempotency.keys', 'scope',"
        " colocate_with => $1::pg_catalog.text)",
        1, oid_type, table_arg);
    for (const char *function : kKeyFunctions) {
        const Oid text_type[] = {TEXTOID};
        Datum function_arg[] = {CStringGetTextDatum(function)};
        query_value(
            "SELECT pg_catalog.create_distributed_function($1::pg_catalog.regprocedure,"
            " '$1', colocate_with => 'idempotency.keys', force_delegation => true)",
            1, text_type, function_arg);
    }
    SPI_finish();
    PG_RETURN_VOID();
}
