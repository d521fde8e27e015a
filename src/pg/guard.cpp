#include "pg/guard.hpp"

#include "core/error.hpp"

#include <cstring>
#include <new>

namespace idem::pg {

namespace {

int sqlstate_of(core::ErrorKind kind) {
    switch (kind) {
        case core::ErrorKind::InvalidParameter:
            return ERRCODE_INVALID_PARAMETER_VALUE;
        case core::ErrorKind::InvalidText:
            return ERRCODE_INVALID_TEXT_REPRESENTATION;
        case core::ErrorKind::LimitExceeded:
            return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
    }
    return ERRCODE_INTERNAL_ERROR;
}

}  // namespace

void copy_text(char *target, std::size_t size, const char *text) noexcept {
    std::size_t length = text == nullptr ? 0 : std::strlen(text);
    if (length >= size) {
        // Cut before the character that does not fit whole: back over continuation bytes.
        length = size - 1;
        while (length > 0 && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80) length--;
    }
    if (length > 0) std::memcpy(target, text, length);
    target[length] = '\0';
}

SqlError::SqlError(int sqlstate, const char *message, const char *detail, const char *hint)
    : sqlstate_(sqlstate) {
    copy_text(message_, sizeof message_, message);
    copy_text(detail_, sizeof detail_, detail);
    copy_text(hint_, sizeof hint_, hint);
}

void describe_current_exception(ErrorReport *report) noexcept {
    report->sqlstate = ERRCODE_INTERNAL_ERROR;
    report->message[0] = report->detail[0] = report->hint[0] = '\0';
    try {
        throw;
    } catch (const SqlError &e) {
        report->sqlstate = e.sqlstate();
        copy_text(report->message, sizeof report->message, e.what());
        copy_text(report->detail, sizeof report->detail, e.detail());
        copy_text(report->hint, sizeof report->hint, e.hint());
    } catch (const core::Error &e) {
        report->sqlstate = sqlstate_of(e.kind());
        copy_text(report->message, sizeof report->message, e.what());
    } catch (const std::bad_alloc &) {
        report->sqlstate = ERRCODE_OUT_OF_MEMORY;
        copy_text(report->message, sizeof report->message, "out of memory");
    } catch (const std::exception &e) {
        copy_text(report->message, sizeof report->message, "unexpected C++ exception");
        copy_text(report->detail, sizeof report->detail, e.what());
    } catch (...) {
        copy_text(report->message, sizeof report->message, "unexpected C++ exception");
    }
}

void raise_report(const ErrorReport &report, const ErrorStack &entry) noexcept {
    if (PG_exception_stack != entry.exception_stack || error_context_stack != entry.context_stack) {
        // An exception left a PG_TRY block (or a context callback's scope) on its way here:
        // those frames are gone. Back to the stack of the guard's caller, then say so.
        PG_exception_stack = entry.exception_stack;
        error_context_stack = entry.context_stack;
        elog(LOG, "idempotency: a C++ exception left a PG_TRY block; error stack restored");
    }
    ereport(ERROR, (errcode(report.sqlstate), errmsg_internal("%s", report.message),
                    report.detail[0] ? errdetail_internal("%s", report.detail) : 0,
                    report.hint[0] ? errhint("%s", report.hint) : 0));
    pg_unreachable();
}

namespace {

// Fills report from the error being handled; call only inside a PG_CATCH, in `context` (not
// ErrorContext). Whatever happens, it returns: copying the error allocates, and an error
// raised by that copy (out of memory) would longjmp past the PG_CATCH into frames above, the
// C++ frames of call_postgres's caller included. So the copy runs in a PG_TRY of its own; if
// it fails, the report keeps the first error's SQLSTATE and says that its text was lost. The
// caller flushes both errors with FlushErrorState().
void describe_postgres_error(ErrorReport *report, MemoryContext context) noexcept {
    report->sqlstate = geterrcode();
    copy_text(report->message, sizeof report->message,
              "out of memory while copying an error's message");
    report->detail[0] = '\0';
    report->hint[0] = '\0';
    PG_TRY();
    {
        ErrorData *edata = CopyErrorData();
        copy_text(report->message, sizeof report->message, edata->message);
        copy_text(report->detail, sizeof report->detail, edata->detail);
        copy_text(report->hint, sizeof report->hint, edata->hint);
        FreeErrorData(edata);
    }
    PG_CATCH();
    { MemoryContextSwitchTo(context); }
    PG_END_TRY();
}

}  // namespace

void call_postgres(void (*fn)(void *) noexcept, void *arg) {
    MemoryContext context = CurrentMemoryContext;
    ErrorReport report;
    volatile bool failed = false;
    PG_TRY();
    { fn(arg); }
    PG_CATCH();
    {
        MemoryContextSwitchTo(context);
        describe_postgres_error(&report, context);
        FlushErrorState();
        failed = true;
    }
    PG_END_TRY();
    if (failed)
        throw SqlError(report.sqlstate, report.message, report.detail[0] ? report.detail : nullptr,
                       report.hint[0] ? report.hint : nullptr);
}

}  // namespace idem::pg
