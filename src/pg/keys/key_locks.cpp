// key_lock_id: the hash a key's advisory lock is taken on, as the views that read pg_locks
// (idempotency.key_locks, in_flight) match it against committed claims.

#include "pg/guard.hpp"
#include "pg/sql_errors.hpp"

#include "core/key_rules.hpp"

IDEM_FUNCTION(idem_key_lock_id) {
    uint64 hash = idem::core::lock_hash(idem::pg::text_view(PG_GETARG_TEXT_PP(0)),
                                        idem::pg::text_view(PG_GETARG_TEXT_PP(1)));
    PG_RETURN_INT64(int64(hash));
}
