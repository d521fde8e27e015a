#include "pg/subtransaction.hpp"

#include "pg/fault_points.hpp"

extern "C" {
#include "utils/resowner.h"
}

namespace idem::pg {

bool run_in_subtransaction(void (*step)(void *) noexcept, void *arg, ErrorData **error) noexcept {
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile bool done = false;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
    PG_TRY();
    {
        step(arg);
        ReleaseCurrentSubTransaction();
        done = true;
    }
    PG_CATCH();
    {
        // Rolled back first, as PostgresMain aborts before it flushes the error (the error
        // data lives in ErrorContext, which the rollback leaves alone): an error while copying
        // the error (out of memory) then leaves no subtransaction open behind it, which would
        // leave the session's transaction aborted.
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        IDEM_FAULT_POINT("subtransaction-rolled-back");
        *error = CopyErrorData();
        FlushErrorState();
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    return done;
}

}  // namespace idem::pg
