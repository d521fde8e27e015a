// Consumer positions of accept: unsigned 128-bit numbers stored as 16 big-endian bytes (a uuid),
// so that byte order (uuid comparison) is numeric order.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace idem::core {

using Position = std::array<std::uint8_t, 16>;

// A bigint position; throws Error(InvalidParameter) if it is negative.
Position position_from_int64(std::int64_t value);

// The unsigned value in decimal, e.g. "340282366920938463463374607431768211455".
std::string position_decimal(const Position &position);

}  // namespace idem::core
