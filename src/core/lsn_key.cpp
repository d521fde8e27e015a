// The 128-bit WAL-position key codec (see lsn_key.hpp for why keys are unique).
#include "core/lsn_key.hpp"
#include "core/hex.hpp"

#include <string>

#include "core/error.hpp"
#include "core/no_postgres.hpp"

namespace idem::core {
namespace {

constexpr char kLowerHex[] = "0123456789abcdef";
constexpr char kUpperHex[] = "0123456789ABCDEF";

void put_be64(std::uint64_t value, std::uint8_t *out) noexcept {
    for (int i = 7; i >= 0; --i) {
        out[i] = static_cast<std::uint8_t>(value);
        value >>= 8;
    }
}

std::uint64_t get_be64(const std::uint8_t *in) noexcept {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | in[i];
    return value;
}

void write_hex64(std::uint64_t value, char *out) noexcept {
    for (int i = 15; i >= 0; --i) {
        out[i] = kLowerHex[value & 0xf];
        value >>= 4;
    }
}

// Upper-case hex of a 32-bit value without leading zeros ("0" for zero).
std::size_t write_hex32(std::uint32_t value, char *out) noexcept {
    char digits[8];
    std::size_t n = 0;
    do {
        digits[n++] = kUpperHex[value & 0xf];
        value >>= 4;
    } while (value != 0);
    for (std::size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
    return n;
}

std::string lsn_string(std::uint64_t lsn) {
    char text[kLsnTextMaxLength];
    return std::string(text, write_lsn_text(lsn, text));
}

}  // namespace

bool is_valid_lsn_key(LsnKey key) noexcept {
    return key.lsn <= key.commit_lsn;
}

void check_lsn_key(LsnKey key) {
    if (!is_valid_lsn_key(key)) {
        throw Error(ErrorKind::InvalidParameter,
                    "lsn " + lsn_string(key.lsn) + " is after commit_lsn " +
                        lsn_string(key.commit_lsn) +
                        ": a message is written before its transaction commits");
    }
}

bool lsn_key_less(LsnKey a, LsnKey b) noexcept {
    return a.commit_lsn != b.commit_lsn ? a.commit_lsn < b.commit_lsn : a.lsn < b.lsn;
}

LsnKeyBytes encode_lsn_key(LsnKey key) noexcept {
    LsnKeyBytes bytes;
    put_be64(key.commit_lsn, bytes.data());
    put_be64(key.lsn, bytes.data() + 8);
    return bytes;
}

LsnKey decode_lsn_key(const LsnKeyBytes &bytes) noexcept {
    return LsnKey{get_be64(bytes.data()), get_be64(bytes.data() + 8)};
}

void write_lsn_key_hex(LsnKey key, char *out) noexcept {
    write_hex64(key.commit_lsn, out);
    write_hex64(key.lsn, out + 16);
}

std::optional<LsnKey> parse_lsn_key_hex(std::string_view text) noexcept {
    if (text.size() != kLsnKeyHexLength) return std::nullopt;
    std::uint64_t half[2] = {0, 0};
    for (std::size_t i = 0; i < kLsnKeyHexLength; ++i) {
        int digit = hex_value(text[i]);
        if (digit < 0) return std::nullopt;
        half[i / 16] = (half[i / 16] << 4) | static_cast<std::uint64_t>(digit);
    }
    return LsnKey{half[0], half[1]};
}

std::size_t write_lsn_text(std::uint64_t lsn, char *out) noexcept {
    std::size_t n = write_hex32(static_cast<std::uint32_t>(lsn >> 32), out);
    out[n++] = '/';
    return n + write_hex32(static_cast<std::uint32_t>(lsn), out + n);
}

}  // namespace idem::core
