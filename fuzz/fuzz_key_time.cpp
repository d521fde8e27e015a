// libFuzzer target: creation time of UUIDv7 / ULID keys (src/core/key_time.*).
// Checks: key_time_ms never crashes and returns a 48-bit time; a UUIDv7 made from the first
// 16 bytes reads back its time in every accepted spelling (hyphens or not, any case).
#include "core/error.hpp"
#include "core/key_time.hpp"

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

using namespace idem::core;

static std::string uuid_text(const Uuid &uuid, bool hyphens, bool upper) {
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    std::string text;
    for (std::size_t i = 0; i < uuid.size(); ++i) {
        if (hyphens && (i == 4 || i == 6 || i == 8 || i == 10)) text += '-';
        text += digits[uuid[i] >> 4];
        text += digits[uuid[i] & 0xf];
    }
    return text;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char *>(data), size);
    const auto ms = key_time_ms(input);
    if (ms && (*ms < 0 || *ms >= (std::int64_t{1} << 48))) std::abort();
    // Only 26 (ULID), 32 and 36 (UUID) characters can carry a time.
    if (ms && size != 26 && size != 32 && size != 36) std::abort();

    if (size < 16) return 0;
    std::int64_t unix_ms = 0;
    for (int i = 0; i < 6; ++i) unix_ms = unix_ms << 8 | data[i];
    const auto fraction = static_cast<std::uint16_t>((data[6] << 8 | data[7]) & 0x0fff);
    std::array<std::uint8_t, 8> random;
    std::memcpy(random.data(), data + 8, random.size());
    const Uuid uuid = make_uuidv7(unix_ms, fraction, random);
    for (bool hyphens : {true, false}) {
        for (bool upper : {false, true}) {
            const auto back = key_time_ms(uuid_text(uuid, hyphens, upper));
            if (!back || *back != unix_ms) std::abort();
        }
    }
    // Out-of-range times are refused with core::Error, never wrapped.
    try {
        (void)make_uuidv7(unix_ms | (std::int64_t{1} << 48), fraction, random);
        std::abort();
    } catch (const Error &) {
    }
    return 0;
}
