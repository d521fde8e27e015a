// Claims reserved in the current transaction and not yet written to idempotency.keys.
//
// A new key is not inserted by reserve: complete or fail in the same transaction then writes
// the finished row once (one row write, no insert-then-update). A claim still pending when
// the transaction commits (or prepares) is inserted as 'processing' just before, so it
// survives for a later complete. Aborting a (sub)transaction forgets what it added.
#pragma once

#include "pg/storage/key_store.hpp"

namespace idem::pg {

struct PendingClaim {
    KeyRecord record;               // the 'processing' row to insert at commit
    SubTransactionId created_in;    // forgotten if this subtransaction aborts
    SubTransactionId written_in;    // InvalidSubTransactionId while only in memory
    SubTransactionId forgotten_in;  // set by forget; undone if this subtransaction aborts
    PendingClaim *next;
};

// Registers the transaction callbacks; called once from _PG_init.
void register_pending_claim_callbacks();

// The pending claim of (scope, key) not yet written to the table (nor forgotten), or nullptr.
PendingClaim *find_unwritten_claim(Datum scope, Datum key);

// Remembers a new claim; copies the record into transaction memory.
PendingClaim *add_pending_claim(const KeyRecord &record);

// The claim's row was written by the caller in the current subtransaction.
void mark_claim_written(PendingClaim *claim);

// Forgets the claims of (scope, key), written or not; true if there was one. A rolled-back
// subtransaction brings them back.
bool forget_pending_claims(Datum scope, Datum key);

}  // namespace idem::pg
