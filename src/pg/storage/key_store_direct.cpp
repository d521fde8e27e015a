#include "pg/storage/key_store_direct.hpp"
#include "pg/guard.hpp"

#include "pg/compat.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opfamily_d.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/partcache.h"
#include "utils/rel.h"
}

#include <cstring>
#include <initializer_list>

namespace idem::pg {

namespace {

const char *const kColumnNames[kKeyColumnCount] = {
    "scope",        "key",          "state",          "attempt",    "request_hash",
    "status_code",  "response",     "recovery_point", "last_error", "first_seen_at",
    "completed_at", "locked_until", "expires_at"};
const Oid kColumnTypes[kKeyColumnCount] = {
    TEXTOID, TEXTOID,  TEXTOID,        INT4OID,        BYTEAOID,       INT4OID,        JSONBOID,
    TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
};
// CHECK constraints of idempotency.keys (state, attempt, status_code), mirrored by
// satisfies_constraints().
constexpr int kCheckCount = 3;

// NOT NULL columns of idempotency.keys, mirrored by satisfies_constraints().
bool is_not_null_column(int column) noexcept {
    return column == kScope || column == kKey || column == kState || column == kAttempt ||
           column == kFirstSeenAt || column == kExpiresAt;
}

bool layout_matches(Relation rel) noexcept {
    TupleDesc desc = RelationGetDescr(rel);
    if (desc->natts != kKeyColumnCount) return false;
    for (int i = 0; i < kKeyColumnCount; i++) {
        Form_pg_attribute attr = TupleDescAttr(desc, i);
        if (attr->attisdropped || attr->atttypid != kColumnTypes[i] ||
            attr->attnotnull != is_not_null_column(i) ||
            strcmp(NameStr(attr->attname), kColumnNames[i]) != 0)
            return false;
    }
    return true;
}

// The CHECK constraints are the install script's, by name (ATTACH PARTITION matches them by
// name too); any other constraint sends the insert through SPI.
bool checks_match(const TupleConstr *constr) noexcept {
    static const char *const kCheckNames[kCheckCount] = {"keys_state_check", "keys_attempt_check",
                                                         "keys_status_code_check"};
    if (constr->num_check != kCheckCount) return false;
    for (int i = 0; i < kCheckCount; i++) {
        bool known = false;
        for (const char *name : kCheckNames) known |= strcmp(constr->check[i].ccname, name) == 0;
        if (!known) return false;
    }
    return true;
}

// Range-partitioned on expires_at alone, nothing that an INSERT or SELECT would run besides
// reading and writing rows. (On Citus key_store.cpp passes the local shard, which has this
// shape, never the shell relation.)
bool parent_supported(Relation parent) noexcept {
    if (parent->rd_rel->relkind != RELKIND_PARTITIONED_TABLE || parent->trigdesc != nullptr ||
        parent->rd_rel->relrowsecurity || !layout_matches(parent))
        return false;
    PartitionKey key = RelationGetPartitionKey(parent);
    return key->strategy == PARTITION_STRATEGY_RANGE && key->partnatts == 1 &&
           key->partattrs[0] == kExpiresAt + 1;
}

bool leaf_supported(Relation leaf) noexcept {
    TupleConstr *constr = RelationGetDescr(leaf)->constr;
    return leaf->rd_rel->relkind == RELKIND_RELATION && leaf->rd_rel->relam == HEAP_TABLE_AM_OID &&
           leaf->trigdesc == nullptr && !leaf->rd_rel->relrowsecurity && layout_matches(leaf) &&
           constr != nullptr && checks_match(constr) && !constr->has_generated_stored;
}

// The verdicts of parent_supported and leaf_supported, kept until the relation's relcache
// entry is invalidated (every change of columns, constraints, triggers or row security
// invalidates it, and table_open takes those invalidations before a verdict is read).
enum class Role { kParent, kLeaf };
struct Verdict {
    Oid relation;
    Role role;
    bool supported;
};
constexpr int kVerdictSlots = 32;
Verdict verdicts[kVerdictSlots];
int verdict_count = 0;

void forget_verdicts(Datum, Oid relation) noexcept {
    bool known = false;
    for (int i = 0; i < verdict_count; i++) known |= verdicts[i].relation == relation;
    if (known || !OidIsValid(relation)) verdict_count = 0;
}

bool supported(Relation rel, Role role) noexcept {
    static bool registered = false;
    if (!registered) {
        CacheRegisterRelcacheCallback(pg_callback(forget_verdicts), (Datum)0);
        registered = true;
    }
    Oid relation = RelationGetRelid(rel);
    for (int i = 0; i < verdict_count; i++)
        if (verdicts[i].relation == relation && verdicts[i].role == role)
            return verdicts[i].supported;
    bool verdict = role == Role::kParent ? parent_supported(rel) : leaf_supported(rel);
    if (verdict_count == kVerdictSlots) verdict_count = 0;
    verdicts[verdict_count++] = Verdict{relation, role, verdict};
    return verdict;
}

// The partitions of the table as the executor would see them, or nullptr when detached
// partitions are about (their visibility depends on the snapshot: leave them to SPI).
PartitionDesc partitions(Relation parent) noexcept {
    PartitionDesc desc = RelationGetPartitionDesc(parent, !IsolationUsesXactSnapshot());
    return desc->detached_exist || desc->boundinfo == nullptr ? nullptr : desc;
}

// Offset in boundinfo->datums of the greatest bound <= value (-1: none), as tuple routing
// computes it.
int bound_offset(Relation parent, PartitionBoundInfo bounds, TimestampTz value) noexcept {
    if (bounds->ndatums == 0) return -1;
    PartitionKey key = RelationGetPartitionKey(parent);
    Datum datum = TimestampTzGetDatum(value);
    bool equal = false;
    return partition_range_datum_bsearch(key->partsupfunc, key->partcollation, bounds, 1, &datum,
                                         &equal);
}

bool satisfies_constraints(const KeyRecord &record) noexcept {
    for (KeyColumn c : {kScope, kKey, kState, kAttempt, kFirstSeenAt, kExpiresAt})
        if (record.is_null(c)) return false;
    text *state = DatumGetTextPP(record.values[kState]);
    size_t length = VARSIZE_ANY_EXHDR(state);
    bool known_state = false;
    for (const char *s : {"processing", "completed", "failed"})
        known_state |= length == strlen(s) && memcmp(VARDATA_ANY(state), s, length) == 0;
    if (!known_state || record.attempt() <= 0) return false;
    if (!record.is_null(kStatusCode)) {
        int32 status = DatumGetInt32(record.values[kStatusCode]);
        if (status < 100 || status > 599) return false;
    }
    return true;
}

// The leaf's primary key if it is the btree (key, scope, ...) with text equality.
Relation open_primary_key(Relation leaf, LOCKMODE lock) noexcept {
    Oid pk = compat::primary_key_index(leaf);
    if (!OidIsValid(pk)) return nullptr;
    Relation index = index_open(pk, lock);
    Form_pg_index form = index->rd_index;
    if (index->rd_rel->relam != BTREE_AM_OID || form->indnkeyatts < 2 ||
        form->indkey.values[0] != kKey + 1 || form->indkey.values[1] != kScope + 1 ||
        index->rd_opfamily[0] != TEXT_BTREE_FAM_OID ||
        index->rd_opfamily[1] != TEXT_BTREE_FAM_OID) {
        index_close(index, NoLock);
        return nullptr;
    }
    return index;
}

// Scans one leaf for a row of (scope, key) with expires_at > now.
Direct probe_leaf(Oid leaf_oid, LOCKMODE lock, Datum scope, Datum key, TimestampTz now,
                  KeyRecord *record, Snapshot snapshot) {
    Relation leaf = table_open(leaf_oid, lock);
    Relation index = supported(leaf, Role::kLeaf) ? open_primary_key(leaf, lock) : nullptr;
    if (index == nullptr) {
        table_close(leaf, NoLock);
        return Direct::kUnsupported;
    }
    ScanKeyData keys[2];
    ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           index->rd_indcollation[0], F_TEXTEQ, key);
    ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
                           index->rd_indcollation[1], F_TEXTEQ, scope);
    IndexScanDesc scan = compat::index_begin_scan(leaf, index, snapshot, 2, 0);
    index_rescan(scan, keys, 2, nullptr, 0);
    TupleTableSlot *slot = table_slot_create(leaf, nullptr);
    Direct result = Direct::kNotFound;
    while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
        bool isnull;
        Datum expires = slot_getattr(slot, kExpiresAt + 1, &isnull);
        if (isnull || DatumGetTimestampTz(expires) <= now) continue;
        slot_getallattrs(slot);
        TupleDesc desc = RelationGetDescr(leaf);
        for (int i = 0; i < kKeyColumnCount; i++) {
            Form_pg_attribute attr = TupleDescAttr(desc, i);
            record->nulls[i] = slot->tts_isnull[i];
            // Into the memory of SPI's caller, like the SPI path.
            record->values[i] = record->nulls[i] ? (Datum)0
                                                 : SPI_datumTransfer(slot->tts_values[i],
                                                                     attr->attbyval, attr->attlen);
        }
        result = Direct::kFound;
        break;
    }
    index_endscan(scan);
    ExecDropSingleTupleTableSlot(slot);
    index_close(index, NoLock);
    table_close(leaf, NoLock);
    return result;
}

