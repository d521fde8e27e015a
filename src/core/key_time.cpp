// Creation time of UUIDv7 / ULID keys, and UUIDv7 generation.
#include "core/key_time.hpp"
#include "core/hex.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/no_postgres.hpp"

namespace idem::core {
namespace {

constexpr std::int64_t kMaxUnixMs = std::int64_t{1} << 48;  // exclusive

bool is_hyphen_position(std::size_t i) {
    return i == 8 || i == 13 || i == 18 || i == 23;
}

// A UUID as 36 characters with hyphens at 8, 13, 18, 23, or as 32 hex digits.
std::optional<Uuid> parse_uuid(std::string_view text) {
    const bool hyphens = text.size() == 36;
    if (!hyphens && text.size() != 32) return std::nullopt;
    Uuid uuid{};
    std::size_t nibble = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (hyphens && is_hyphen_position(i)) {
            if (text[i] != '-') return std::nullopt;
            continue;
        }
        const int v = hex_value(text[i]);
        if (v < 0) return std::nullopt;
        uuid[nibble / 2] |= static_cast<std::uint8_t>(nibble % 2 == 0 ? v << 4 : v);
        ++nibble;
    }
    return uuid;
}

std::optional<std::int64_t> uuidv7_time_ms(std::string_view text) {
    const std::optional<Uuid> uuid = parse_uuid(text);
    if (!uuid || (*uuid)[6] >> 4 != 7 || ((*uuid)[8] & 0xc0) != 0x80) return std::nullopt;
    std::int64_t ms = 0;
    for (int i = 0; i < 6; ++i) ms = ms << 8 | (*uuid)[i];
    return ms;
}

// Value of a Crockford base32 digit (any case, no aliases), or -1.
int crockford_value(char c) {
    static constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    const void *found = std::memchr(kAlphabet, c, 32);
    return found == nullptr ? -1 : static_cast<int>(static_cast<const char *>(found) - kAlphabet);
}

// A ULID: 26 characters, the first 10 the 48-bit time (a first digit above 7 overflows 128 bits).
std::optional<std::int64_t> ulid_time_ms(std::string_view text) {
    if (text.size() != 26) return std::nullopt;
    std::int64_t ms = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const int v = crockford_value(text[i]);
        if (v < 0 || (i == 0 && v > 7)) return std::nullopt;
        if (i < 10) ms = ms * 32 + v;
    }
    return ms;
}

}  // namespace

std::optional<std::int64_t> key_time_ms(std::string_view key) {
    if (key.size() == 26) return ulid_time_ms(key);
    return uuidv7_time_ms(key);
}

Uuid make_uuidv7(std::int64_t unix_ms, std::uint16_t sub_ms_fraction,
                 const std::array<std::uint8_t, 8> &random) {
    if (unix_ms < 0 || unix_ms >= kMaxUnixMs) {
        throw Error(ErrorKind::InvalidParameter, "UUIDv7 time is out of range");
    }
    if (sub_ms_fraction > 0xfff) {
        throw Error(ErrorKind::InvalidParameter, "UUIDv7 sub-millisecond fraction is out of range");
    }
    Uuid uuid{};
    for (int i = 0; i < 6; ++i) uuid[i] = static_cast<std::uint8_t>(unix_ms >> (40 - 8 * i));
    uuid[6] = static_cast<std::uint8_t>(0x70 | sub_ms_fraction >> 8);
    uuid[7] = static_cast<std::uint8_t>(sub_ms_fraction);
    uuid[8] = static_cast<std::uint8_t>(0x80 | (random[0] & 0x3f));
    for (int i = 1; i < 8; ++i) uuid[8 + i] = random[i];
    return uuid;
}

}  // namespace idem::core
