// The extension's own fault points (fault_points.hpp), compiled only into a build made with
// `make IDEM_FAULT_POINTS=1` for a server without injection points.

#include "pg/fault_points.hpp"

#if defined(IDEM_OWN_FAULT_POINTS)

#include <cstring>

extern "C" {
#include "utils/guc.h"
}

namespace idem::pg {

namespace {

char *fault_points = nullptr;  // idempotency.fault_points

// The action the setting gives `name` ("error", "notice", "wait"), copied into action[16];
// false when it gives none.
bool action_of(const char *name, char *action) noexcept {
    if (fault_points == nullptr) return false;
    size_t length = strlen(name);
    for (const char *p = fault_points; *p != '\0';) {
        while (*p == ' ' || *p == ',') p++;
        const char *end = p + strcspn(p, ",");
        if (size_t(end - p) > length && strncmp(p, name, length) == 0 && p[length] == '=') {
            const char *value = p + length + 1;
            size_t n = Min(size_t(end - value), size_t(15));
            while (n > 0 && value[n - 1] == ' ') n--;
            memcpy(action, value, n);
            action[n] = '\0';
            return true;
        }
        p = end;
    }
    return false;
}

}  // namespace

void define_fault_points_setting() noexcept {
    DefineCustomStringVariable("idempotency.fault_points",
                               "Test builds only: actions of the extension's fault points.",
                               "'name=action, ...'; action error, notice or wait.", &fault_points,
                               "", PGC_SUSET, GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
}

void run_own_fault_point(const char *name) noexcept {
    char action[16];
    if (!action_of(name, action)) return;
    // The messages of PostgreSQL's injection_points module, so tests read the same on every
    // server.
    if (strcmp(action, "error") == 0) elog(ERROR, "error triggered for injection point %s", name);
    if (strcmp(action, "notice") == 0) {
        elog(NOTICE, "notice triggered for injection point %s", name);
        return;
    }
    if (strcmp(action, "wait") != 0)
        elog(ERROR, "incorrect action \"%s\" for injection point %s", action, name);
    // Until an interrupt (a cancel, a termination) or the postmaster's death.
    for (;;) {
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000L,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

}  // namespace idem::pg

#endif