// Indexes whose entries are the row's columns as they are: no expressions, no predicate, no
// exclusion or deferred constraint, ready for inserts.
constexpr int kMaxPlainIndexes = 8;

bool is_plain_index(Relation index) noexcept {
    Form_pg_index form = index->rd_index;
    return form->indisready && form->indimmediate && !form->indisexclusion &&
           heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, nullptr) &&
           heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, nullptr);
}

// Opens the leaf's indexes into `indexes` and returns how many, if all are plain; otherwise
// opens none and returns -1.
int open_plain_indexes(Relation leaf, Relation *indexes) noexcept {
    List *oids = RelationGetIndexList(leaf);
    int count = 0;
    bool plain = list_length(oids) <= kMaxPlainIndexes;
    ListCell *cell;
    foreach (cell, oids) {
        if (!plain) break;
        Relation index = index_open(lfirst_oid(cell), RowExclusiveLock);
        indexes[count++] = index;
        plain = is_plain_index(index);
    }
    list_free(oids);
    if (plain) return count;
    for (int i = 0; i < count; i++) index_close(indexes[i], NoLock);
    return -1;
}

// The row into the heap, then its entries into the (plain) indexes, which check uniqueness;
// what ExecInsertIndexTuples would do, without an executor state.
void insert_plain(Relation leaf, Relation *indexes, int index_count, const KeyRecord &record,
                  HeapTuple tuple) {
    heap_insert(leaf, tuple, GetCurrentCommandId(true), 0, nullptr);
    for (int i = 0; i < index_count; i++) {
        Relation index = indexes[i];
        IndexInfo *info = BuildIndexInfo(index);
        Datum values[INDEX_MAX_KEYS];
        bool nulls[INDEX_MAX_KEYS];
        for (int k = 0; k < info->ii_NumIndexAttrs; k++) {
            int column = info->ii_IndexAttrNumbers[k] - 1;
            values[k] = record.values[column];
            nulls[k] = record.nulls[column];
        }
        (void)index_insert(index, values, nulls, &tuple->t_self, leaf,
                           index->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, false,
                           info);
        index_close(index, NoLock);
    }
}

