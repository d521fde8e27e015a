// reserve, complete, fail, checkpoint, lookup, forget: the life of an idempotency key;
// claim_once: a reserve and a complete in one call, for message consumers.
//
// Every call on (scope, key) first takes a transaction-scoped advisory lock on a 64-bit hash
// of it, so calls on one key are serialised and calls on different keys never wait on each
// other. Storage goes through key_store (SPI); keys new in this transaction stay in memory
// until they are completed, failed or committed (pending_claims).

#include "pg/fault_points.hpp"
#include "pg/guard.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/keys/key_lifecycle.hpp"
#include "pg/keys/pending_claims.hpp"
#include "pg/settings.hpp"
#include "pg/sql_errors.hpp"
#include "pg/stats.hpp"
#include "pg/subtransaction.hpp"

#include "core/key_rules.hpp"

extern "C" {
#include "catalog/pg_enum.h"
#include "common/int.h"
#include "libpq/libpq.h"
#include "libpq/libpq-be.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
}

#include <iterator>

namespace idem::pg {

namespace {

// field4 of our advisory lock tags: keeps them apart from pg_advisory_lock(bigint) (1) and
// pg_advisory_lock(int, int) (2) taken by applications. Shown as objsubid in pg_locks.
// idempotency.key_locks (extension/idempotency--0.2.0--0.3.0.sql) selects on this value.
constexpr uint16 kKeyLockClass = 0x1DE;

void key_lock_tag(LOCKTAG *tag, Datum scope, Datum key) {
    uint64 hash = core::lock_hash(text_view(DatumGetTextPP(scope)), text_view(DatumGetTextPP(key)));
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, uint32(hash >> 32), uint32(hash), kKeyLockClass);
}

// Key locks belong to the transaction (not to the statement's portal), so that one taken
// while waiting in a subtransaction can be released like any other.
LockAcquireResult acquire_key_lock(const LOCKTAG *tag, bool dont_wait) noexcept {
    ResourceOwner caller_owner = CurrentResourceOwner;
    CurrentResourceOwner = CurTransactionResourceOwner;
    LockAcquireResult result = LockAcquire(tag, ExclusiveLock, false, dont_wait);
    CurrentResourceOwner = caller_owner;
    return result;
}

void release_key_lock(const LOCKTAG *tag) {
    ResourceOwner caller_owner = CurrentResourceOwner;
    CurrentResourceOwner = CurTransactionResourceOwner;
    LockRelease(tag, ExclusiveLock, false);
    CurrentResourceOwner = caller_owner;
}

void lock_key(Datum scope, Datum key) {
    check_key_placement(scope);
    LOCKTAG tag;
    key_lock_tag(&tag, scope, key);
    (void)acquire_key_lock(&tag, false);
}

bool attempt_is_stale(FunctionCallInfo fcinfo, int n, int32 current) {
    return !PG_ARGISNULL(n) && PG_GETARG_INT32(n) != current;
}

[[noreturn]] void raise_stale(FunctionCallInfo fcinfo, int n, int32 current) {
    throw SqlError(kStaleAttempt, "attempt is stale",
                   psprintf("The call was made for attempt %d; the key is at attempt %d.",
                            PG_GETARG_INT32(n), current),
                   "Another holder took the key over after this holder's lock_ttl lapsed.");
}

[[noreturn]] void raise_no_claim(const char *call, const char *why) {
    throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   psprintf("%s requires a live claim on the key", call), why,
                   "Call idempotency.reserve first and act only on the outcome 'new'.");
}

// The live record of (scope, key) as this transaction sees it: its own unwritten claim, or
// the table's live row. *claim is set for the former.
bool current_record(Datum scope, Datum key, TimestampTz now, KeyRecord *record,
                    PendingClaim **claim) {
    *claim = find_unwritten_claim(scope, key);
    if (*claim != nullptr) {
        *record = (*claim)->record;
        return true;
    }
    return find_live_key(scope, key, now, record);
}

