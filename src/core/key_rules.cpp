// Argument checks of the key lifecycle calls, and the advisory lock hash.
#include "core/key_rules.hpp"

#include <string>

#include "core/error.hpp"
#include "core/no_postgres.hpp"

namespace idem::core {

void check_name(std::string_view what, std::string_view text) {
    if (text.empty()) {
        throw Error(ErrorKind::InvalidParameter, std::string(what) + " must not be empty");
    }
    if (text.size() > kMaxNameBytes) {
        throw Error(ErrorKind::LimitExceeded, std::string(what) + " is too long (at most " +
                                                  std::to_string(kMaxNameBytes) + " bytes)");
    }
}

void check_status_code(int code) {
    if (code < 100 || code > 599) {
        throw Error(ErrorKind::InvalidParameter,
                    "status code " + std::to_string(code) + " is out of range (100 to 599)");
    }
}

std::uint64_t lock_hash(std::string_view scope, std::string_view key) {
    constexpr std::uint64_t kOffset = 0xcbf29ce484222325ULL;
    constexpr std::uint64_t kPrime = 0x100000001b3ULL;
    std::uint64_t h = kOffset;
    const auto mix = [&h](unsigned char byte) { h = (h ^ byte) * kPrime; };
    for (const char c : scope) mix(static_cast<unsigned char>(c));
    mix(0);
    for (const char c : key) mix(static_cast<unsigned char>(c));
    return h;
}

namespace {

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
    std::int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
    return sum;
}

}  // namespace

std::int64_t expiry_at_claim(std::int64_t expires_at, std::int64_t locked_until,
                             std::int64_t retention) {
    const std::int64_t from_lease = saturating_add(locked_until, retention);
    return from_lease > expires_at ? from_lease : expires_at;
}

std::int64_t expiry_at_complete(std::int64_t expires_at, std::int64_t locked_until,
                                std::int64_t completed_at) {
    if (completed_at <= locked_until) return expires_at;
    std::int64_t late;
    if (__builtin_sub_overflow(completed_at, locked_until, &late)) return INT64_MAX;
    return saturating_add(expires_at, late);
}

}  // namespace idem::core
