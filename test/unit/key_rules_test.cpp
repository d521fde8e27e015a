#include "core/key_rules.hpp"

#include <climits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace idem::core {
namespace {

template <class F>
std::optional<Error> error_of(F f) {
    try {
        f();
    } catch (const Error &e) {
        return e;
    }
    return std::nullopt;
}

TEST(CheckName, Boundaries) {
    EXPECT_NO_THROW(check_name("key", "k"));
    EXPECT_NO_THROW(check_name("key", std::string(kMaxNameBytes, 'k')));

    const auto empty = error_of([] { check_name("scope", ""); });
    ASSERT_TRUE(empty);
    EXPECT_EQ(empty->kind(), ErrorKind::InvalidParameter);
    EXPECT_STREQ(empty->what(), "scope must not be empty");

    const auto long_key = error_of([] { check_name("key", std::string(kMaxNameBytes + 1, 'k')); });
    ASSERT_TRUE(long_key);
    EXPECT_EQ(long_key->kind(), ErrorKind::LimitExceeded);
    EXPECT_EQ(std::string(long_key->what()).rfind("key is too long", 0), 0u) << long_key->what();
}

TEST(CheckName, CountsBytesNotCharacters) {
    std::string text;
    while (text.size() + 2 <= kMaxNameBytes) text += "\xc3\xa9";  // 127 two-byte characters
    EXPECT_NO_THROW(check_name("key", text));
    text += "\xc3\xa9";  // 256 bytes
    EXPECT_THROW(check_name("key", text), Error);
}

TEST(CheckStatusCode, Boundaries) {
    EXPECT_NO_THROW(check_status_code(100));
    EXPECT_NO_THROW(check_status_code(200));
    EXPECT_NO_THROW(check_status_code(599));
    for (const int code : {99, 600, 0, -200, INT_MIN, INT_MAX}) {
        const auto e = error_of([code] { check_status_code(code); });
        ASSERT_TRUE(e) << code;
        EXPECT_EQ(e->kind(), ErrorKind::InvalidParameter);
    }
}

// FNV-1a 64, written out independently of the implementation.
std::uint64_t fnv1a(std::string_view bytes) {
    std::uint64_t h = 14695981039346656037ULL;
    for (const unsigned char c : bytes) {
        h ^= c;
        h *= 1099511628211ULL;
    }
    return h;
}

TEST(LockHash, KnownValues) {
    EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cULL);  // published FNV-1a 64 vector
    EXPECT_EQ(lock_hash("a", "b"), 0xe5d29919042666b2ULL);
    EXPECT_EQ(lock_hash("a", "b"), fnv1a(std::string_view("a\0b", 3)));
    EXPECT_EQ(lock_hash("", ""), fnv1a(std::string_view("\0", 1)));
    EXPECT_EQ(lock_hash("payments", "\xc3\xa9-42"),
              fnv1a(std::string_view("payments\0\xc3\xa9-42", 14)));
}

TEST(LockHash, SeparatesScopeFromKey) {
    EXPECT_EQ(lock_hash("ab", "c"), 0xfd61c083ef200867ULL);
    EXPECT_EQ(lock_hash("a", "bc"), 0xab40f6820d40b523ULL);
    EXPECT_NE(lock_hash("ab", "c"), lock_hash("a", "bc"));
    EXPECT_NE(lock_hash("a", "b"), lock_hash("b", "a"));
}

}  // namespace
}  // namespace idem::core