// In REPEATABLE READ and SERIALIZABLE the transaction's snapshot may predate the last write
// to the key (made by the holder we waited for): acting on it would claim the key twice.
void check_snapshot_is_current(Datum scope, Datum key, TimestampTz now, bool found,
                               const KeyRecord &seen) {
    if (!IsolationUsesXactSnapshot()) return;
    KeyRecord latest;
    bool latest_found = find_live_key(scope, key, now, &latest, GetLatestSnapshot());
    if (latest_found != found ||
        (found && (latest.state() != seen.state() || latest.attempt() != seen.attempt())))
        throw SqlError(ERRCODE_T_R_SERIALIZATION_FAILURE,
                       "could not serialize access due to concurrent use of idempotency key",
                       "The key changed after this transaction's snapshot was taken.",
                       "Retry the transaction.");
}

// current_record for a call that writes: refuses a stale snapshot.
bool record_to_write(Datum scope, Datum key, TimestampTz now, KeyRecord *record,
                     PendingClaim **claim) {
    bool found = current_record(scope, key, now, record, claim);
    if (*claim == nullptr) check_snapshot_is_current(scope, key, now, found, *record);
    return found;
}

// Writes a finished record: the first write of a pending claim, or an update of the row
// stored with expires_at stored_expires_at.
void store_record(const KeyRecord &record, PendingClaim *claim, TimestampTz stored_expires_at) {
    if (claim != nullptr) {
        insert_key(record);
        mark_claim_written(claim);
    } else {
        update_key(record, stored_expires_at);
    }
}

// --- reserve -------------------------------------------------------------------------------

enum class Outcome { New, Replay, InProgress, Mismatch, TooOld };
const char *const kOutcomeLabels[] = {"new", "replay", "in_progress", "mismatch", "too_old"};

struct ReserveRequest {
    Datum scope, key;
    bytea *request_hash;  // nullptr: not checked
    int64 lock_ttl, retention, wait;
    // claim_once: a claim is written completed at once (no status_code or response), inside
    // the caller's transaction, instead of 'processing' until complete.
    bool complete_now = false;
};

struct Reservation {
    Outcome outcome;
    KeyRecord record;  // columns shown in the result; unset ones are NULL
};

bool hashes_differ(const KeyRecord &record, const bytea *request_hash) {
    if (request_hash == nullptr || record.is_null(kRequestHash)) return false;
    const bytea *stored = DatumGetByteaPP(record.values[kRequestHash]);
    return VARSIZE_ANY_EXHDR(stored) != VARSIZE_ANY_EXHDR(request_hash) ||
           memcmp(VARDATA_ANY(stored), VARDATA_ANY(request_hash), VARSIZE_ANY_EXHDR(stored)) != 0;
}

bool is_too_old(Datum key, TimestampTz now, int64 retention) {
    TimestampTz created;
    return key_creation_time(DatumGetTextPP(key), &created) && created < now - retention;
}

KeyRecord new_claim(const ReserveRequest &req, TimestampTz now, int32 attempt) {
    KeyRecord record;
    for (int c = 0; c < kKeyColumnCount; c++) record.set_null(static_cast<KeyColumn>(c));
    record.set(kScope, req.scope);
    record.set(kKey, req.key);
    record.set_state("processing");
    record.set(kAttempt, Int32GetDatum(attempt));
    if (req.request_hash != nullptr) record.set(kRequestHash, PointerGetDatum(req.request_hash));
    record.set(kFirstSeenAt, TimestampTzGetDatum(now));
    record.set(kLockedUntil, TimestampTzGetDatum(now + req.lock_ttl));
    record.set(kExpiresAt, TimestampTzGetDatum(core::expiry_at_claim(
                               core::kNoExpiry, now + req.lock_ttl, req.retention)));
    return record;
}

// The next attempt on a record whose claim lapsed or failed. Its expires_at moves past the new
// lease, so the record cannot expire under its new holder (core::expiry_at_claim).
void take_over(KeyRecord *record, const ReserveRequest &req, TimestampTz now) {
    record->set_state("processing");
    record->set(kAttempt, Int32GetDatum(record->attempt() + 1));
    if (req.request_hash != nullptr) record->set(kRequestHash, PointerGetDatum(req.request_hash));
    record->set(kLockedUntil, TimestampTzGetDatum(now + req.lock_ttl));
    record->set(kExpiresAt, TimestampTzGetDatum(core::expiry_at_claim(
                                record->timestamp(kExpiresAt), now + req.lock_ttl, req.retention)));
}

