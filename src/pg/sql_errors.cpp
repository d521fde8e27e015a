#include "pg/sql_errors.hpp"

#include "core/key_rules.hpp"
#include "core/key_time.hpp"

#include <cstdarg>
#include <cstdio>

namespace idem::pg {

void raise_sql(int sqlstate, const char *format, ...) {
    char message[256];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof message, format, args);
    va_end(args);
    throw SqlError(sqlstate, message);
}

Datum required_arg(FunctionCallInfo fcinfo, int n, const char *what) {
    if (PG_ARGISNULL(n)) raise_sql(ERRCODE_NULL_VALUE_NOT_ALLOWED, "%s must not be null", what);
    return PG_GETARG_DATUM(n);
}

Datum name_arg(FunctionCallInfo fcinfo, int n, const char *what) {
    Datum value = required_arg(fcinfo, n, what);
    const text *name = DatumGetTextPP(value);
    core::check_name(what, text_view(name));
    return PointerGetDatum(name);
}

int64 interval_arg_usecs(FunctionCallInfo fcinfo, int n, const char *what, bool zero_allowed) {
    const Interval *span = DatumGetIntervalP(required_arg(fcinfo, n, what));
    // Overflow-checked: time + (months * 30 + days) * a day.
    int64 days = int64(span->month) * DAYS_PER_MONTH + span->day;
    int64 usecs;
    if (__builtin_mul_overflow(days, USECS_PER_DAY, &usecs) ||
        __builtin_add_overflow(usecs, span->time, &usecs))
        raise_sql(ERRCODE_INVALID_PARAMETER_VALUE, "%s is out of range", what);
    if (usecs < 0 || (usecs == 0 && !zero_allowed))
        raise_sql(ERRCODE_INVALID_PARAMETER_VALUE, "%s must be %s", what,
                  zero_allowed ? "zero or positive" : "positive");
    return usecs;
}

bool key_creation_time(const text *key, TimestampTz *time) {
    std::optional<int64_t> unix_ms = core::key_time_ms(text_view(key));
    if (!unix_ms) return false;
    // PostgreSQL timestamps count microseconds from 2000-01-01.
    constexpr int64 kEpochShiftMs =
        int64(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
    *time = (*unix_ms - kEpochShiftMs) * 1000;
    return true;
}

}  // namespace idem::pg
