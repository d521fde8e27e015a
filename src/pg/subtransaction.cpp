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
        MemoryContextSwitchTo(context);
        *error = CopyErrorData();
        FlushErrorState();
        IDEM_FAULT_POINT("subtransaction-rollback");
        RollbackAndReleaseCurrentSubTransaction();
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    return done;
}

}  // namespace idem::pg