// claim_once's record: completed by the call that claims it (no lease, no answer stored).
void mark_completed(KeyRecord *record, TimestampTz now) {
    record->set_state("completed");
    record->set(kCompletedAt, TimestampTzGetDatum(now));
    record->set_null(kLockedUntil);
}

bool lease_is_live(const KeyRecord &record, TimestampTz now) {
    return record.state() == 'p' && !record.is_null(kLockedUntil) &&
           record.timestamp(kLockedUntil) > now;
}

// Waits up to `usecs` for the key's lock held by another transaction, as a real lock wait:
// visible in pg_locks and pg_blocking_pids, and subject to deadlock detection. The lock
// timeout that ends it is caught in a subtransaction; false then. Other errors propagate.
void acquire_key_lock_step(void *tag) noexcept {
    IDEM_FAULT_POINT("key-lock-wait");
    (void)acquire_key_lock(static_cast<const LOCKTAG *>(tag), false);
}

bool wait_for_key_lock(const LOCKTAG *tag, int64 usecs) {
    const int caller_lock_timeout = LockTimeout;
    const int usecs_ms = int(Min((usecs + 999) / 1000, int64(INT_MAX)));
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d",
             caller_lock_timeout > 0 ? Min(usecs_ms, caller_lock_timeout) : usecs_ms);
    // The short timeout is set at a GUC nest level of its own, as a function's SET clause
    // is: put back when this returns, and by the abort of the (sub)transaction when an error
    // leaves on any other path (starting or rolling back the subtransaction included).
    const int guc_level = NewGUCNestLevel();
    (void)set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                            true, 0, false);
    IDEM_FAULT_POINT("key-lock-start");
    ErrorData *error = nullptr;
    // On success the lock passes to the caller's transaction with the subtransaction.
    bool acquired =
        run_in_subtransaction(acquire_key_lock_step, const_cast<LOCKTAG *>(tag), &error);
    AtEOXact_GUC(true, guc_level);
    if (!acquired && error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE) ReThrowError(error);
    return acquired;
}

// Sleeps a little while waiting for another holder; false once the deadline has passed.
bool pause_until(TimestampTz deadline, int *pause_ms) {
    TimestampTz now = GetCurrentTimestamp();
    if (now >= deadline) return false;
    long left_ms = long((deadline - now + 999) / 1000);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                    Min(long(*pause_ms), left_ms), PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
    *pause_ms = Min(*pause_ms * 2, 20);
    return true;
}

// A reserve that waited may have outlived its client: a pooler closes the server connection
// when its client goes, and nothing tells the backend until it writes to the socket. A claim
// taken now would be committed (autocommit) with nobody left to complete it, held until
// lock_ttl. So before claiming after a wait, the session ends the way
// client_connection_check_interval would end it (FATAL, its transaction rolled back).
void end_if_client_gone() {
    if (whereToSendOutput != DestRemote || MyProcPort == nullptr || pq_check_connection()) return;
    ClientConnectionLost = true;
    InterruptPending = true;
    CHECK_FOR_INTERRUPTS();
}

Outcome finished_outcome(const KeyRecord &record, const ReserveRequest &req) {
    return hashes_differ(record, req.request_hash) ? Outcome::Mismatch : Outcome::Replay;
}

void clear_record(KeyRecord *record) {
    for (int c = 0; c < kKeyColumnCount; c++) record->set_null(static_cast<KeyColumn>(c));
}

