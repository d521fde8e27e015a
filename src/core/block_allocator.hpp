// Block arithmetic of next_key: a stream hands out values from a block whose upper bound was
// made durable before the first value of the block was handed out.
#pragma once

#include <cstdint>

namespace idem::core {

constexpr std::int64_t kMaxStreamValue = INT64_MAX;
constexpr std::int64_t kMaxBlockSize = INT32_MAX;

// Throws Error(InvalidParameter) unless 1 <= size <= kMaxBlockSize.
void check_block_size(std::int64_t size);

// Values first..last, both included.
struct Block {
    std::int64_t first;
    std::int64_t last;
};

// The block after every value up to `reserved` (the durable bound, >= 0): first = reserved + 1,
// last = reserved + size, capped at kMaxStreamValue. Throws Error(LimitExceeded) once reserved
// is kMaxStreamValue (the stream is exhausted).
Block next_block(std::int64_t reserved, std::int64_t size);

// A stream's place in its block; plain data, so it can live in shared memory.
// Values handed_out + 1 .. reserved remain; {0, 0} is an empty cursor.
struct BlockCursor {
    std::int64_t handed_out;  // the last value handed out (0: none yet)
    std::int64_t reserved;    // the durable bound of the current block

    bool has_value() const { return handed_out < reserved; }
    // The next value; requires has_value().
    std::int64_t take() { return ++handed_out; }
    // Bound to write before refilling, given the bound found in storage: never below anything
    // this cursor or storage has covered.
    std::int64_t refill_base(std::int64_t stored) const {
        return stored > reserved ? stored : reserved;
    }
    // Switches to `block` (made durable by the caller) and takes its first value.
    std::int64_t start(const Block &block) {
        reserved = block.last;
        handed_out = block.first;
        return block.first;
    }
};

}  // namespace idem::core
