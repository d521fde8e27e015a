// The C++/PostgreSQL error boundary.
//
// PostgreSQL raises errors with longjmp, which skips C++ destructors; a C++ exception that
// reaches PostgreSQL aborts the backend. Two rules follow:
//  - every SQL-callable function is defined with IDEM_FUNCTION, whose body runs inside
//    guarded(): any exception is caught there and re-raised as ereport(ERROR) only after
//    every C++ object of the body is destroyed;
//  - no PostgreSQL function that may ereport is called while a C++ object with a destructor
//    is alive: C++ work (the core) runs in its own scope, on values converted beforehand, and
//    its results are plain data by the time PostgreSQL is called again.
#pragma once

#include "pg/postgres_headers.hpp"

#include "pg/schema_version.hpp"

#include <exception>

namespace idem::pg {

// An error of our own, raised as ereport(ERROR, errcode(sqlstate), ...) by the guard.
// Texts are copied into fixed buffers so that raising it allocates nothing.
class SqlError : public std::exception {
  public:
    SqlError(int sqlstate, const char *message, const char *detail = nullptr,
             const char *hint = nullptr);
    const char *what() const noexcept override { return message_; }
    int sqlstate() const noexcept { return sqlstate_; }
    const char *detail() const noexcept { return detail_[0] ? detail_ : nullptr; }
    const char *hint() const noexcept { return hint_[0] ? hint_ : nullptr; }

  private:
    int sqlstate_;
    char message_[256];
    char detail_[512];
    char hint_[256];
};

// What the guard raises: plain data, so that nothing needs destroying when ereport longjmps.
struct ErrorReport {
    int sqlstate;
    char message[256];
    char detail[512];
    char hint[256];
};

// Fills report from the exception being handled; call only inside a catch block.
void describe_current_exception(ErrorReport *report) noexcept;

// Raises report as ereport(ERROR) (never returns).
[[noreturn]] void raise_report(const ErrorReport &report);

// Runs body(); any exception becomes an ereport(ERROR), raised once the exception object is
// gone. Nothing with a destructor lives in this frame, as body's errors may longjmp through it.
template <typename Body>
Datum guarded(Body &&body) noexcept {
    ErrorReport report;
    try {
        return body();
    } catch (...) {
        describe_current_exception(&report);
    }
    raise_report(report);
}

}  // namespace idem::pg

// Defines the SQL-callable C function `name`; the braces that follow are its C++ body,
// which sees `fcinfo` and returns a Datum.
#define IDEM_FUNCTION(name)                            \
    static Datum name##_body(FunctionCallInfo fcinfo); \
    extern "C" {                                       \
    PG_FUNCTION_INFO_V1(name);                         \
    }                                                  \
    extern "C" Datum name(PG_FUNCTION_ARGS) {          \
        return idem::pg::guarded([fcinfo]() {          \
            idem::pg::require_schema_version();        \
            return name##_body(fcinfo);                \
        });                                            \
    }                                                  \
    static Datum name##_body(FunctionCallInfo fcinfo)