Reservation reserve_key(const ReserveRequest &req) {
    check_key_placement(req.scope);
    LOCKTAG tag;
    key_lock_tag(&tag, req.scope, req.key);
    TimestampTz deadline = GetCurrentTimestamp() + req.wait;
    int pause_ms = 1;
    bool waited = false;
    Reservation result;
    for (;;) {
        LockAcquireResult lock = acquire_key_lock(&tag, true);
        TimestampTz now = GetCurrentTimestamp();
        if (lock == LOCKACQUIRE_NOT_AVAIL) {
            // Another transaction is working on the key right now. A completed record never
            // changes, so it can be answered without the lock.
            bool found = find_live_key(req.scope, req.key, now, &result.record);
            if (found && result.record.state() == 'c') {
                result.outcome = finished_outcome(result.record, req);
                return result;
            }
            if (deadline <= now || !wait_for_key_lock(&tag, deadline - now)) {
                result.outcome = found && hashes_differ(result.record, req.request_hash)
                                     ? Outcome::Mismatch
                                     : Outcome::InProgress;
                if (!found) clear_record(&result.record);
                return result;
            }
            lock = LOCKACQUIRE_OK;
            waited = true;
            now = GetCurrentTimestamp();
        }
        PendingClaim *claim;
        bool found = record_to_write(req.scope, req.key, now, &result.record, &claim);
        if (!found) {
            if (is_too_old(req.key, now, req.retention)) {
                clear_record(&result.record);
                result.outcome = Outcome::TooOld;
                return result;
            }
            if (waited) end_if_client_gone();
            result.outcome = Outcome::New;
            result.record = new_claim(req, now, 1);
            if (req.complete_now) {
                // Written now: a rollback of the caller's transaction (or savepoint) frees the
                // key again; nothing is left pending for commit.
                mark_completed(&result.record, now);
                insert_key(result.record);
                return result;
            }
            PendingClaim *pending = add_pending_claim(result.record);
            // Without the direct path on Citus the row is written now, inside the delegated
            // call (at pre-commit SPI would go through Citus, which refuses it there).
            if (!claims_can_wait_for_commit()) store_record(result.record, pending, 0);
            return result;
        }
        if (hashes_differ(result.record, req.request_hash) || result.record.state() == 'c') {
            result.outcome = finished_outcome(result.record, req);
        } else if (claim != nullptr || lease_is_live(result.record, now)) {
            // A committed claim of another holder: wait without blocking its complete.
            if (claim == nullptr && lock == LOCKACQUIRE_OK && pause_until(deadline, &pause_ms)) {
                release_key_lock(&tag);
                waited = true;
                continue;
            }
            result.outcome = Outcome::InProgress;
        } else {
            if (waited) end_if_client_gone();
            TimestampTz stored_expires_at = result.record.timestamp(kExpiresAt);
            take_over(&result.record, req, now);
            if (req.complete_now) mark_completed(&result.record, now);
            count_stat(kStatTakeover);
            update_key(result.record, stored_expires_at);
            result.outcome = Outcome::New;
        }
        return result;
    }
}

void check_reachable(TimestampTz now, int64 span, const char *what) {
    TimestampTz until;
    if (pg_add_s64_overflow(now, span, &until) || !IS_VALID_TIMESTAMP(until))
        raise_sql(ERRCODE_INVALID_PARAMETER_VALUE, "%s is out of range", what);
}

// The pg_enum OIDs of the outcome labels, looked up once per outcome type (a new type after
// the extension is recreated; any change to pg_type forgets them).
struct OutcomeLabels {
    Oid type = InvalidOid;
    Oid labels[std::size(kOutcomeLabels)];
} outcome_labels;

void forget_outcome_labels(Datum, int, uint32) noexcept {
    outcome_labels.type = InvalidOid;
}

Oid outcome_label(Oid outcome_type, Outcome outcome) {
    static bool registered = false;
    if (!registered) {
        CacheRegisterSyscacheCallback(TYPEOID, pg_callback(forget_outcome_labels), (Datum)0);
        registered = true;
    }
    if (outcome_labels.type != outcome_type) {
        outcome_labels.type = InvalidOid;
        for (size_t i = 0; i < std::size(kOutcomeLabels); i++) {
            Oid label =
                GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(outcome_type),
                                CStringGetDatum(kOutcomeLabels[i]));
            if (!OidIsValid(label))
                elog(ERROR, "idempotency: outcome label \"%s\" is missing", kOutcomeLabels[i]);
            outcome_labels.labels[i] = label;
        }
        outcome_labels.type = outcome_type;
    }
    return outcome_labels.labels[int(outcome)];
}

