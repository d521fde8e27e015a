// Validation of the arguments of the key lifecycle calls, and the lock hash of a key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace idem::core {

constexpr std::size_t kMaxNameBytes = 255;           // scope and key
constexpr std::size_t kMaxResponseBytes = 10 << 20;  // stored response / error, as jsonb

// Throws Error(InvalidParameter) naming `what` if text is empty, or
// Error(LimitExceeded) if it is longer than kMaxNameBytes bytes.
void check_name(std::string_view what, std::string_view text);

// Throws Error(InvalidParameter) unless 100 <= code <= 599.
void check_status_code(int code);

// 64-bit hash of (scope, key) for the advisory lock: stable across processes, platforms and
// releases (FNV-1a 64 over scope, a 0 byte, key), never depends on the process.
std::uint64_t lock_hash(std::string_view scope, std::string_view key);

}  // namespace idem::core
