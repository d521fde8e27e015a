// The C++/PostgreSQL error boundary.
//
// PostgreSQL raises errors with longjmp, which skips C++ destructors; a C++ exception that
// reaches PostgreSQL aborts the backend. Two rules follow:
//  - every SQL-callable function is defined with IDEM_FUNCTION, whose body runs inside
//    guarded(): any exception is caught there and re-raised as ereport(ERROR) only after
//    every C++ object of the body is destroyed;
//  - while C++ objects with destructors are alive, PostgreSQL functions that may ereport are
//    called through pg_call(), which turns their error into a PgRethrow exception.
// Code that holds no such objects may call PostgreSQL directly.
#pragma once

#include "pg/postgres_headers.hpp"

#include <exception>
#include <type_traits>
#include <utility>

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

// A PostgreSQL error caught by pg_call, carried across C++ frames and re-thrown by the guard.
class PgRethrow : public std::exception {
public:
    explicit PgRethrow(ErrorData *edata) : edata_(edata) {}
    const char *what() const noexcept override { return "postgresql error"; }
    ErrorData *edata() const noexcept { return edata_; }

private:
    ErrorData *edata_;
};

// Raises the ereport for an exception caught at the boundary (never returns).
[[noreturn]] void raise_caught(std::exception_ptr caught);

// Runs body(); any exception becomes an ereport(ERROR) raised after body's frame is gone.
template <typename Body>
Datum guarded(Body &&body) noexcept {
    std::exception_ptr caught;
    try {
        return body();
    } catch (...) {
        caught = std::current_exception();
    }
    raise_caught(std::move(caught));
}

// Calls a PostgreSQL function that may ereport; its error becomes PgRethrow. `call` itself
// must hold no object with a destructor, since the longjmp leaves its frame.
template <typename Call>
auto pg_call(Call &&call) -> decltype(call()) {
    MemoryContext caller_context = CurrentMemoryContext;
    ErrorData *volatile edata = nullptr;
    using Result = decltype(call());
    if constexpr (std::is_void_v<Result>) {
        PG_TRY();
        { call(); }
        PG_CATCH();
        {
            MemoryContextSwitchTo(caller_context);
            edata = CopyErrorData();
            FlushErrorState();
        }
        PG_END_TRY();
        if (edata) throw PgRethrow(edata);
    } else {
        static_assert(std::is_trivially_copyable_v<Result>, "pg_call returns plain values");
        Result volatile_result{};
        PG_TRY();
        { volatile_result = call(); }
        PG_CATCH();
        {
            MemoryContextSwitchTo(caller_context);
            edata = CopyErrorData();
            FlushErrorState();
        }
        PG_END_TRY();
        if (edata) throw PgRethrow(edata);
        return volatile_result;
    }
}

}  // namespace idem::pg

// Defines the SQL-callable C function `name`; the braces that follow are its C++ body,
// which sees `fcinfo` and returns a Datum.
#define IDEM_FUNCTION(name)                                                              \
    static Datum name##_body(FunctionCallInfo fcinfo);                                   \
    extern "C" {                                                                         \
    PG_FUNCTION_INFO_V1(name);                                                           \
    }                                                                                    \
    extern "C" Datum name(PG_FUNCTION_ARGS) {                                            \
        return idem::pg::guarded([fcinfo]() { return name##_body(fcinfo); });            \
    }                                                                                    \
    static Datum name##_body(FunctionCallInfo fcinfo)
