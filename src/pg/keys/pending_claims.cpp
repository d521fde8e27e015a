#include "pg/keys/pending_claims.hpp"
#include "pg/fault_points.hpp"
#include "pg/guard.hpp"

namespace idem::pg {

namespace {

PendingClaim *claims = nullptr;  // lives in TopTransactionContext

bool is_by_value(KeyColumn column) {
    return column == kAttempt || column == kStatusCode || column >= kFirstSeenAt;
}

bool same_text(Datum a, Datum b) {
    text *x = DatumGetTextPP(a);
    text *y = DatumGetTextPP(b);
    return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
           memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

bool matches(const PendingClaim *claim, Datum scope, Datum key) {
    return same_text(claim->record.values[kKey], key) &&
           same_text(claim->record.values[kScope], scope);
}

void write_unwritten_claims() noexcept {
    if (claims == nullptr) return;
    bool connected = false;
    Storage storage{};
    for (PendingClaim *claim = claims; claim != nullptr; claim = claim->next) {
        if (claim->written_in != InvalidSubTransactionId ||
            claim->forgotten_in != InvalidSubTransactionId)
            continue;
        if (!connected) {
            // Portals are closed by now: the statements need a snapshot of their own.
            PushActiveSnapshot(GetTransactionSnapshot());
            storage = open_storage();
            connected = true;
        }
        insert_key(claim->record);
        claim->written_in = GetCurrentSubTransactionId();
    }
    if (connected) {
        // The claims are written, the transaction not committed yet.
        IDEM_FAULT_POINT("claim-pre-commit");
        close_storage(storage);
        PopActiveSnapshot();
    }
}

void on_transaction_event(XactEvent event, void *) noexcept {
    switch (event) {
        case XACT_EVENT_PRE_COMMIT:
        case XACT_EVENT_PRE_PREPARE:
            write_unwritten_claims();
            break;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PARALLEL_ABORT:
            claims = nullptr;  // its memory goes with TopTransactionContext
            break;
        default:
            break;
    }
}

void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId parent,
                             void *) noexcept {
    if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB) return;
    bool abort = event == SUBXACT_EVENT_ABORT_SUB;
    // On abort: the subtransaction's claims go, its writes and forgets are undone.
    // On commit: what it did now belongs to its parent.
    SubTransactionId undone = abort ? InvalidSubTransactionId : parent;
    PendingClaim **link = &claims;
    while (*link != nullptr) {
        PendingClaim *claim = *link;
        if (abort && claim->created_in == subxact) {
            *link = claim->next;
            continue;
        }
        if (!abort && claim->created_in == subxact) claim->created_in = parent;
        if (claim->written_in == subxact) claim->written_in = undone;
        if (claim->forgotten_in == subxact) claim->forgotten_in = undone;
        link = &claim->next;
    }
}

Datum copy_to_transaction(Datum value, KeyColumn column) {
    if (is_by_value(column)) return value;
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    Datum copy = datumCopy(value, false, -1);
    MemoryContextSwitchTo(old);
    return copy;
}

}  // namespace

void register_pending_claim_callbacks() {
    RegisterXactCallback(pg_callback(on_transaction_event), nullptr);
    RegisterSubXactCallback(pg_callback(on_subtransaction_event), nullptr);
}

PendingClaim *find_unwritten_claim(Datum scope, Datum key) {
    for (PendingClaim *claim = claims; claim != nullptr; claim = claim->next)
        if (claim->written_in == InvalidSubTransactionId &&
            claim->forgotten_in == InvalidSubTransactionId && matches(claim, scope, key))
            return claim;
    return nullptr;
}

PendingClaim *add_pending_claim(const KeyRecord &record) {
    auto *claim = static_cast<PendingClaim *>(
        MemoryContextAllocZero(TopTransactionContext, sizeof(PendingClaim)));
    for (int c = 0; c < kKeyColumnCount; c++) {
        claim->record.nulls[c] = record.nulls[c];
        if (!record.nulls[c])
            claim->record.values[c] =
                copy_to_transaction(record.values[c], static_cast<KeyColumn>(c));
    }
    claim->created_in = GetCurrentSubTransactionId();
    claim->written_in = InvalidSubTransactionId;
    claim->forgotten_in = InvalidSubTransactionId;
    claim->next = claims;
    claims = claim;
    return claim;
}

void mark_claim_written(PendingClaim *claim) {
    claim->written_in = GetCurrentSubTransactionId();
}

bool forget_pending_claims(Datum scope, Datum key) {
    bool found = false;
    for (PendingClaim *claim = claims; claim != nullptr; claim = claim->next) {
        if (claim->forgotten_in == InvalidSubTransactionId && matches(claim, scope, key)) {
            claim->forgotten_in = GetCurrentSubTransactionId();
            found = true;
        }
    }
    return found;
}

}  // namespace idem::pg