// idempotency.reservation's descriptor from the type cache (no copy per call); released by
// the caller with ReleaseTupleDesc.
TupleDesc reservation_desc(FunctionCallInfo fcinfo) {
    Oid type = get_fn_expr_rettype(fcinfo->flinfo);
    if (!OidIsValid(type) || type == RECORDOID) {
        TupleDesc desc;
        if (get_call_result_type(fcinfo, &type, &desc) != TYPEFUNC_COMPOSITE)
            elog(ERROR, "idempotency.reserve must return idempotency.reservation");
    }
    return lookup_rowtype_tupdesc(type, -1);
}

// status_code and response are shown for a replay, and for a new key when `answered` (the
// call completed it: execute_once).
Datum reservation_datum(FunctionCallInfo fcinfo, const Reservation &r, bool answered = false) {
    TupleDesc desc = reservation_desc(fcinfo);
    Oid label = outcome_label(TupleDescAttr(desc, 0)->atttypid, r.outcome);
    const KeyRecord &rec = r.record;
    bool shown = r.outcome != Outcome::TooOld;
    bool replay = r.outcome == Outcome::Replay || answered;
    // outcome, status_code, response, attempt, recovery_point, first_seen_at, locked_until,
    // expires_at
    const KeyColumn columns[] = {kStatusCode,  kResponse,    kAttempt,  kRecoveryPoint,
                                 kFirstSeenAt, kLockedUntil, kExpiresAt};
    Datum values[8] = {ObjectIdGetDatum(label)};
    bool nulls[8] = {false};
    for (int i = 0; i < 7; i++) {
        KeyColumn c = columns[i];
        bool hidden = !shown || ((c == kStatusCode || c == kResponse) && !replay) ||
                      (c == kLockedUntil && rec.state() == 'c');
        nulls[i + 1] = hidden || rec.is_null(c);
        values[i + 1] = nulls[i + 1] ? (Datum)0 : rec.values[c];
    }
    HeapTuple tuple = heap_form_tuple(desc, values, nulls);
    ReleaseTupleDesc(desc);
    return HeapTupleGetDatum(tuple);
}

// The time arguments of reserve and claim_once: retention within idempotency.max_retention;
// leases and expiry times (the retention counts from the lease's end) must stay valid
// timestamps (until the year 294276); a longer wait is a wait without end.
void check_request_times(ReserveRequest *req) {
    check_retention(req->retention);
    TimestampTz now = GetCurrentTimestamp();
    check_reachable(now, req->lock_ttl, "lock_ttl");
    check_reachable(now, req->retention, "retention");
    int64 lease_and_retention;
    if (pg_add_s64_overflow(req->lock_ttl, req->retention, &lease_and_retention))
        raise_sql(ERRCODE_INVALID_PARAMETER_VALUE, "expiry is out of range");
    check_reachable(now, lease_and_retention, "expiry");
    req->wait = Min(req->wait, END_TIMESTAMP - now);
}

// reserve's arguments: (scope, key, request_hash, lock_ttl, retention, wait); lock_ttl,
// retention and wait from argument `times_at` on (execute_once has its statement before them).
Reservation reserve_from_args(FunctionCallInfo fcinfo, int times_at = 3) {
    ReserveRequest req;
    req.scope = name_arg(fcinfo, 0, "scope");
    req.key = name_arg(fcinfo, 1, "key");
    req.request_hash = PG_ARGISNULL(2) ? nullptr : PG_GETARG_BYTEA_PP(2);
    req.lock_ttl = interval_arg_usecs(fcinfo, times_at, "lock_ttl", false);
    req.retention = interval_arg_usecs(fcinfo, times_at + 1, "retention", false);
    req.wait = interval_arg_usecs(fcinfo, times_at + 2, "wait", true);
    check_request_times(&req);

    Storage storage = open_storage();
    Reservation reservation = reserve_key(req);
    count_reserve(int(reservation.outcome));
    close_storage(storage);
    return reservation;
}

// Whether the statement running this call may be turned into a transaction block: a SELECT
// sent by the client, not a procedure or DO block (or a function one of them calls), whose
// own COMMIT or ROLLBACK the block would swallow.
bool may_open_transaction_block() {
    return ActivePortal != nullptr && ActivePortal->commandTag == CMDTAG_SELECT &&
           !SPI_inside_nonatomic_context();
}

}  // namespace

