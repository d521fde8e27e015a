// The one subtransaction runner of the glue.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// Runs step(arg) in an internal subtransaction; true when it ran to the end (its work and
// locks then belong to the caller's transaction). On an error the subtransaction is rolled
// back, the caller's memory context and resource owner are in force again, the error state is
// flushed and *error holds a copy of the error (in the caller's memory context), for the caller
// to re-raise (ReThrowError) or report. C-style: step holds no C++ object and throws nothing.
bool run_in_subtransaction(void (*step)(void *) noexcept, void *arg, ErrorData **error) noexcept;

}  // namespace idem::pg
