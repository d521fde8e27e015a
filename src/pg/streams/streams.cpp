// create_stream, drop_stream, next_key: monotonic keys served from shared memory.
//
// idempotency.streams holds, per stream, the durable bound `reserved_up_to`: no value above it
// was ever handed out. A backend that finds the stream's cached block (streams_cache) empty
// takes the stream's lock, moves the bound one block up IN PLACE (a non-transactional,
// WAL-logged overwrite of the row, like a sequence's), flushes that WAL record (and waits for
// synchronous standbys), and only then hands out values of the new block. The write does not
// belong to the caller's transaction, so a rollback cannot take back a bound whose values
// were already returned; after a crash every new value lies above the replayed bound.
// Without shared memory (library not preloaded) every call is a block of one: correct, one
// WAL flush per call.
//
// The stream's lock (a heavyweight lock, so waits are deadlock-checked) serialises refills
// with each other and with create_stream / drop_stream, which hold it until their
// transaction ends. Only a committed row, one this transaction did not write, gets a shared
// block: a transaction that created or dropped a stream ("touched" it) reads the row before
// it uses the cache (the cached block may belong to a row it no longer sees), and its own
// uncommitted row is served one value at a time. Other sessions cannot see an uncommitted
// row, so they wait for the lock and then find the stream or not. Entries of touched streams
// are forgotten when the transaction ends, before the lock is released: after a committed
// drop the entry belongs to a row that is gone.

#include "pg/streams/streams.hpp"
#include "pg/fault_points.hpp"
#include "pg/spi.hpp"

#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/sql_errors.hpp"
#include "pg/streams/streams_cache.hpp"

#include "core/block_allocator.hpp"
#include "core/key_rules.hpp"

#include <cstring>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/lwlock.h"
#include "tcop/utility.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/relcache.h"
}

namespace idem::pg {

namespace {

// field4 of the streams' lock tags (0x1DE is the key lifecycle's).
constexpr uint16 kStreamLockClass = 0x1DF;
// Columns of idempotency.streams.
constexpr AttrNumber kStreamColumn = 1, kBlockColumn = 2, kReservedColumn = 3;

constexpr const char *kInsertSql =
    "INSERT INTO idempotency.streams (stream, block, reserved_up_to) VALUES ($1, $2, 0)"
    " ON CONFLICT (stream) DO NOTHING";
constexpr const char *kDeleteSql =
    "DELETE FROM idempotency.streams WHERE stream OPERATOR(pg_catalog.=) $1";

// --- the table, its oid cached until a relcache invalidation ------------------------------

Oid cached_table = InvalidOid;

void forget_table(Datum, Oid relid) noexcept {
    if (relid == InvalidOid || relid == cached_table) cached_table = InvalidOid;
}

Oid streams_table() {
    static bool callback_registered = false;
    if (cached_table != InvalidOid) return cached_table;
    if (!callback_registered) {
        CacheRegisterRelcacheCallback(pg_callback(forget_table), (Datum)0);
        callback_registered = true;
    }
    Oid schema = get_namespace_oid("idempotency", true);
    Oid table = OidIsValid(schema) ? get_relname_relid("streams", schema) : InvalidOid;
    if (!OidIsValid(table))
        throw SqlError(ERRCODE_UNDEFINED_TABLE, "table idempotency.streams does not exist", nullptr,
                       "Create the extension idempotency in this database.");
    cached_table = table;
    return table;
}

StreamKey stream_key(Datum name) {
    const text *t = DatumGetTextPP(name);
    StreamKey key;
    key.database = MyDatabaseId;
    key.table = streams_table();
    key.length = VARSIZE_ANY_EXHDR(t);  // at most kMaxNameBytes (name_arg)
    std::memcpy(key.name, VARDATA_ANY(t), key.length);
    key.name[key.length] = '\0';
    return key;
}

void stream_lock_tag(LOCKTAG *tag, const StreamKey &key) {
    uint64 hash = core::lock_hash("idempotency.streams", {key.name, key.length});
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, uint32(hash >> 32), uint32(hash), kStreamLockClass);
}

[[noreturn]] void raise_unknown(const StreamKey &key) {
    throw SqlError(ERRCODE_UNDEFINED_OBJECT, psprintf("stream \"%s\" does not exist", key.name),
                   nullptr, "Create it with idempotency.create_stream.");
}

// --- streams created or dropped by this transaction ------------------------------------------

List *touched = NIL;  // StreamKey *, in TopTransactionContext

// Did this transaction (or one of its subtransactions, even rolled back) create or drop it?
bool is_touched(const StreamKey &key) {
    ListCell *cell;
    foreach (cell, touched)
        if (same_stream(*static_cast<StreamKey *>(lfirst(cell)), key)) return true;
    return false;
}

void forget_touched() noexcept {
    ListCell *cell;
    foreach (cell, touched) stream_cache_forget(*static_cast<StreamKey *>(lfirst(cell)));
}

void on_xact_event(XactEvent event, void *) noexcept {
    switch (event) {
        case XACT_EVENT_PRE_PREPARE:
            if (touched != NIL)
                ereport(ERROR,
                        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                         errmsg("cannot prepare a transaction that created or dropped a stream")));
            break;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PARALLEL_ABORT:
        case XACT_EVENT_PREPARE:
            forget_touched();
            touched = NIL;
            break;
        default:
            break;
    }
}

