// Consumer positions of accept: 128-bit unsigned, big-endian.
#include "core/error.hpp"
#include "core/position.hpp"

#include <gtest/gtest.h>

namespace idem::core {
namespace {

TEST(Position, Int64IsZeroExtendedBigEndian) {
    Position p = position_from_int64(0x0102030405060708LL);
    for (int i = 0; i < 8; i++) EXPECT_EQ(p[i], 0);
    for (int i = 8; i < 16; i++) EXPECT_EQ(p[i], i - 7);
}

TEST(Position, Int64OrderIsByteOrder) {
    const std::int64_t values[] = {0, 1, 255, 256, 65535, 1LL << 40, INT64_MAX - 1, INT64_MAX};
    for (std::size_t i = 1; i < sizeof values / sizeof values[0]; i++)
        EXPECT_LT(position_from_int64(values[i - 1]), position_from_int64(values[i]));
}

TEST(Position, NegativeInt64Throws) {
    try {
        position_from_int64(-1);
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidParameter);
    }
}

TEST(Position, Decimal) {
    EXPECT_EQ(position_decimal(Position{}), "0");
    EXPECT_EQ(position_decimal(position_from_int64(7)), "7");
    EXPECT_EQ(position_decimal(position_from_int64(1000000)), "1000000");
    EXPECT_EQ(position_decimal(position_from_int64(INT64_MAX)), "9223372036854775807");
    Position max;
    max.fill(0xff);
    EXPECT_EQ(position_decimal(max), "340282366920938463463374607431768211455");
    Position two64{};
    two64[7] = 1;
    EXPECT_EQ(position_decimal(two64), "18446744073709551616");
}

}  // namespace
}  // namespace idem::core
