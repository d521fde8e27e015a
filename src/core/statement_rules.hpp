// execute_once's rules that need no PostgreSQL: what a statement's result becomes as the
// stored response, how many values its parameters take, and which kept plan a statement not
// yet prepared replaces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace idem::core {

// How many prepared statements a backend keeps for execute_once (least recently used first
// out): enough for a service's one-statement endpoints, small enough that a caller sending
// ever new texts costs a bounded amount of memory.
constexpr std::size_t kStatementCacheSize = 64;

// What the statement's result becomes:
// - Null: no result columns (INSERT / UPDATE / DELETE / MERGE without RETURNING) or no row:
//   the response is NULL;
// - ColumnValue: one row of one json or jsonb column: that value (NULL stays NULL);
// - RowObject: one row otherwise: the row as a JSON object, column names as keys;
// - TooManyRows: more than one row, refused (the answer must not depend on how many rows a
//   statement happened to return; aggregate them, jsonb_agg, into one).
enum class ResponseForm { Null, ColumnValue, RowObject, TooManyRows };
ResponseForm response_form(bool has_columns, std::uint64_t rows, int columns,
                           bool first_column_is_json) noexcept;

// Throws Error(InvalidParameter) unless `given` values were passed for a statement with
// `expected` parameters ($1 .. $expected).
void check_parameter_count(std::size_t given, std::size_t expected);

// The cache's key for a statement text (FNV-1a 64; the text is compared too on a hit).
std::uint64_t statement_hash(std::string_view text) noexcept;

// The slot a statement not in the cache takes: the first empty one (last use 0), else the
// least recently used, never one whose statement is running (running[i] > 0: a statement
// that calls execute_once for other texts must not lose its own plan under it). `slots`
// when every slot's statement is running (the new plan is then not kept).
std::size_t slot_to_replace(const std::uint64_t *last_used, const int *running,
                            std::size_t slots) noexcept;

}  // namespace idem::core