IDEM_FUNCTION(idem_reserve) {
    PreventCommandIfReadOnly("idempotency.reserve()");
    return reservation_datum(fcinfo, reserve_from_args(fcinfo));
}

// reserve_begin: reserve, and outside a transaction block the outcome 'new' opens one, as
// BEGIN would: the work and complete + COMMIT follow in it. Any other outcome leaves no
// transaction open, so a replay costs its caller one round trip and no ROLLBACK. Inside a
// transaction block (or a multi-statement query's implicit one) it is reserve.
IDEM_FUNCTION(idem_reserve_begin) {
    PreventCommandIfReadOnly("idempotency.reserve_begin()");
    bool opens = !IsTransactionBlock();
    if (opens && !may_open_transaction_block()) {
        throw SqlError(ERRCODE_INVALID_TRANSACTION_STATE,
                       "idempotency.reserve_begin cannot open a transaction block here",
                       "Outside a transaction block it must be called by a SELECT of its own, "
                       "not from a procedure or a DO block.",
                       "Call idempotency.reserve inside the transaction instead.");
    }
    Reservation reservation = reserve_from_args(fcinfo);
    Datum result = reservation_datum(fcinfo, reservation);
    if (opens && reservation.outcome == Outcome::New)
        call_postgres([]() noexcept { BeginTransactionBlock(); });
    return result;
}

// claim_once(scope, key, retention, wait): reserve and complete in one statement, for a
// consumer that applies a message in the same transaction: true the first time (the key is
// now completed in this transaction; a rollback frees it again), false once it is completed
// (a redelivery). A key another holder has (a transaction still open, or a lease not lapsed)
// is an error after `wait`, like a too-old UUIDv7 / ULID key: a consumer has no answer to
// return for those, only a message to leave unacknowledged.
IDEM_FUNCTION(idem_claim_once) {
    PreventCommandIfReadOnly("idempotency.claim_once()");
    ReserveRequest req;
    req.scope = name_arg(fcinfo, 0, "scope");
    req.key = name_arg(fcinfo, 1, "key");
    req.request_hash = nullptr;
    req.lock_ttl = 0;  // no lease: the record is completed at once
    req.retention = interval_arg_usecs(fcinfo, 2, "retention", false);
    req.wait = interval_arg_usecs(fcinfo, 3, "wait", true);
    req.complete_now = true;
    check_request_times(&req);

    Storage storage = open_storage();
    Reservation reservation = reserve_key(req);
    count_reserve(int(reservation.outcome));
    if (reservation.outcome == Outcome::New) count_stat(kStatComplete);
    close_storage(storage);
    switch (reservation.outcome) {
        case Outcome::New:
            PG_RETURN_BOOL(true);
        case Outcome::Replay:
        case Outcome::Mismatch:  // no request_hash: never; a completed key either way
            PG_RETURN_BOOL(false);
        case Outcome::InProgress:
            throw SqlError(kKeyInProgress, "idempotency key is in progress",
                           "Another transaction holds the key: a competing consumer whose "
                           "transaction is still open, or a claim whose lease has not lapsed.",
                           "Leave the message unacknowledged (or requeue it) and retry later, "
                           "or pass a wait to wait for the holder.");
        case Outcome::TooOld:
            throw SqlError(kKeyTooOld, "idempotency key is older than the retention window",
                           "The key is a UUIDv7 or ULID made before now - retention: a record "
                           "of its first delivery may have expired already.",
                           "Dead-letter the message, or claim it with a longer retention.");
    }
    PG_RETURN_BOOL(false);
}

// --- complete, fail, checkpoint --------------------------------------------------------------

