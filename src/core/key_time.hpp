// Time-ordered keys: UUIDv7 generation, and the creation time embedded in UUIDv7 / ULID keys.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace idem::core {

using Uuid = std::array<std::uint8_t, 16>;

// Unix time in milliseconds embedded in a key: a UUIDv7 in text form (36 characters with
// hyphens, or 32 hex digits, any case) or a ULID (26 Crockford base32 characters, any case,
// no I/L/O/U aliases, first character 0..7).
// std::nullopt for any other key (including other UUID versions and malformed text).
std::optional<std::int64_t> key_time_ms(std::string_view key);

// A UUIDv7 (RFC 9562): 48-bit unix_ms, version 7, 12 bits of sub-millisecond fraction
// (sub_ms_fraction is 0..4095, "method 3"), variant 10, then 62 random bits taken from random
// (the low 6 bits of random[0], then random[1..7]).
// Throws Error(InvalidParameter) unless 0 <= unix_ms < 2^48 and sub_ms_fraction <= 4095.
Uuid make_uuidv7(std::int64_t unix_ms, std::uint16_t sub_ms_fraction,
                 const std::array<std::uint8_t, 8> &random);

}  // namespace idem::core
