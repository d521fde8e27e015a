// What execute_once (execute_once.cpp) takes from the key lifecycle (key_lifecycle.cpp): a
// reserve before its statement runs and a complete after it, in the caller's transaction.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

struct StatementClaim {
    bool claimed;       // the outcome was 'new': run the statement, then complete
    int32 attempt;      // the claim's attempt, when claimed
    Datum reservation;  // otherwise: the idempotency.reservation to return as it is
};

// reserve with the call's arguments scope, key and request_hash (0, 1, 2) and lock_ttl,
// retention and wait (times_at, times_at + 1, times_at + 2).
StatementClaim reserve_for_statement(FunctionCallInfo fcinfo, int times_at);

// Completes the claim with status_code and response, and returns the reservation (outcome
// 'new', with status_code and response). Refused (55000) when the claim is no longer this
// attempt's claim in progress: the statement completed, failed or forgot its own key.
Datum complete_statement_claim(FunctionCallInfo fcinfo, const StatementClaim &claim,
                               int32 status_code, Datum response, bool response_null);

}  // namespace idem::pg