namespace {

bool same_result(const KeyRecord &record, int32 status_code, const Jsonb *response) {
    if (DatumGetInt32(record.values[kStatusCode]) != status_code) return false;
    if (record.is_null(kResponse) || response == nullptr)
        return record.is_null(kResponse) && response == nullptr;
    return DatumGetBool(
        DirectFunctionCall2(jsonb_eq, record.values[kResponse], PointerGetDatum(response)));
}

Datum jsonb_arg(FunctionCallInfo fcinfo, int n, const char *what, bool *is_null) {
    *is_null = PG_ARGISNULL(n);
    if (*is_null) return (Datum)0;
    Jsonb *value = PG_GETARG_JSONB_P(n);
    if (VARSIZE(value) > core::kMaxResponseBytes)
        throw SqlError(ERRCODE_PROGRAM_LIMIT_EXCEEDED, psprintf("%s is too large", what),
                       psprintf("It takes %zu bytes as jsonb; the limit is %zu bytes.",
                                size_t(VARSIZE(value)), core::kMaxResponseBytes),
                       "Store a reference to the payload instead of the payload itself.");
    return PointerGetDatum(value);
}

// The claim a complete, fail or checkpoint acts on: the key's live record, read under its
// lock; refused when there is none or when the call's attempt (argument attempt_arg) is stale.
struct ClaimCall {
    Storage storage;
    TimestampTz now;
    KeyRecord record;
    PendingClaim *claim;            // the record is this transaction's unwritten claim
    TimestampTz stored_expires_at;  // the record's expires_at as read
};

ClaimCall open_claim_call(FunctionCallInfo fcinfo, Datum scope, Datum key, const char *call,
                          int attempt_arg) {
    ClaimCall c;
    c.storage = open_storage();
    lock_key(scope, key);
    c.now = GetCurrentTimestamp();
    if (!record_to_write(scope, key, c.now, &c.record, &c.claim))
        raise_no_claim(call,
                       "The key has no live record: it was never reserved, was forgotten, "
                       "or its retention window has ended.");
    c.stored_expires_at = c.record.timestamp(kExpiresAt);
    int32 current = c.record.attempt();
    if (attempt_is_stale(fcinfo, attempt_arg, current)) raise_stale(fcinfo, attempt_arg, current);
    return c;
}

// Stores the answer in a claim being processed.
void complete_record(ClaimCall *c, int32 status_code, Datum response, bool response_null) {
    KeyRecord &record = c->record;
    record.set_state("completed");
    record.set(kStatusCode, Int32GetDatum(status_code));
    record.set_or_null(kResponse, response, response_null);
    record.set(kCompletedAt, TimestampTzGetDatum(c->now));
    // A complete after the lease lapsed keeps the answer for the retention after it.
    if (!record.is_null(kLockedUntil))
        record.set(kExpiresAt, TimestampTzGetDatum(Min(
                                   core::expiry_at_complete(c->stored_expires_at,
                                                            record.timestamp(kLockedUntil), c->now),
                                   END_TIMESTAMP - 1)));
    record.set_null(kLockedUntil);
    store_record(record, c->claim, c->stored_expires_at);
    count_stat(kStatComplete);
}

}  // namespace

IDEM_FUNCTION(idem_complete) {
    PreventCommandIfReadOnly("idempotency.complete()");
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");
    int32 status_code = DatumGetInt32(required_arg(fcinfo, 2, "status_code"));
    core::check_status_code(status_code);
    bool response_null;
    Datum response = jsonb_arg(fcinfo, 3, "response", &response_null);

    ClaimCall c = open_claim_call(fcinfo, scope, key, "complete", 4);
    KeyRecord &record = c.record;
    if (record.state() == 'c') {
        if (!same_result(record, status_code, response_null ? nullptr : DatumGetJsonbP(response)))
            throw SqlError(kResultConflict, "key is already completed with a different result",
                           psprintf("The stored status_code is %d.",
                                    DatumGetInt32(record.values[kStatusCode])));
    } else if (record.state() == 'f') {
        raise_no_claim("complete", "The last attempt failed and released its claim.");
    } else {
        complete_record(&c, status_code, response, response_null);
    }
    close_storage(c.storage);
    PG_RETURN_VOID();
}

IDEM_FUNCTION(idem_fail) {
    PreventCommandIfReadOnly("idempotency.fail()");
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");
    bool error_null;
    Datum error = jsonb_arg(fcinfo, 2, "error", &error_null);

    ClaimCall c = open_claim_call(fcinfo, scope, key, "fail", 3);
    KeyRecord &record = c.record;
    if (record.state() != 'p')
        raise_no_claim("fail", record.state() == 'c' ? "The key is already completed."
                                                     : "The claim was already released.");
    record.set_state("failed");
    record.set_or_null(kLastError, error, error_null);
    record.set_null(kLockedUntil);
    store_record(record, c.claim, c.stored_expires_at);
    count_stat(kStatFail);
    close_storage(c.storage);
    PG_RETURN_VOID();
}

