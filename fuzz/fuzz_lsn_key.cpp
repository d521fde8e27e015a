// libFuzzer target: the 128-bit WAL-position key codec (src/core/lsn_key.*).
// Checks: parse_lsn_key_hex accepts exactly 32 hex digits and round-trips through the
// lowercase writer; bytes round-trip through decode/encode; byte order is key order;
// write_lsn_text stays within kLsnTextMaxLength.
#include "core/lsn_key.hpp"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

using namespace idem::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char *>(data), size);
    const auto parsed = parse_lsn_key_hex(input);
    if (parsed) {
        if (size != kLsnKeyHexLength) std::abort();
        char hex[kLsnKeyHexLength];
        write_lsn_key_hex(*parsed, hex);
        for (std::size_t i = 0; i < size; ++i)
            if (hex[i] != std::tolower(static_cast<unsigned char>(input[i]))) std::abort();
    }

    if (size < 32) return 0;
    LsnKeyBytes a, b;
    std::memcpy(a.data(), data, 16);
    std::memcpy(b.data(), data + 16, 16);
    const LsnKey ka = decode_lsn_key(a), kb = decode_lsn_key(b);
    if (encode_lsn_key(ka) != a || encode_lsn_key(kb) != b) std::abort();
    const int order = std::memcmp(a.data(), b.data(), 16);
    if (lsn_key_less(ka, kb) != (order < 0) || lsn_key_less(kb, ka) != (order > 0)) std::abort();
    if (is_valid_lsn_key(ka) != (ka.lsn <= ka.commit_lsn)) std::abort();

    char text[kLsnTextMaxLength + 1];
    std::memset(text, 0, sizeof text);
    const std::size_t n = write_lsn_text(ka.lsn, text);
    if (n < 3 || n > kLsnTextMaxLength || text[kLsnTextMaxLength] != 0) std::abort();
    if (std::memchr(text, '/', n) == nullptr) std::abort();
    return 0;
}
