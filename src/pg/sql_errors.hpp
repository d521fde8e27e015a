// SQLSTATEs of our own (class IK, documented in docs/reference.md) and argument checks shared by
// the SQL-callable functions.
#pragma once

#include "pg/guard.hpp"

#include <string_view>

namespace idem::pg {

// complete / fail / checkpoint with an attempt that is no longer the key's current one.
constexpr int kStaleAttempt = MAKE_SQLSTATE('I', 'K', '0', '0', '1');
// complete of a key already completed with a different status_code or response.
constexpr int kResultConflict = MAKE_SQLSTATE('I', 'K', '0', '0', '2');
// claim_once of a key another holder has (reserve's outcome in_progress).
constexpr int kKeyInProgress = MAKE_SQLSTATE('I', 'K', '0', '0', '3');
// claim_once of a UUIDv7 / ULID key older than the retention (reserve's outcome too_old).
constexpr int kKeyTooOld = MAKE_SQLSTATE('I', 'K', '0', '0', '4');

// Raises SqlError(sqlstate, printf-style message).
[[noreturn]] void raise_sql(int sqlstate, const char *format, ...) pg_attribute_printf(2, 3);

inline std::string_view text_view(const text *value) {
    return {VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value)};
}

// Argument n, which must not be NULL (22004 names `what`).
Datum required_arg(FunctionCallInfo fcinfo, int n, const char *what);

// Scope or key argument: not NULL, not empty, at most 255 bytes.
Datum name_arg(FunctionCallInfo fcinfo, int n, const char *what);

// Interval argument in microseconds (a month counts 30 days); must be > 0, or >= 0 when
// zero_allowed.
int64 interval_arg_usecs(FunctionCallInfo fcinfo, int n, const char *what, bool zero_allowed);

// The creation time embedded in a UUIDv7 or ULID key; false for any other key.
bool key_creation_time(const text *key, TimestampTz *time);

}  // namespace idem::pg