// Takes the stream's lock until the transaction ends and marks the stream touched.
void lock_for_ddl(const StreamKey &key) {
    static bool callback_registered = false;
    if (!callback_registered) {
        RegisterXactCallback(pg_callback(on_xact_event), nullptr);
        callback_registered = true;
    }
    LOCKTAG tag;
    stream_lock_tag(&tag, key);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
    if (is_touched(key)) return;
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    StreamKey *copy = static_cast<StreamKey *>(palloc(sizeof(StreamKey)));
    *copy = key;
    touched = lappend(touched, copy);
    MemoryContextSwitchTo(old);
}

// Runs a statement on idempotency.streams as its owner; returns the rows it processed.
uint64 run_as_owner(const char *sql, int nargs, Oid *types, Datum *values, int expected) {
    Storage storage = open_storage();
    int rc = SPI_execute_with_args(sql, nargs, types, values, nullptr, false, 0);
    spi_check(rc, expected, "SPI_execute_with_args");
    uint64 processed = SPI_processed;
    close_storage(storage);
    return processed;
}

// --- the durable bound -----------------------------------------------------------------------

// Have the synchronous standbys (if any are required) flushed WAL up to `end`? Mirrors the
// tests of SyncRepWaitForLSN, whose wait a query cancel or statement_timeout cuts short with
// a mere WARNING.
bool standbys_have(XLogRecPtr end) {
    if (!SyncRepRequested()) return true;
    int mode = synchronous_commit == SYNCHRONOUS_COMMIT_REMOTE_WRITE ? SYNC_REP_WAIT_WRITE
                                                                     : SYNC_REP_WAIT_FLUSH;
    LWLockAcquire(SyncRepLock, LW_SHARED);
    bool have = end <= WalSndCtl->lsn[mode];
#ifdef SYNC_STANDBY_DEFINED
    bits8 status = WalSndCtl->sync_standbys_status;
    if (status & SYNC_STANDBY_INIT)
        have = have || !(status & SYNC_STANDBY_DEFINED);
    else
        have = have || SyncRepStandbyNames == nullptr || SyncRepStandbyNames[0] == '\0';
#else
    have = have || !WalSndCtl->sync_standbys_defined;
#endif
    LWLockRelease(SyncRepLock);
    return have;
}

// Makes the WAL up to `end` durable, here and on the synchronous standbys, or raises 57014.
void make_durable(XLogRecPtr end) {
    XLogFlush(end);
    HOLD_INTERRUPTS();  // SyncRepWaitForLSN expects it
    SyncRepWaitForLSN(end, false);
    RESUME_INTERRUPTS();
    if (!standbys_have(end))
        throw SqlError(ERRCODE_QUERY_CANCELED,
                       "next_key was canceled while waiting for synchronous standbys",
                       "No value of the new block was handed out.");
}

