// Block arithmetic of next_key.
#include "core/block_allocator.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <set>

namespace idem::core {
namespace {

ErrorKind kind_of(void (*f)()) {
    try {
        f();
    } catch (const Error &e) {
        return e.kind();
    }
    ADD_FAILURE() << "no error";
    return ErrorKind::InvalidText;
}

TEST(BlockAllocator, FirstBlockStartsAtOne) {
    Block b = next_block(0, 1000);
    EXPECT_EQ(b.first, 1);
    EXPECT_EQ(b.last, 1000);
}

TEST(BlockAllocator, BlockFollowsTheBound) {
    Block b = next_block(41, 3);
    EXPECT_EQ(b.first, 42);
    EXPECT_EQ(b.last, 44);
    b = next_block(44, 1);
    EXPECT_EQ(b.first, 45);
    EXPECT_EQ(b.last, 45);
}

TEST(BlockAllocator, LastBlockIsCappedAtTheMaximum) {
    Block b = next_block(kMaxStreamValue - 2, 1000);
    EXPECT_EQ(b.first, kMaxStreamValue - 1);
    EXPECT_EQ(b.last, kMaxStreamValue);
    b = next_block(kMaxStreamValue - 1, kMaxBlockSize);
    EXPECT_EQ(b.first, kMaxStreamValue);
    EXPECT_EQ(b.last, kMaxStreamValue);
}

TEST(BlockAllocator, ExhaustedStreamThrows) {
    EXPECT_EQ(kind_of([] { next_block(kMaxStreamValue, 1); }), ErrorKind::LimitExceeded);
}

TEST(BlockAllocator, BadSizesThrow) {
    EXPECT_EQ(kind_of([] { check_block_size(0); }), ErrorKind::InvalidParameter);
    EXPECT_EQ(kind_of([] { check_block_size(-5); }), ErrorKind::InvalidParameter);
    EXPECT_EQ(kind_of([] { check_block_size(kMaxBlockSize + 1); }), ErrorKind::InvalidParameter);
    EXPECT_EQ(kind_of([] { next_block(0, 0); }), ErrorKind::InvalidParameter);
    EXPECT_EQ(kind_of([] { next_block(-1, 10); }), ErrorKind::InvalidParameter);
    check_block_size(1);
    check_block_size(kMaxBlockSize);
}

TEST(BlockCursor, EmptyCursorHasNoValue) {
    BlockCursor c{0, 0};
    EXPECT_FALSE(c.has_value());
    EXPECT_EQ(c.refill_base(0), 0);
    EXPECT_EQ(c.refill_base(17), 17);
}

TEST(BlockCursor, HandsOutTheBlockInOrderThenRunsDry) {
    BlockCursor c{0, 0};
    EXPECT_EQ(c.start(next_block(c.refill_base(0), 3)), 1);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c.take(), 2);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c.take(), 3);
    EXPECT_FALSE(c.has_value());
    EXPECT_EQ(c.refill_base(3), 3);
    EXPECT_EQ(c.start(next_block(c.refill_base(3), 3)), 4);
}

// After a restart the cursor is empty and storage holds the last durable bound: every new
// value lies above everything that bound covered.
TEST(BlockCursor, RestartResumesAboveTheDurableBound) {
    BlockCursor before{0, 0};
    std::int64_t stored = 0;
    std::int64_t highest = 0;
    for (int i = 0; i < 25; i++) {
        if (!before.has_value()) {
            Block b = next_block(before.refill_base(stored), 10);
            stored = b.last;  // made durable before the first value is used
            highest = before.start(b);
        } else {
            highest = before.take();
        }
        EXPECT_LE(highest, stored);
    }
    BlockCursor after{0, 0};
    Block b = next_block(after.refill_base(stored), 10);
    EXPECT_GT(after.start(b), highest);
}

// A cursor that outlived its storage row (a stale cache) never goes back either.
TEST(BlockCursor, StaleCursorNeverGoesBack) {
    BlockCursor c{0, 0};
    c.start(next_block(0, 100));
    while (c.has_value()) c.take();
    EXPECT_EQ(c.refill_base(5), 100);
    EXPECT_EQ(c.start(next_block(c.refill_base(5), 100)), 101);
}

TEST(BlockCursor, ValuesAreUniqueAndIncreasing) {
    BlockCursor c{0, 0};
    std::int64_t stored = 0, last = 0;
    std::set<std::int64_t> seen;
    for (int i = 0; i < 1000; i++) {
        std::int64_t v;
        if (c.has_value()) {
            v = c.take();
        } else {
            Block b = next_block(c.refill_base(stored), 7);
            stored = b.last;
            v = c.start(b);
        }
        EXPECT_GT(v, last);
        EXPECT_TRUE(seen.insert(v).second);
        last = v;
    }
}

}  // namespace
}  // namespace idem::core
