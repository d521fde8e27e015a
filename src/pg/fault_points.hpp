// Named fault points in the extension's own code, for the `faults` test suite (test/faults).
//
// IDEM_FAULT_POINT("maintain-create") is the point "idempotency-maintain-create":
//  - on a server with injection points (17 and later built with --enable-injection-points),
//    a PostgreSQL injection point; tests attach an action with the injection_points module:
//    SELECT injection_points_attach('idempotency-maintain-create', 'error'), or 'notice', or
//    'wait' (until injection_points_wakeup, or an interrupt);
//  - on any other server, in a build made with `make IDEM_FAULT_POINTS=1` (what the faults
//    suite builds there), the extension's own point, driven by the setting
//    idempotency.fault_points = 'idempotency-maintain-create=error, ...' (superuser), with the
//    same actions and messages ('wait' ends only with an interrupt);
//  - anywhere else (production builds), nothing at all: the macro compiles to nothing, and the
//    setting does not exist.
#pragma once

#include "pg/compat.hpp"
#include "pg/guard.hpp"

#include <new>

namespace idem::pg {

#if defined(IDEM_FAULT_POINTS) && !(PG_VERSION_NUM >= 170000 && defined(USE_INJECTION_POINTS))
#define IDEM_OWN_FAULT_POINTS 1
// Defines idempotency.fault_points; called from _PG_init.
void define_fault_points_setting() noexcept;
// Runs the action the setting gives `name`, if any.
void run_own_fault_point(const char *name) noexcept;
#endif

// The point `name` (a string literal); may raise an error (ereport: C-style code only).
#if defined(IDEM_OWN_FAULT_POINTS)
#define IDEM_FAULT_POINT(name) ::idem::pg::run_own_fault_point("idempotency-" name)
#elif PG_VERSION_NUM >= 170000 && defined(USE_INJECTION_POINTS)
#define IDEM_FAULT_POINT(name) ::idem::pg::compat::injection_point("idempotency-" name)
#endif

// For C++ code that holds objects with destructors: the point runs through call_postgres, and
// an error raised there becomes a thrown std::bad_alloc (an allocation failure).
#if defined(IDEM_FAULT_POINT)
#define IDEM_ALLOCATION_FAULT_POINT(name) \
    ::idem::pg::allocation_fault([]() noexcept { IDEM_FAULT_POINT(name); })
#else
#define IDEM_FAULT_POINT(name) ((void)0)
#define IDEM_ALLOCATION_FAULT_POINT(name) ((void)0)
#endif

template <typename Point>
void allocation_fault(Point &&point) {
    try {
        call_postgres(point);
    } catch (const SqlError &) {
        throw std::bad_alloc();
    }
}

}  // namespace idem::pg