IDEM_FUNCTION(idem_checkpoint) {
    PreventCommandIfReadOnly("idempotency.checkpoint()");
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");
    bool point_null = PG_ARGISNULL(2);

    ClaimCall c = open_claim_call(fcinfo, scope, key, "checkpoint", 3);
    KeyRecord &record = c.record;
    if (record.state() != 'p') raise_no_claim("checkpoint", "The key is not being processed.");
    record.set_or_null(kRecoveryPoint, PG_GETARG_DATUM(2), point_null);
    // A claim still in memory is written now: a savepoint rolled back later undoes the
    // checkpoint with the row.
    store_record(record, c.claim, c.stored_expires_at);
    close_storage(c.storage);
    PG_RETURN_VOID();
}

// --- execute_once's claim and answer (execute_once.cpp) --------------------------------------

StatementClaim reserve_for_statement(FunctionCallInfo fcinfo, int times_at) {
    Reservation reservation = reserve_from_args(fcinfo, times_at);
    StatementClaim claim;
    claim.claimed = reservation.outcome == Outcome::New;
    claim.attempt = claim.claimed ? reservation.record.attempt() : 0;
    claim.reservation = claim.claimed ? (Datum)0 : reservation_datum(fcinfo, reservation);
    return claim;
}

Datum complete_statement_claim(FunctionCallInfo fcinfo, const StatementClaim &claim,
                               int32 status_code, Datum response, bool response_null) {
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");
    ClaimCall c;
    c.storage = open_storage();
    lock_key(scope, key);
    c.now = GetCurrentTimestamp();
    if (!record_to_write(scope, key, c.now, &c.record, &c.claim) || c.record.state() != 'p' ||
        c.record.attempt() != claim.attempt)
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "the statement of idempotency.execute_once changed its own key",
                       "The key's claim was completed, failed or forgotten while the statement "
                       "ran.",
                       "The statement must not call complete, fail or forget on its own key.");
    c.stored_expires_at = c.record.timestamp(kExpiresAt);
    complete_record(&c, status_code, response, response_null);
    close_storage(c.storage);
    return reservation_datum(fcinfo, Reservation{Outcome::New, c.record}, true);
}

// --- lookup, forget -------------------------------------------------------------------------

IDEM_FUNCTION(idem_lookup) {
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");

    auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
    InitMaterializedSRF(fcinfo, 0);
    Storage storage = open_storage(Access::kRead);
    KeyRecord record;
    PendingClaim *claim;
    bool found = current_record(scope, key, GetCurrentTimestamp(), &record, &claim);
    close_storage(storage);
    if (found) {
        // state, status_code, response, request_hash, attempt, recovery_point, last_error,
        // first_seen_at, completed_at, locked_until, expires_at
        const KeyColumn columns[] = {kState,       kStatusCode,    kResponse,  kRequestHash,
                                     kAttempt,     kRecoveryPoint, kLastError, kFirstSeenAt,
                                     kCompletedAt, kLockedUntil,   kExpiresAt};
        Datum values[11];
        bool nulls[11];
        for (int i = 0; i < 11; i++) {
            values[i] = record.values[columns[i]];
            nulls[i] = record.nulls[columns[i]];
        }
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
    return (Datum)0;
}

IDEM_FUNCTION(idem_forget) {
    PreventCommandIfReadOnly("idempotency.forget()");
    Datum scope = name_arg(fcinfo, 0, "scope");
    Datum key = name_arg(fcinfo, 1, "key");

    Storage storage = open_storage();
    lock_key(scope, key);
    KeyRecord record;
    bool live = find_live_key(scope, key, GetCurrentTimestamp(), &record);
    bool pending = forget_pending_claims(scope, key);
    delete_key(scope, key);
    close_storage(storage);
    PG_RETURN_BOOL(live || pending);
}

}  // namespace idem::pg