// Under the stream's lock: finds the stream's row (in a fresh snapshot, so the newest
// committed row, or this transaction's own). A row that is committed and not this
// transaction's is served through the shared cache when `use_cache`: from its block if
// `cache_first` and the block has values left, otherwise a new block above max(stored bound,
// cached bound). Any other row (this transaction's, not yet committed) gets a block of one
// value. A new bound is durable before this returns, and *value is the first value handed
// out from it. False when there is no such stream (visible to this transaction).
// Opens the table and starts an in-place update of the stream's row (a fresh snapshot: the
// newest committed row, or this transaction's own; waits out a concurrent writer of it).
// *old is nullptr, and the table closed, when there is no such row.
Relation begin_bound_update(const StreamKey &key, HeapTuple *old, void **state) {
    Relation rel = table_open(key.table, RowExclusiveLock);
    ScanKeyData scan_key;
    ScanKeyInit(&scan_key, kStreamColumn, BTEqualStrategyNumber, F_TEXTEQ,
                PointerGetDatum(cstring_to_text_with_len(key.name, int(key.length))));
    systable_inplace_update_begin(rel, compat::primary_key_index(rel), true, nullptr, 1, &scan_key,
                                  old, state);
    if (*old == nullptr) table_close(rel, NoLock);
    return rel;
}

// Overwrites the row's bound in place and makes it durable (here and on synchronous standbys)
// before returning.
void finish_bound_update(Relation rel, HeapTuple old, void *state, int64 bound) {
    int column = kReservedColumn;
    Datum new_bound = Int64GetDatum(bound);
    bool null = false;
    HeapTuple updated =
        heap_modify_tuple_by_cols(old, RelationGetDescr(rel), 1, &column, &new_bound, &null);
    systable_inplace_update_finish(state, updated);
    table_close(rel, NoLock);
    make_durable(XactLastRecEnd);
}

bool write_next_block(const StreamKey &key, bool use_cache, bool cache_first, int64 *value) {
    HeapTuple old;
    void *state;
    Relation rel = begin_bound_update(key, &old, &state);
    if (old == nullptr) return false;
    bool shared =
        use_cache && !TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(old->t_data));
    if (shared && cache_first && stream_cache_take(key, value)) {
        systable_inplace_update_cancel(state);
        table_close(rel, NoLock);
        return true;
    }
    TupleDesc desc = RelationGetDescr(rel);
    bool isnull;
    int64 stored = DatumGetInt64(heap_getattr(old, kReservedColumn, desc, &isnull));
    int64 size = shared ? DatumGetInt32(heap_getattr(old, kBlockColumn, desc, &isnull)) : 1;
    int64 base = shared ? Max(stored, stream_cache_reserved(key)) : stored;
    if (base >= core::kMaxStreamValue || size < 1) {
        systable_inplace_update_cancel(state);
        table_close(rel, NoLock);
        throw SqlError(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                       psprintf("stream \"%s\" has reached its maximum value", key.name), nullptr,
                       "Drop it and create a new stream.");
    }
    core::Block block = core::next_block(base, size);  // cannot throw: both checked above
    // Durable before any value of the block is handed out, whatever the caller's transaction
    // does next. If this throws, the block is lost (a gap), never handed out.
    finish_bound_update(rel, old, state, block.last);
    // The bound is durable; the shared cache is not refilled yet.
    IDEM_FAULT_POINT("next-key-refill");
    *value = shared ? stream_cache_start(key, block) : block.first;
    return true;
}

// `touched`: this transaction created or dropped the stream, so a cached block may belong to
// a row it no longer sees; write_next_block looks at the row before using the cache.
int64 refill_and_take(const StreamKey &key, bool touched) {
    LOCKTAG tag;
    stream_lock_tag(&tag, key);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
    bool cached = stream_cache_available();
    int64 value;
    if (cached && !touched && stream_cache_take(key, &value)) {  // refilled while we waited
        LockRelease(&tag, ExclusiveLock, false);
        return value;
    }
    if (!write_next_block(key, cached, touched, &value))
        raise_unknown(key);  // the lock goes with the transaction
    LockRelease(&tag, ExclusiveLock, false);
    return value;
}

