#include "core/position.hpp"

#include "core/error.hpp"

#include <algorithm>

#include "core/no_postgres.hpp"

namespace idem::core {

Position position_from_int64(std::int64_t value) {
    if (value < 0)
        throw Error(ErrorKind::InvalidParameter,
                    "position must not be negative, not " + std::to_string(value));
    Position p{};
    for (int i = 15; i >= 8; i--, value >>= 8) p[i] = std::uint8_t(value & 0xff);
    return p;
}

std::string position_decimal(const Position &position) {
    // Repeated division by 10 of the big-endian bytes.
    Position n = position;
    std::string digits;
    bool zero = false;
    while (!zero) {
        unsigned remainder = 0;
        zero = true;
        for (std::uint8_t &byte : n) {
            unsigned current = (remainder << 8) | byte;
            byte = std::uint8_t(current / 10);
            remainder = current % 10;
            if (byte != 0) zero = false;
        }
        digits.push_back(char('0' + remainder));
    }
    std::reverse(digits.begin(), digits.end());
    return digits;
}

}  // namespace idem::core