// The same through the executor's index machinery, for any other index.
void insert_through_executor(Relation leaf, HeapTuple tuple) noexcept {
    EState *estate = CreateExecutorState();
    estate->es_output_cid = GetCurrentCommandId(true);
    ResultRelInfo *info = makeNode(ResultRelInfo);
    InitResultRelInfo(info, leaf, 1, nullptr, 0);
    ExecOpenIndices(info, false);
    TupleTableSlot *slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(leaf), &TTSOpsHeapTuple);
    ExecStoreHeapTuple(tuple, slot, false);
    simple_table_tuple_insert(leaf, slot);
    List *recheck = compat::insert_index_tuples(info, slot, estate);
    list_free(recheck);  // only deferred constraints are rechecked; the table has none
    ExecCloseIndices(info);
    ExecResetTupleTable(estate->es_tupleTable, false);
    FreeExecutorState(estate);
}

}  // namespace

Direct find_live_key_direct(Oid table, LOCKMODE lock, Datum scope, Datum key, TimestampTz now,
                            KeyRecord *record, Snapshot snapshot) {
    Relation parent = table_open(table, lock);
    PartitionDesc desc = supported(parent, Role::kParent) ? partitions(parent) : nullptr;
    if (desc == nullptr) {
        table_close(parent, NoLock);
        return Direct::kUnsupported;
    }
    // Leaves whose upper bound lies after now (the others hold expired rows only), then the
    // default partition; copied, as opening a leaf may rebuild the descriptor.
    PartitionBoundInfo bounds = desc->boundinfo;
    int n = 0;
    Oid *leaves = static_cast<Oid *>(palloc(sizeof(Oid) * (desc->nparts + 1)));
    for (int i = bound_offset(parent, bounds, now) + 1; i < bounds->nindexes; i++) {
        int part = bounds->indexes[i];
        if (part < 0) continue;
        if (!desc->is_leaf[part]) n = -1;
        if (n < 0) break;
        leaves[n++] = desc->oids[part];
    }
    if (n >= 0 && bounds->default_index >= 0) {
        if (desc->is_leaf[bounds->default_index])
            leaves[n++] = desc->oids[bounds->default_index];
        else
            n = -1;
    }
    if (n < 0) {
        table_close(parent, NoLock);
        return Direct::kUnsupported;
    }
    // What SPI_execute_plan (read_only = false) or SPI_execute_snapshot would do.
    if (snapshot == InvalidSnapshot)
        PushActiveSnapshot(GetTransactionSnapshot());
    else
        PushCopiedSnapshot(snapshot);
    CommandCounterIncrement();
    UpdateActiveSnapshotCommandId();
    Direct result = Direct::kNotFound;
    for (int i = 0; i < n && result == Direct::kNotFound; i++)
        result = probe_leaf(leaves[i], lock, scope, key, now, record, GetActiveSnapshot());
    PopActiveSnapshot();
    table_close(parent, NoLock);
    return result;
}

