#include "core/statement_rules.hpp"

#include <string>

#include "core/error.hpp"
#include "core/no_postgres.hpp"

namespace idem::core {

ResponseForm response_form(bool has_columns, std::uint64_t rows, int columns,
                           bool first_column_is_json) noexcept {
    if (!has_columns || rows == 0 || columns == 0) return ResponseForm::Null;
    if (rows > 1) return ResponseForm::TooManyRows;
    return columns == 1 && first_column_is_json ? ResponseForm::ColumnValue
                                                : ResponseForm::RowObject;
}

void check_parameter_count(std::size_t given, std::size_t expected) {
    if (given == expected) return;
    throw Error(ErrorKind::InvalidParameter, "the statement takes " + std::to_string(expected) +
                                                 " parameter" + (expected == 1 ? "" : "s") + ", " +
                                                 std::to_string(given) + " given");
}

std::uint64_t statement_hash(std::string_view text) noexcept {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    for (unsigned char c : text) {
        hash ^= c;
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

std::size_t slot_to_replace(const std::uint64_t *last_used, const int *running,
                            std::size_t slots) noexcept {
    std::size_t oldest = slots;
    for (std::size_t i = 0; i < slots; i++) {
        if (running[i] > 0) continue;
        if (last_used[i] == 0) return i;
        if (oldest == slots || last_used[i] < last_used[oldest]) oldest = i;
    }
    return oldest;
}

}  // namespace idem::core
