// Counters behind idempotency.stats: reserves by outcome, completes, fails, takeovers.
// Kept per database in shared memory when the library is preloaded; otherwise per session.
// Not transactional: a call counts when it returns, even if its transaction rolls back.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

enum StatCounter {
    kStatReserveNew,  // the order of idempotency.outcome
    kStatReserveReplay,
    kStatReserveInProgress,
    kStatReserveMismatch,
    kStatReserveTooOld,
    kStatComplete,
    kStatFail,
    kStatTakeover,
    kStatCount
};

// Registers the shared-memory request; called from _PG_init (does nothing unless preloaded).
void register_stats_shmem();

void count_stat(StatCounter counter);
// outcome: index in idempotency.outcome (new, replay, in_progress, mismatch, too_old).
inline void count_reserve(int outcome) {
    count_stat(StatCounter(kStatReserveNew + outcome));
}

}  // namespace idem::pg
