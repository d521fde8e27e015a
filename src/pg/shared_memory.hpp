// The library's one registration of shared memory: a single pair of shmem request and startup
// hooks, chained once, runs the request and startup of every part that keeps state there
// (stats, the next_key cache, failed maintenance runs).
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// While preloading (does nothing otherwise): request() runs in the shmem request hook
// (RequestAddinShmemSpace, RequestNamedLWLockTranche), startup() in the startup hook under
// AddinShmemInitLock, in the order added; both also in the postmaster after a crash.
void add_shared_memory(void (*request)() noexcept, void (*startup)() noexcept) noexcept;

// The same for one plain struct of `size` bytes named `name`: at startup *where points at it
// and init(found) runs (found: it existed already).
void add_shared_struct(const char *name, Size size, void **where,
                       void (*init)(bool found) noexcept) noexcept;

}  // namespace idem::pg