// Under the stream's lock: raises the durable bound to at least `floor` (never lowers it) and
// forgets the cached block, so the next value of every session comes from above it. Returns
// the bound in force afterwards.
int64 raise_bound(const StreamKey &key, int64 floor) {
    LOCKTAG tag;
    stream_lock_tag(&tag, key);
    (void)LockAcquire(&tag, ExclusiveLock, false, false);
    HeapTuple old;
    void *state;
    Relation rel = begin_bound_update(key, &old, &state);
    if (old == nullptr) raise_unknown(key);  // the lock goes with the transaction
    bool isnull;
    int64 stored =
        DatumGetInt64(heap_getattr(old, kReservedColumn, RelationGetDescr(rel), &isnull));
    // A cached block is never above the stored bound (it is written first), but a block of
    // this backend may be: take the larger.
    int64 bound = stream_cache_available() ? Max(stored, stream_cache_reserved(key)) : stored;
    if (floor > bound) {
        finish_bound_update(rel, old, state, floor);
        bound = floor;
    } else {
        systable_inplace_update_cancel(state);
        table_close(rel, NoLock);
    }
    stream_cache_forget(key);
    LockRelease(&tag, ExclusiveLock, false);
    return bound;
}

}  // namespace

void register_streams() {
    register_stream_cache();
}

IDEM_FUNCTION(idem_create_stream) {
    Datum name = name_arg(fcinfo, 0, "stream");
    PreventCommandIfReadOnly("idempotency.create_stream()");
    int64 block = DatumGetInt32(required_arg(fcinfo, 1, "block"));
    core::check_block_size(block);
    StreamKey key = stream_key(name);
    lock_for_ddl(key);
    Oid types[] = {TEXTOID, INT4OID};
    Datum values[] = {name, Int32GetDatum(int32(block))};
    if (run_as_owner(kInsertSql, 2, types, values, SPI_OK_INSERT) == 0)
        throw SqlError(ERRCODE_DUPLICATE_OBJECT,
                       psprintf("stream \"%s\" already exists", key.name));
    CommandCounterIncrement();  // next_key in the same statement sees it
    PG_RETURN_VOID();
}

IDEM_FUNCTION(idem_drop_stream) {
    Datum name = name_arg(fcinfo, 0, "stream");
    PreventCommandIfReadOnly("idempotency.drop_stream()");
    StreamKey key = stream_key(name);
    lock_for_ddl(key);
    Oid types[] = {TEXTOID};
    Datum values[] = {name};
    if (run_as_owner(kDeleteSql, 1, types, values, SPI_OK_DELETE) == 0) raise_unknown(key);
    CommandCounterIncrement();
    PG_RETURN_VOID();
}

IDEM_FUNCTION(idem_next_key) {
    Datum name = name_arg(fcinfo, 0, "stream");
    PreventCommandIfReadOnly("next_key()");
    PreventCommandDuringRecovery("next_key()");
    StreamKey key = stream_key(name);
    bool touched = is_touched(key);
    int64 value;
    if (!touched && stream_cache_available() && stream_cache_take(key, &value))
        PG_RETURN_INT64(value);
    PG_RETURN_INT64(refill_and_take(key, touched));
}

IDEM_FUNCTION(idem_set_stream_floor) {
    Datum name = name_arg(fcinfo, 0, "stream");
    int64 floor = DatumGetInt64(required_arg(fcinfo, 1, "floor"));
    PreventCommandIfReadOnly("idempotency.set_stream_floor()");
    PreventCommandDuringRecovery("idempotency.set_stream_floor()");
    if (floor < 0)
        throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "floor must not be negative",
                       psprintf("The floor was %lld.", (long long)floor),
                       "Pass the reserved_up_to of idempotency.stream_positions() on the old "
                       "server.");
    StreamKey key = stream_key(name);
    PG_RETURN_INT64(raise_bound(key, floor));
}

}  // namespace idem::pg
