#include "core/key_time.hpp"

#include <string>

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace idem::core {
namespace {

std::string uuid_text(const Uuid &uuid) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < uuid.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
        out.push_back(kHex[uuid[i] >> 4]);
        out.push_back(kHex[uuid[i] & 0xf]);
    }
    return out;
}

TEST(KeyTime, UuidV7) {
    EXPECT_EQ(key_time_ms("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"), 0x017f22e279b0);
    EXPECT_EQ(key_time_ms("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"), 0x017f22e279b0);
    EXPECT_EQ(key_time_ms("017f22e279b07cc398c4dc0c0c07398f"), 0x017f22e279b0);
    EXPECT_EQ(key_time_ms("ffffffff-ffff-7fff-bfff-ffffffffffff"), 0xffffffffffff);
    EXPECT_EQ(key_time_ms("00000000-0000-7000-8000-000000000000"), 0);
}

TEST(KeyTime, RejectsOtherUuids) {
    const char *bad[] = {
        "f47ac10b-58cc-4372-a567-0e02b2c3d479",   // version 4
        "017f22e2-79b0-6cc3-98c4-dc0c0c07398f",   // version 6
        "017f22e2-79b0-7cc3-c8c4-dc0c0c07398f",   // variant 110
        "017f22e2-79b0-7cc3-18c4-dc0c0c07398f",   // variant 0
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398",    // 35 characters
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398f0",  // 37 characters
        "017f22e279b0-7cc3-98c4-dc0c-0c07398f",   // hyphens misplaced
        "017f22e2-79b0-7cc3-98c4+dc0c0c07398f",   // not a hyphen
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398g",   // not hex
        "017f22e279b07cc398c4dc0c0c07398",        // 31 hex digits
        "017f22e279b07cc398c4dc0c-c07398f",       // hyphen in the 32-digit form
        "{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}", "",
    };
    for (const char *key : bad) EXPECT_EQ(key_time_ms(key), std::nullopt) << key;
}

TEST(KeyTime, Ulid) {
    // The vector published with the ULID specification.
    EXPECT_EQ(key_time_ms("01ARYZ6S41TSV4RRFFQ69G5FAV"), 1469918176385);
    EXPECT_EQ(key_time_ms("01ARZ3NDEKTSV4RRFFQ69G5FAV"), 1469922850259);
    EXPECT_EQ(key_time_ms("01arz3ndektsv4rrffq69g5fav"), 1469922850259);
    EXPECT_EQ(key_time_ms("00000000000000000000000000"), 0);
    EXPECT_EQ(key_time_ms("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"), (std::int64_t{1} << 48) - 1);
}

TEST(KeyTime, RejectsBadUlids) {
    const char *bad[] = {
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",   // overflows 128 bits
        "Z1ARZ3NDEKTSV4RRFFQ69G5FAV",   // overflows 128 bits
        "01ARZ3NDEKTSV4RRFFQ69G5FA",    // 25 characters
        "01ARZ3NDEKTSV4RRFFQ69G5FAVX",  // 27 characters
        "01ARZ3NDEKTSV4RRFFQ69G5FAI",   // I is not in the alphabet
        "01ARZ3NDEKTSV4RRFFQ69G5FAl",   // nor l
        "01ARZ3NDEKTSV4RRFFQ69G5FAO",   // nor O
        "01ARZ3NDEKTSV4RRFFQ69G5FAu",   // nor u
        "01ARZ3NDEK-SV4RRFFQ69G5FAV",  "01ARZ3NDEK SV4RRFFQ69G5FAV",
    };
    for (const char *key : bad) EXPECT_EQ(key_time_ms(key), std::nullopt) << key;
    EXPECT_EQ(key_time_ms("order-42"), std::nullopt);
}

TEST(MakeUuidV7, Layout) {
    const Uuid u =
        make_uuidv7(0x017f22e279b0, 0xcc3, {0xff, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77});
    EXPECT_EQ(uuid_text(u), "017f22e2-79b0-7cc3-bf11-223344556677");
    const Uuid zero = make_uuidv7(0, 0, {});
    EXPECT_EQ(uuid_text(zero), "00000000-0000-7000-8000-000000000000");
}

TEST(MakeUuidV7, VersionVariantAndRoundTrip) {
    const std::int64_t times[] = {0, 1, 1469918176385, 0x017f22e279b0, (std::int64_t{1} << 48) - 1};
    for (const std::int64_t ms : times) {
        for (const std::uint8_t r : {0x00, 0x3f, 0x40, 0xc0, 0xff}) {
            const Uuid u = make_uuidv7(ms, 4095, {r, r, r, r, r, r, r, r});
            EXPECT_EQ(u[6] >> 4, 7);
            EXPECT_EQ(u[8] & 0xc0, 0x80);
            EXPECT_EQ(u[8] & 0x3f, r & 0x3f);
            EXPECT_EQ(u[6] & 0xf, 0xf);
            EXPECT_EQ(u[7], 0xff);
            EXPECT_EQ(key_time_ms(uuid_text(u)), ms);
        }
    }
}

TEST(MakeUuidV7, RejectsOutOfRange) {
    EXPECT_THROW(make_uuidv7(-1, 0, {}), Error);
    EXPECT_THROW(make_uuidv7(std::int64_t{1} << 48, 0, {}), Error);
    EXPECT_THROW(make_uuidv7(0, 4096, {}), Error);
    try {
        make_uuidv7(0, 0xffff, {});
        FAIL() << "no exception";
    } catch (const Error &e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidParameter);
    }
}

}  // namespace
}  // namespace idem::core
