#include "core/lsn_key.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace idem::core {
namespace {

std::string key_hex(LsnKey key) {
    char out[kLsnKeyHexLength];
    write_lsn_key_hex(key, out);
    return std::string(out, sizeof out);
}

std::string lsn_text(std::uint64_t lsn) {
    char out[kLsnTextMaxLength];
    return std::string(out, write_lsn_text(lsn, out));
}

TEST(LsnKey, ByteLayoutIsBigEndianCommitThenLsn) {
    LsnKey key{0x0102030405060708ULL, 0x1112131415161718ULL};
    LsnKeyBytes bytes = encode_lsn_key(key);
    const std::uint8_t expected[16] = {1,    2,    3,    4,    5,    6,    7,    8,
                                       0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
    EXPECT_EQ(0, std::memcmp(bytes.data(), expected, 16));
    LsnKey back = decode_lsn_key(bytes);
    EXPECT_EQ(back.commit_lsn, key.commit_lsn);
    EXPECT_EQ(back.lsn, key.lsn);
}

TEST(LsnKey, Hex) {
    EXPECT_EQ(key_hex({0x16B3748ULL, 0x16B3710ULL}), "00000000016b374800000000016b3710");
    EXPECT_EQ(key_hex({~0ULL, ~0ULL}), std::string(32, 'f'));
    EXPECT_EQ(key_hex({0, 0}), std::string(32, '0'));
    auto parsed = parse_lsn_key_hex("00000000016B374800000000016b3710");
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->commit_lsn, 0x16B3748ULL);
    EXPECT_EQ(parsed->lsn, 0x16B3710ULL);
    EXPECT_FALSE(parse_lsn_key_hex(""));
    EXPECT_FALSE(parse_lsn_key_hex(std::string(31, '0')));
    EXPECT_FALSE(parse_lsn_key_hex(std::string(33, '0')));
    EXPECT_FALSE(parse_lsn_key_hex("00000000016b3748-0000000016b3710"));
    EXPECT_FALSE(parse_lsn_key_hex("g0000000016b374800000000016b3710"));
}

TEST(LsnKey, LsnTextLikePostgres) {
    EXPECT_EQ(lsn_text(0), "0/0");
    EXPECT_EQ(lsn_text(0x16B3748ULL), "0/16B3748");
    EXPECT_EQ(lsn_text(0x00000016B374D848ULL), "16/B374D848");
    EXPECT_EQ(lsn_text(~0ULL), "FFFFFFFF/FFFFFFFF");
    EXPECT_EQ(lsn_text(0x100000000ULL), "1/0");
}

TEST(LsnKey, ValidityRule) {
    EXPECT_TRUE(is_valid_lsn_key({100, 50}));
    EXPECT_TRUE(is_valid_lsn_key({100, 100}));  // last message ends where the commit starts
    EXPECT_TRUE(is_valid_lsn_key({0, 0}));
    EXPECT_FALSE(is_valid_lsn_key({100, 101}));
    EXPECT_NO_THROW(check_lsn_key({100, 100}));
    try {
        check_lsn_key({0x100, 0x101});
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidParameter);
        EXPECT_STREQ(e.what(),
                     "lsn 0/101 is after commit_lsn 0/100: a message is written before its "
                     "transaction commits");
    }
}

TEST(LsnKey, ByteOrderEqualsKeyOrder) {
    std::mt19937_64 random(42);
    for (int i = 0; i < 100000; ++i) {
        // Small ranges too, so that equal halves occur.
        std::uint64_t mask = (i % 2) ? ~0ULL : 0xfULL;
        LsnKey a{random() & mask, random() & mask};
        LsnKey b{random() & mask, random() & mask};
        LsnKeyBytes ea = encode_lsn_key(a), eb = encode_lsn_key(b);
        int bytes_cmp = std::memcmp(ea.data(), eb.data(), 16);
        EXPECT_EQ(bytes_cmp < 0, lsn_key_less(a, b));
        EXPECT_EQ(bytes_cmp > 0, lsn_key_less(b, a));
        EXPECT_EQ(key_hex(a) < key_hex(b), lsn_key_less(a, b));  // hex order too
        auto back = parse_lsn_key_hex(key_hex(a));
        ASSERT_TRUE(back);
        EXPECT_EQ(back->commit_lsn, a.commit_lsn);
        EXPECT_EQ(back->lsn, a.lsn);
    }
}

// A model of the WAL: records are appended back to back (8-byte aligned, 8 KiB pages with
// a 24-byte header, where a record ending exactly on a boundary ends *at* the boundary while
// the next starts after the header). Concurrent transactions interleave their records; each
// message key is (start of its commit record, end of its message record). Decoding emits
// transactions in commit order. Keys must be unique and strictly increasing, although the
// last message of most transactions ends exactly where its commit record starts.
TEST(LsnKey, ModelledStreamIsStrictlyIncreasingAndUnique) {
    constexpr std::uint64_t kPage = 8192, kHeader = 24;
    std::mt19937_64 random(7);
    std::uint64_t insert = kHeader;
    auto append = [&](std::uint64_t size, std::uint64_t *start, std::uint64_t *end) {
        if (insert % kPage == 0) insert += kHeader;
        *start = insert;
        std::uint64_t left = (size + 7) / 8 * 8;
        while (left > 0) {  // continue over pages
            std::uint64_t room = kPage - insert % kPage;
            std::uint64_t take = std::min(room, left);
            insert += take;
            left -= take;
            if (left > 0) insert += kHeader;
        }
        *end = insert;
    };
    struct Txn {
        std::vector<std::uint64_t> message_ends;
        int messages_left;
    };
    std::vector<Txn> open;
    std::vector<LsnKey> stream;
    int shared = 0;
    for (int step = 0; step < 200000; ++step) {
        if (open.size() < 4 && random() % 3 == 0) open.push_back({{}, int(random() % 5) + 1});
        if (open.empty()) continue;
        Txn &txn = open[random() % open.size()];
        std::uint64_t start, end;
        if (txn.messages_left > 0) {
            append(40 + random() % 300, &start, &end);
            txn.message_ends.push_back(end);
            --txn.messages_left;
        } else {
            append(34, &start, &end);  // the commit record
            for (std::uint64_t message_end : txn.message_ends) {
                stream.push_back({start, message_end});
                if (message_end == start) ++shared;
            }
            open.erase(open.begin() + (&txn - open.data()));
        }
    }
    ASSERT_GT(stream.size(), 10000u);
    EXPECT_GT(shared, 100);  // the case that matters does occur
    std::set<std::string> seen;
    for (std::size_t i = 0; i < stream.size(); ++i) {
        EXPECT_TRUE(is_valid_lsn_key(stream[i]));
        if (i > 0) {
            ASSERT_TRUE(lsn_key_less(stream[i - 1], stream[i])) << i;
        }
        EXPECT_TRUE(seen.insert(key_hex(stream[i])).second);
    }
    // The message LSN alone would not do: it collides with commit LSNs of other transactions.
    std::set<std::uint64_t> commit_starts;
    for (const LsnKey &key : stream) commit_starts.insert(key.commit_lsn);
    int lsn_equals_other_commit = 0;
    for (const LsnKey &key : stream)
        if (key.lsn != key.commit_lsn && commit_starts.count(key.lsn)) ++lsn_equals_other_commit;
    EXPECT_GT(lsn_equals_other_commit, 0);
}

}  // namespace
}  // namespace idem::core