Direct insert_key_direct(Oid table, const KeyRecord &record) noexcept {
    // The executor refuses writes in read-only transactions; heap_insert does not check.
    if (XactReadOnly || !satisfies_constraints(record)) return Direct::kUnsupported;
    Relation parent = table_open(table, RowExclusiveLock);
    PartitionDesc desc = supported(parent, Role::kParent) ? partitions(parent) : nullptr;
    int part = -1;
    if (desc != nullptr) {
        PartitionBoundInfo bounds = desc->boundinfo;
        int offset = bound_offset(parent, bounds, record.timestamp(kExpiresAt));
        part = bounds->ndatums > 0 ? bounds->indexes[offset + 1] : -1;
        if (part < 0) part = bounds->default_index;
        if (part >= 0 && !desc->is_leaf[part]) part = -1;
    }
    if (part < 0) {  // includes "no partition for the row": SPI raises that error
        table_close(parent, NoLock);
        return Direct::kUnsupported;
    }
    Relation leaf = table_open(desc->oids[part], RowExclusiveLock);
    if (!supported(leaf, Role::kLeaf)) {
        table_close(leaf, NoLock);
        table_close(parent, NoLock);
        return Direct::kUnsupported;
    }
    CommandCounterIncrement();  // as SPI does before each statement
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(leaf), const_cast<Datum *>(record.values),
                                      const_cast<bool *>(record.nulls));
    Relation indexes[kMaxPlainIndexes];
    int index_count = open_plain_indexes(leaf, indexes);
    if (index_count >= 0)
        insert_plain(leaf, indexes, index_count, record, tuple);
    else
        insert_through_executor(leaf, tuple);
    heap_freetuple(tuple);
    table_close(leaf, NoLock);
    table_close(parent, NoLock);
    return Direct::kFound;
}

}  // namespace idem::pg
