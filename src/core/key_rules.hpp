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

// Retention of a key record (times in microseconds). A record is never absent while a claim
// on it is live, and a stored answer is replayable for at least the retention after it was
// stored:
// - at every claim (new, takeover, retry after fail) expires_at becomes locked_until +
//   retention, unless it is later already: the retention counts from the end of the lease;
// - complete within the lease keeps it (completed_at <= locked_until, so completed_at +
//   retention <= expires_at); complete after the lease lapsed (no one took over) moves it
//   forward by as much as the complete came late, so the distance from the lease's end to
//   expires_at (at least the retention) now counts from completed_at.
// The sums saturate at INT64_MAX: callers check their arguments' range beforehand.
// expires_at: the record's current expiry, or kNoExpiry for a new record.
constexpr std::int64_t kNoExpiry = INT64_MIN;
std::int64_t expiry_at_claim(std::int64_t expires_at, std::int64_t locked_until,
                             std::int64_t retention);
std::int64_t expiry_at_complete(std::int64_t expires_at, std::int64_t locked_until,
                                std::int64_t completed_at);

}  // namespace idem::core
