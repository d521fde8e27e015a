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

constexpr std::int64_t kSec = 1000000;

TEST(Expiry, NewClaimExpiresRetentionAfterItsLease) {
    // now 100 s, lock_ttl 30 s, retention 10 s: the lease outlives now + retention.
    EXPECT_EQ(expiry_at_claim(kNoExpiry, 130 * kSec, 10 * kSec), 140 * kSec);
    EXPECT_EQ(expiry_at_claim(kNoExpiry, 100 * kSec, 10 * kSec), 110 * kSec);  // no lease
}

TEST(Expiry, ClaimNeverShortensAnExpiry) {
    // A takeover near the end of the window moves expires_at past its lease...
    EXPECT_EQ(expiry_at_claim(105 * kSec, 134 * kSec, 10 * kSec), 144 * kSec);
    // ...and one with a shorter lease and retention than the first claim keeps it.
    EXPECT_EQ(expiry_at_claim(500 * kSec, 134 * kSec, 10 * kSec), 500 * kSec);
}

TEST(Expiry, ClaimIsNeverAbsentWhileItsLeaseIsLive) {
    for (std::int64_t old : {kNoExpiry, std::int64_t{0}, 50 * kSec, 131 * kSec})
        for (std::int64_t retention : {std::int64_t{1}, kSec, 1000 * kSec})
            EXPECT_GT(expiry_at_claim(old, 130 * kSec, retention), 130 * kSec);
}

TEST(Expiry, CompleteWithinTheLeaseKeepsTheExpiry) {
    EXPECT_EQ(expiry_at_complete(140 * kSec, 130 * kSec, 120 * kSec), 140 * kSec);
    EXPECT_EQ(expiry_at_complete(140 * kSec, 130 * kSec, 130 * kSec), 140 * kSec);
}

TEST(Expiry, LateCompleteKeepsTheRetentionAfterIt) {
    // The lease ended at 130 s, the complete came at 137 s: the answer stays 10 s after it.
    EXPECT_EQ(expiry_at_complete(140 * kSec, 130 * kSec, 137 * kSec), 147 * kSec);
    // Every claim then complete: the answer is replayable for the retention after complete.
    for (std::int64_t done : {120 * kSec, 130 * kSec, 139 * kSec}) {
        const std::int64_t expires = expiry_at_claim(kNoExpiry, 130 * kSec, 10 * kSec);
        EXPECT_GE(expiry_at_complete(expires, 130 * kSec, done), done + 10 * kSec);
    }
}

TEST(Expiry, SumsSaturate) {
    EXPECT_EQ(expiry_at_claim(kNoExpiry, INT64_MAX - kSec, 10 * kSec), INT64_MAX);
    EXPECT_EQ(expiry_at_complete(INT64_MAX - kSec, 0, 10 * kSec), INT64_MAX);
    EXPECT_EQ(expiry_at_complete(10 * kSec, INT64_MIN, kSec), INT64_MAX);
}

}  // namespace
}  // namespace idem::core
