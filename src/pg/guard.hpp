// The C++/PostgreSQL error boundary, and the rule the glue follows (docs/development.md).
//
// PostgreSQL raises errors with longjmp, which skips C++ destructors; a C++ exception that
// reaches PostgreSQL aborts the backend; a C++ exception that leaves a PG_TRY block leaves
// PG_exception_stack pointing at a dead frame, and the next error longjmps into it. So:
//  1. Every SQL-callable function is defined with IDEM_FUNCTION: its body runs in guarded(),
//     which catches every exception and raises it as ereport(ERROR) once every C++ object of
//     the body is destroyed.
//  2. guarded() remembers PostgreSQL's error stack (PG_exception_stack, error_context_stack)
//     on entry; if an exception left a PG_TRY block meanwhile, it puts the stack back before
//     raising (and logs the bug), never longjmps into the dead frame.
//  3. No C++ code that can throw runs inside PG_TRY: such code runs in guarded() there, which
//     turns its exception into a PostgreSQL error before the block sees it.
//  4. No PostgreSQL function that may ereport is called while a C++ object with a destructor
//     is alive, except through call_postgres(), which turns the error into a C++ exception.
//     C++ work (the core) runs in its own scope, on values converted beforehand.
//  5. Every function PostgreSQL calls directly (transaction and cache callbacks, shared-memory
//     hooks, output plugin callbacks, background worker mains, signal handlers) is noexcept,
//     and so is the glue it reaches: a throw there ends in std::terminate (a deterministic
//     abort), never in a longjmp through C++ frames. Callbacks are registered through
//     pg_callback(), which does not compile for a function that is not noexcept.
#pragma once

#include "pg/postgres_headers.hpp"

#include "pg/schema_version.hpp"

#include <exception>
#include <type_traits>

namespace idem::pg {

// An error of our own (or a PostgreSQL error caught by call_postgres), raised as
// ereport(ERROR, errcode(sqlstate), ...) by the guard. Texts are copied into fixed buffers,
// cut on a UTF-8 character boundary, so that raising it allocates nothing.
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

// PostgreSQL's error stack at one moment.
struct ErrorStack {
    sigjmp_buf *exception_stack;
    ErrorContextCallback *context_stack;
};
inline ErrorStack current_error_stack() noexcept {
    return {PG_exception_stack, error_context_stack};
}

// Copies text into target[size], cut on a UTF-8 character boundary.
void copy_text(char *target, std::size_t size, const char *text) noexcept;

// Fills report from the exception being handled; call only inside a catch block.
void describe_current_exception(ErrorReport *report) noexcept;

// Raises report as ereport(ERROR) (never returns), with the error stack of `entry` in force:
// one that differs is stale (an exception left a PG_TRY block) and is put back first.
[[noreturn]] void raise_report(const ErrorReport &report, const ErrorStack &entry) noexcept;

// Runs body(); any exception becomes an ereport(ERROR), raised once the exception object is
// gone. Nothing with a destructor lives in this frame, as body's errors may longjmp through it.
template <typename Body>
auto guarded(Body &&body) noexcept -> decltype(body()) {
    const ErrorStack entry = current_error_stack();
    ErrorReport report;
    try {
        return body();
    } catch (...) {
        describe_current_exception(&report);
    }
    raise_report(report, entry);
}

// Runs fn(arg), a call into PostgreSQL that may ereport, from C++ code that holds objects with
// destructors: an error becomes a thrown SqlError with its SQLSTATE, message, detail and hint.
// The error is flushed, not handled: the caller unwinds and lets the guard raise it again, so
// the transaction aborts as it would have (locks, buffers and memory go with it).
void call_postgres(void (*fn)(void *) noexcept, void *arg);

// The same for a callable, which must be noexcept (it runs inside PG_TRY).
template <typename Call>
void call_postgres(Call &&call) {
    using Fn = std::remove_reference_t<Call>;
    static_assert(noexcept(call()), "call_postgres runs its call inside PG_TRY: noexcept only");
    call_postgres([](void *c) noexcept { (*static_cast<Fn *>(c))(); }, &call);
}

// The function pointer a PostgreSQL registration takes, from a noexcept function only.
template <typename R, typename... Args>
constexpr auto pg_callback(R (*fn)(Args...) noexcept) -> R (*)(Args...) {
    return fn;
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
