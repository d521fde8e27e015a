#include "pg/guard.hpp"

#include "core/error.hpp"

#include <cstring>
#include <new>

namespace idem::pg {

namespace {

void copy_text(char *target, std::size_t size, const char *text) {
    if (text == nullptr) {
        target[0] = '\0';
        return;
    }
    std::strncpy(target, text, size - 1);
    target[size - 1] = '\0';
}

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

void raise_report(const ErrorReport &report) {
    ereport(ERROR, (errcode(report.sqlstate), errmsg_internal("%s", report.message),
                    report.detail[0] ? errdetail_internal("%s", report.detail) : 0,
                    report.hint[0] ? errhint("%s", report.hint) : 0));
    pg_unreachable();
}

}  // namespace idem::pg
